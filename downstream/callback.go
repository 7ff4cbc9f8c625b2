package downstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/internal/tracing"
	"github.com/leadintake/leadintake/webhook"
)

// TargetCallback names the calls to clients' callbacks, in errors and
// metrics.
const TargetCallback = "callback"

// Callbacks delivers clients' callbacks: signed POSTs to URLs the operator
// configured. It is safe for concurrent use.
type Callbacks struct {
	http    *http.Client
	metrics *Metrics
	now     func() time.Time
}

// NewCallbacks returns a Callbacks whose every delivery attempt is bounded by
// timeout (default 10 s). metrics may be nil.
func NewCallbacks(timeout time.Duration, metrics *Metrics) *Callbacks {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	dialer := &net.Dialer{Timeout: min(timeout, 5*time.Second), KeepAlive: 30 * time.Second}
	return &Callbacks{
		http: &http.Client{
			Timeout: timeout,
			// Every delivery is a span of its lead's trace, and carries
			// its traceparent.
			Transport: tracing.Transport(&http.Transport{
				Proxy:               http.ProxyFromEnvironment,
				DialContext:         dialer.DialContext,
				MaxIdleConns:        100,
				MaxIdleConnsPerHost: 10,
				IdleConnTimeout:     90 * time.Second,
				TLSHandshakeTimeout: min(timeout, 5*time.Second),
			}, "callback"),
			// A redirect is an answer of its own: not 2xx, not followed.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		metrics: metrics,
		now:     time.Now,
	}
}

// Deliver makes one delivery attempt: body POSTed to rawURL with
// Content-Type: application/json and the Standard Webhooks headers
// (webhook-id id, a fresh webhook-timestamp, webhook-signature by secret).
// The URL's user-info is sent as basic auth. Any 2xx is delivery. A
// failure is a *destination.Error (Op callback): Transient (5xx, 408,
// 429, a time-out, a broken connection; with the Retry-After asked for)
// or Rejected (any other answer, a redirect included: the receiver did not
// take the delivery, and will not by being asked again). No error names more of the URL than its scheme
// and host: its path (Zapier, n8n, Slack and Teams put their secret there),
// user-info and query are the receiver's secrets, and errors end in logs
// and in River's job rows (River UI shows them).
func (c *Callbacks) Deliver(ctx context.Context, rawURL string, secret webhook.Secret, id string, body []byte) (err error) {
	start := c.now()
	result := "success"
	defer func() {
		if err != nil {
			result = "permanent"
			if destination.Classify(err) == destination.Transient {
				result = "transient"
			}
		}
		c.metrics.observe(TargetCallback, result, time.Since(start))
	}()
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse quotes the URL in its error.
		return destination.Errorf(TargetCallback, destination.Rejected, "the callback URL does not parse")
	}
	user := u.User
	u.User = nil
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return destination.Errorf(TargetCallback, destination.Rejected, "no request can be made of the callback URL")
	}
	if user != nil {
		pass, _ := user.Password()
		req.SetBasicAuth(user.Username(), pass)
	}
	req.Header.Set("Content-Type", "application/json")
	webhook.SetHeaders(req.Header, secret, id, c.now(), body)
	resp, err := c.http.Do(req)
	if err != nil {
		return destination.TransportError(TargetCallback, redactURLError(err))
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
		resp.Body.Close()
	}()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return &destination.Error{Op: TargetCallback, Status: resp.StatusCode, Class: destination.Rejected}
	}
	e := destination.StatusError(TargetCallback, resp.StatusCode, resp.Header, c.now())
	if e.Class != destination.Transient {
		// A conflict or refused credentials is the receiver's verdict on
		// this delivery, like any other 4xx.
		e.Class = destination.Rejected
	}
	return e
}

// redactURLError returns err with the URL that net/http's *url.Error
// quotes cut to its scheme and host (Origin): its path, query and
// user-info stay out of the message.
func redactURLError(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	return &url.Error{Op: ue.Op, URL: Origin(ue.URL), Err: ue.Err}
}

// Origin is what errors and logs may show of a callback's URL: its scheme
// and host ("the callback URL" when it does not parse). A callback's path,
// query and user-info often hold the receiver's secret.
func Origin(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return "the callback URL"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
}

// maxResponseBytes bounds what is read of an answer.
const maxResponseBytes = 1 << 20
