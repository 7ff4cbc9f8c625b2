package destination

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/leadintake/leadintake/internal/tracing"
)

// DefaultTimeout bounds each call when the configuration does not
// (DOWNSTREAM_TIMEOUT).
const DefaultTimeout = 10 * time.Second

// MaxAnswer bounds what is read of an answer.
const MaxAnswer = 1 << 20

// NewHTTPClient returns the HTTP client of one destination: its own
// kept-alive connections, timeout per call (DefaultTimeout when zero), a
// span of the lead's trace per call carrying its traceparent (named
// "METHOD name", name being the destination's kind, never its URL: "PUT
// hubspot", "POST slack"), and no redirect followed (a redirect is an answer of its own,
// classified like any other).
func NewHTTPClient(name string, timeout time.Duration) *http.Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	dialer := &net.Dialer{Timeout: min(timeout, 5*time.Second), KeepAlive: 30 * time.Second}
	return &http.Client{
		Timeout: timeout,
		Transport: tracing.Transport(&http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           dialer.DialContext,
			MaxIdleConns:          200,
			MaxIdleConnsPerHost:   100,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   min(timeout, 5*time.Second),
			ExpectContinueTimeout: time.Second,
		}, name),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Request is one HTTP call of a kind.
type Request struct {
	// Op names the call in errors ("upsert", "token", ...); Step names it
	// in the delivery log ("crm", "crm_lookup", "crm_token", ...).
	Op, Step string
	Method   string
	URL      string
	Header   http.Header
	// Body is sent as is; nil sends none. JSON sets it from a value.
	Body []byte
	// NoResend keeps net/http from sending the request again on its own
	// when a kept-alive connection drops (it would for a request that
	// carries an Idempotency-Key): a create is sent again only after a
	// look-up, by the lead's life.
	NoResend bool
}

// JSON sets the request's body to v encoded, with its Content-Type.
func (r *Request) JSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return &Error{Op: r.Op, Class: Rejected, Err: fmt.Errorf("encode: %w", err)}
	}
	r.Body = b
	if r.Header == nil {
		r.Header = http.Header{}
	}
	r.Header.Set("Content-Type", "application/json")
	return nil
}

// Response is an answer, its body read up to MaxAnswer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// OK reports whether the status is one of ok (any 2xx when ok is empty).
func (r *Response) OK(ok ...int) bool {
	if len(ok) == 0 {
		return r.Status >= 200 && r.Status < 300
	}
	for _, s := range ok {
		if r.Status == s {
			return true
		}
	}
	return false
}

// Decode reads the answer's JSON into v. An answer that cannot be read
// after a success is transient and uncertain: the write it answers may
// have been applied.
func (r *Response) Decode(op string, v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return &Error{Op: op, Status: r.Status, Class: Transient, Uncertain: true, Err: errors.New("unreadable answer")}
	}
	return nil
}

// Do makes one call with c, records it for the delivery log (Observe), and
// returns the answer whatever its status. An error is a call that got no
// answer, classified by TransportError, or a request that could not be
// made.
func Do(ctx context.Context, c *http.Client, req *Request) (*Response, error) {
	var body io.Reader
	if req.Body != nil {
		body = bytes.NewReader(req.Body)
	}
	hr, err := http.NewRequestWithContext(ctx, req.Method, req.URL, body)
	if err != nil {
		// The error may quote the URL, which may hold a secret.
		return nil, &Error{Op: req.Op, Class: Rejected, Err: errors.New("bad request URL")}
	}
	for k, vs := range req.Header {
		hr.Header[k] = vs
	}
	if hr.Header.Get("Accept") == "" {
		hr.Header.Set("Accept", "application/json")
	}
	if req.NoResend {
		hr.GetBody = nil
	}
	start := time.Now()
	resp, err := c.Do(hr)
	if err != nil {
		err = redactURL(err)
		Observe(ctx, Observation{Step: req.Step, StartedAt: start, Duration: time.Since(start), Outcome: OutcomeOf(0, err)})
		return nil, TransportError(req.Op, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer))
	Observe(ctx, Observation{Step: req.Step, StartedAt: start, Duration: time.Since(start), Outcome: strconv.Itoa(resp.StatusCode)})
	if err != nil {
		// The status came, the body broke off: whatever it said, the
		// request may have been applied.
		return nil, &Error{Op: req.Op, Status: resp.StatusCode, Class: Transient, Uncertain: true, Err: errors.New("answer cut short")}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxAnswer))
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// redactURL replaces a *url.Error's URL by its origin: net/http quotes the
// whole URL, and a path (a Slack or Teams webhook's) or a query may hold a
// secret.
func redactURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return &url.Error{Op: ue.Op, URL: Origin(ue.URL), Err: ue.Err}
	}
	return err
}

// Origin is a URL's scheme and host, all of it that an error, a log line or
// a span may show: a path, a query or user-info may hold a secret.
func Origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(a URL)"
	}
	return u.Scheme + "://" + u.Host
}

// Outcomes of a call without a status, in the delivery log.
const (
	OutcomeTimeout         = "timeout"
	OutcomeConnectionError = "connection_error"
)

// OutcomeOf names the end of a call in the delivery log: its status, or
// timeout, or connection_error.
func OutcomeOf(status int, err error) string {
	switch {
	case status != 0:
		return strconv.Itoa(status)
	case Timeout(err):
		return OutcomeTimeout
	default:
		return OutcomeConnectionError
	}
}

// Observation is one call a destination made, for the delivery log: a lead's
// write may take several (a token, a person, a look-up, the write).
type Observation struct {
	Step      string
	StartedAt time.Time
	Duration  time.Duration
	// Outcome is the HTTP status or SMTP reply code, or timeout, or
	// connection_error.
	Outcome string
}

type observerKey struct{}

// WithObserver returns ctx whose calls (Observe) are reported to f.
func WithObserver(ctx context.Context, f func(Observation)) context.Context {
	return context.WithValue(ctx, observerKey{}, f)
}

// Observe reports a call to the observer of ctx, if it has one. Do reports
// each HTTP call; a kind that speaks another protocol reports its own.
func Observe(ctx context.Context, o Observation) {
	if f, ok := ctx.Value(observerKey{}).(func(Observation)); ok && o.Step != "" {
		f(o)
	}
}
