package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"uuid"
)

// Defaults of Options.
const (
	DefaultTimeout      = 15 * time.Second
	DefaultMaxWait      = 20 * time.Second
	DefaultBackoffBase  = 250 * time.Millisecond
	DefaultBackoffMax   = 30 * time.Second
	DefaultPollInterval = time.Second
)

// maxRetryAfter bounds a server's Retry-After: a larger value is taken as
// this, so that a typo on the server cannot park a caller for a day.
const maxRetryAfter = time.Hour

// maxAnswerBytes bounds the body of an answer the client reads; the
// service's answers are a few hundred bytes.
const maxAnswerBytes = 1 << 20

// Options configure a Client. The zero value of each field means its
// default.
type Options struct {
	// HTTPClient sends the requests. Default: an http.Client on
	// http.DefaultTransport. Its own Timeout, if set, must leave room for
	// Timeout plus MaxWait, or held requests are cut short.
	HTTPClient *http.Client
	// Timeout bounds one attempt (sending, and reading the whole answer),
	// beyond the time the server is asked to hold it with Prefer: wait: an
	// attempt that takes longer is abandoned and retried. Default
	// DefaultTimeout.
	Timeout time.Duration
	// MaxWait is the N of the Prefer: wait=N sent with every submission and
	// poll, rounded down to whole seconds and cut to what the context has
	// left: how long the server may hold a request for the key to finish.
	// Default DefaultMaxWait; negative sends no Prefer.
	MaxWait time.Duration
	// BackoffBase and BackoffMax shape the delay between attempts when the
	// server sends no Retry-After: the n-th consecutive failure waits a
	// random time between half of and all of min(BackoffBase·2ⁿ⁻¹,
	// BackoffMax). Defaults DefaultBackoffBase, DefaultBackoffMax.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// PollInterval is the pace of polling a key the server does not hold,
	// when the server sends no Retry-After. Default DefaultPollInterval.
	PollInterval time.Duration
	// Sleep waits d or until ctx ends, returning ctx's error then. Tests
	// set it to record and skip the waits. Default: a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Events, when set, is called with each step of a submission or a
	// wait, on the calling goroutine: to show progress or to log.
	Events func(Event)
	// UserAgent is sent as User-Agent. Default "leadintake-go-client".
	UserAgent string
}

// Client submits leads to one leadintake service as one API client. It is
// safe for concurrent use; each call keeps its own key.
type Client struct {
	base  string // scheme://host[/path], without a trailing slash
	token string
	hc    *http.Client
	o     Options
}

// New returns a Client of the service at baseURL (such as
// "https://leads.example.com"), authenticating with token. opts may be nil.
func New(baseURL, token string, opts *Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("leadintake: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("leadintake: base URL %q: want http(s)://host", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("leadintake: base URL %q: no query or fragment, please", baseURL)
	}
	if token == "" {
		return nil, errors.New("leadintake: the token is empty")
	}
	if strings.ContainsAny(token, "\r\n") {
		return nil, errors.New("leadintake: the token holds a line break")
	}
	c := &Client{base: strings.TrimRight(u.String(), "/"), token: token}
	if opts != nil {
		c.o = *opts
	}
	o := &c.o
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	c.hc = o.HTTPClient
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxWait == 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = DefaultBackoffBase
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = DefaultBackoffMax
	}
	o.BackoffMax = max(o.BackoffMax, o.BackoffBase)
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.UserAgent == "" {
		o.UserAgent = "leadintake-go-client"
	}
	return c, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// NewKey returns a fresh idempotency key: a random (version 4) UUID, which
// says nothing about the enquiry. The service refuses keys made only of
// digits and separators (they look like telephone numbers); the rare UUID
// without a letter is drawn again.
func NewKey() string {
	for {
		k := uuid.NewV4().String()
		if strings.ContainsAny(k, "abcdef") {
			return k
		}
	}
}

// SubmitOptions configure one submission; nil means the defaults.
type SubmitOptions struct {
	// Key is the enquiry's idempotency key: set it to resume an enquiry
	// whose outcome is unknown (OutcomeUnknownError.Key) or whose key the
	// caller keeps itself. Default: a new key (NewKey).
	Key string
	// Supersedes names the key of an earlier enquiry that this one amends
	// (see Amend).
	Supersedes string
}

// Submit sends one enquiry, lead, and waits for its final answer. lead is a
// json.RawMessage or []byte holding one JSON object, sent as it is, or any
// value encoding to one with encoding/json; either way the bytes are fixed
// before the first attempt and every retry sends them again, under the same
// key.
//
// It returns the Result of a completed lead. A lead that failed is a
// *Failed; a request the service refused is an *APIError; a context that
// ended before a final answer gives an *OutcomeUnknownError with the key.
// An error of none of these types means nothing was sent (lead could not be
// encoded).
func (c *Client) Submit(ctx context.Context, lead any, opts *SubmitOptions) (*Result, error) {
	body, err := encodeLead(lead)
	if err != nil {
		return nil, err
	}
	var so SubmitOptions
	if opts != nil {
		so = *opts
	}
	if so.Key == "" {
		so.Key = NewKey()
	}
	s := c.session(so.Key)
	return s.submit(ctx, body, so.Supersedes)
}

// Amend sends lead as an amendment of the enquiry of supersededKey: a new
// enquiry (a new key, unless opts.Key is set) carrying Supersedes:
// supersededKey, which the service applies to the same CRM record. It is
// how an enquiry edited after an uncertain outcome is sent, rather than
// sending different data under the old key (which the service refuses as
// idempotency_key_reused). It waits and returns like Submit; a resumed
// amendment must carry the same supersededKey.
func (c *Client) Amend(ctx context.Context, supersededKey string, lead any, opts *SubmitOptions) (*Result, error) {
	if supersededKey == "" {
		return nil, errors.New("leadintake: Amend needs the key of the enquiry it supersedes")
	}
	var so SubmitOptions
	if opts != nil {
		so = *opts
	}
	so.Supersedes = supersededKey
	return c.Submit(ctx, lead, &so)
}

// Wait waits for the final answer of key, as Submit does after the service
// accepted it, and returns like Submit. A key the service does not know for
// this client is an *APIError with Code CodeNotFound.
func (c *Client) Wait(ctx context.Context, key string) (*Result, error) {
	s := c.session(key)
	return s.wait(ctx, false)
}

// Status returns what the service reports about key now, retrying
// transient failures (with back-off) until ctx ends. A key the service does
// not know for this client is an *APIError with Code CodeNotFound.
func (c *Client) Status(ctx context.Context, key string) (*Operation, error) {
	s := c.session(key)
	for {
		ans, err := s.exchange(ctx, http.MethodGet, s.operationURL(), nil, "", 0)
		if err == nil {
			switch {
			case ans.status == http.StatusOK:
				if op, perr := parseOperation(ans.body); perr == nil {
					return op, nil
				}
				err = ans.unexpected()
			case !transient(ans.status):
				return nil, ans.apiError(key)
			default:
				err = ans.unexpected()
			}
		}
		if perr := s.pause(ctx, err, ans); perr != nil {
			return nil, fmt.Errorf("leadintake: status of key %s: %w", key, perr)
		}
	}
}

// encodeLead returns the bytes to send for lead.
func encodeLead(lead any) ([]byte, error) {
	var body []byte
	switch v := lead.(type) {
	case json.RawMessage:
		body = v
	case []byte:
		body = v
	default:
		b, err := json.Marshal(lead)
		if err != nil {
			return nil, fmt.Errorf("leadintake: encode the lead: %w", err)
		}
		body = b
	}
	if !json.Valid(body) {
		return nil, errors.New("leadintake: the lead is not valid JSON")
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, errors.New("leadintake: the lead is not a JSON object")
	}
	// The caller's slice could change under a retry: keep a copy.
	return bytes.Clone(body), nil
}

// session is one key's conversation with the service: its attempts, what
// the service said about it, and why the last attempt failed.
type session struct {
	c   *Client
	key string

	attempts int
	failures int // consecutive transient failures, for the back-off
	accepted bool
	leadID   string
	state    string
	lastErr  error
	// poll is the pace of polling while the server does not hold requests:
	// its last Retry-After, else Options.PollInterval.
	poll time.Duration
}

func (c *Client) session(key string) *session {
	return &session{c: c, key: key, poll: c.o.PollInterval}
}

func (s *session) operationURL() string {
	return s.c.base + "/v1/operations/" + url.PathEscape(s.key)
}

func (s *session) emit(e Event) {
	if s.c.o.Events == nil {
		return
	}
	e.Key = s.key
	if e.Attempt == 0 {
		e.Attempt = s.attempts
	}
	s.c.o.Events(e)
}

// submit POSTs body under the session's key until the service answers for
// good, then waits for the final answer if it is not one yet.
func (s *session) submit(ctx context.Context, body []byte, supersedes string) (*Result, error) {
	for {
		if ctx.Err() != nil {
			return nil, s.unknown(ctx)
		}
		sent := time.Now()
		ans, err := s.exchange(ctx, http.MethodPost, s.c.base+"/v1/leads", body, supersedes, s.waitSeconds(ctx))
		if err == nil {
			switch {
			case ans.status == http.StatusAccepted:
				if p, perr := parseProcessing(ans.body); perr == nil {
					s.accept(p.LeadID, p.Status, ans)
					// The first poll keeps the 202's pace too, unless the
					// POST was held that long already.
					if d := s.poll - time.Since(sent); d > 0 {
						if s.c.o.Sleep(ctx, d) != nil {
							return nil, s.unknown(ctx)
						}
					}
					return s.wait(ctx, true)
				}
				err = ans.unexpected()
			default:
				if res, ferr := final(s.key, ans.status, ans.body); !errors.Is(ferr, errNotFinal) {
					s.emit(Event{Kind: EventFinal, StatusCode: ans.status})
					return res, ferr
				}
				if !transient(ans.status) {
					s.emit(Event{Kind: EventFinal, StatusCode: ans.status})
					return nil, ans.apiError(s.key)
				}
				err = ans.unexpected()
			}
		}
		if s.pause(ctx, err, ans) != nil {
			return nil, s.unknown(ctx)
		}
	}
}

// accept records the service's acknowledgement of the key (a 202).
func (s *session) accept(leadID, state string, ans *answer) {
	s.accepted, s.leadID, s.state, s.failures = true, leadID, state, 0
	if ra, ok := retryAfter(ans.header); ok && ra > 0 {
		s.poll = ra
	}
	s.emit(Event{Kind: EventAccepted, StatusCode: ans.status, LeadID: leadID, State: state})
}

// wait polls the key's operation until it holds a final response. After
// the service accepted the key (afterAccept), a refusal of the poll (a
// revoked token, say) leaves the outcome unknown; for Wait it is the
// answer.
func (s *session) wait(ctx context.Context, afterAccept bool) (*Result, error) {
	for {
		if ctx.Err() != nil {
			return nil, s.unknown(ctx)
		}
		start := time.Now()
		ans, err := s.exchange(ctx, http.MethodGet, s.operationURL(), nil, "", s.waitSeconds(ctx))
		if err == nil {
			switch {
			case ans.status == http.StatusOK:
				op, perr := parseOperation(ans.body)
				if perr != nil {
					err = ans.unexpected()
					break
				}
				if op.Response != nil {
					s.emit(Event{Kind: EventFinal, StatusCode: op.Response.Status, LeadID: op.LeadID, State: op.State})
					return finalOf(s.key, op.Response)
				}
				if !s.accepted || op.State != s.state {
					s.emit(Event{Kind: EventWaiting, StatusCode: ans.status, LeadID: op.LeadID, State: op.State})
				}
				s.accepted, s.leadID, s.state, s.failures = true, op.LeadID, op.State, 0
				if ra, ok := retryAfter(ans.header); ok && ra > 0 {
					s.poll = ra
				}
				// A server that held the request for its Prefer: wait
				// has taken the pace's time already; one that does not
				// hold requests is asked again after the pace.
				if d := s.poll - time.Since(start); d > 0 {
					if s.c.o.Sleep(ctx, d) != nil {
						return nil, s.unknown(ctx)
					}
				}
				continue
			case !transient(ans.status):
				apiErr := ans.apiError(s.key)
				if afterAccept {
					s.lastErr = &answerError{status: ans.status, code: apiErr.Code, message: apiErr.Message}
					return nil, s.unknownBecause(s.lastErr)
				}
				s.emit(Event{Kind: EventFinal, StatusCode: ans.status})
				return nil, apiErr
			default:
				err = ans.unexpected()
			}
		}
		if s.pause(ctx, err, ans) != nil {
			return nil, s.unknown(ctx)
		}
	}
}

// finalOf returns the Result or *Failed of a finished key's response, even
// one whose body this client does not recognise.
func finalOf(key string, fr *FinalResponse) (*Result, error) {
	res, err := final(key, fr.Status, fr.Body)
	if !errors.Is(err, errNotFinal) {
		return res, err
	}
	if fr.Status < 400 {
		return &Result{Key: key, StatusCode: fr.Status, Body: fr.Body}, nil
	}
	return nil, &Failed{Key: key, StatusCode: fr.Status, Body: fr.Body}
}

// waitSeconds is the N of Prefer: wait=N for the next request: MaxWait,
// cut to what ctx has left less a second for the answer to travel; 0 sends
// no Prefer.
func (s *session) waitSeconds(ctx context.Context) int {
	w := s.c.o.MaxWait
	if w <= 0 {
		return 0
	}
	if dl, ok := ctx.Deadline(); ok {
		w = min(w, time.Until(dl)-time.Second)
	}
	return max(0, int(w/time.Second))
}

// answer is one HTTP answer, read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// exchange sends one request and reads its whole answer within one
// attempt's time: Options.Timeout plus the wait asked for. An error means no
// answer (a transport error, a time-out, a body cut short).
func (s *session) exchange(ctx context.Context, method, target string, body []byte, supersedes string, wait int) (*answer, error) {
	limit := s.c.o.Timeout + time.Duration(wait)*time.Second
	actx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var rd io.Reader
	if body != nil {
		// A bytes.Reader gives the request a GetBody: the transport's own
		// re-send and any redirect send these very bytes again.
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(actx, method, target, rd)
	if err != nil {
		return nil, err
	}
	h := req.Header
	h.Set("Authorization", "Bearer "+s.c.token)
	h.Set("Accept", "application/json")
	h.Set("User-Agent", s.c.o.UserAgent)
	if method == http.MethodPost {
		h.Set("Idempotency-Key", s.key)
		h.Set("Content-Type", "application/json")
		if supersedes != "" {
			h.Set("Supersedes", supersedes)
		}
	}
	if wait > 0 {
		h.Set("Prefer", "wait="+strconv.Itoa(wait))
	}
	s.attempts++
	s.emit(Event{Kind: EventSend, Method: method})
	resp, err := s.c.hc.Do(req)
	if err != nil {
		return nil, s.attemptError(ctx, actx, limit, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, s.attemptError(ctx, actx, limit, fmt.Errorf("reading the answer (%d): %w", resp.StatusCode, err))
	}
	return &answer{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// attemptError names an attempt that timed out as such.
func (s *session) attemptError(ctx, actx context.Context, limit time.Duration, err error) error {
	if ctx.Err() == nil && actx.Err() != nil {
		return fmt.Errorf("no answer within %s: %w", limit, err)
	}
	return err
}

// pause records why an attempt failed and waits before the next one: the
// answer's Retry-After when it has one, else the jittered back-off. It
// returns an error, without waiting, when ctx ends first.
func (s *session) pause(ctx context.Context, cause error, ans *answer) error {
	s.lastErr = cause
	s.failures++
	var d time.Duration
	if ra, ok := retryAfter(headerOf(ans)); ok {
		// At least what the server asked, plus up to a tenth more, so that
		// callers told the same thing at the same moment do not all come
		// back at once.
		d = ra + jitter(ra/10)
	} else {
		d = backoff(s.c.o.BackoffBase, s.c.o.BackoffMax, s.failures)
	}
	status := 0
	if ans != nil {
		status = ans.status
	}
	s.emit(Event{Kind: EventRetry, StatusCode: status, Delay: d, Err: cause})
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		// The next attempt would come after the deadline: no use waiting.
		return context.DeadlineExceeded
	}
	return s.c.o.Sleep(ctx, d)
}

func headerOf(ans *answer) http.Header {
	if ans == nil {
		return nil
	}
	return ans.header
}

// unknown is the OutcomeUnknownError of a session whose context ended.
func (s *session) unknown(ctx context.Context) error {
	cause := context.Cause(ctx)
	if cause == nil {
		cause = context.DeadlineExceeded // pause saw the deadline coming
	}
	return s.unknownBecause(cause)
}

func (s *session) unknownBecause(cause error) error {
	err := cause
	if s.lastErr != nil && s.lastErr != cause {
		err = fmt.Errorf("%w (last attempt: %w)", cause, s.lastErr)
	}
	return &OutcomeUnknownError{
		Key: s.key, Accepted: s.accepted, LeadID: s.leadID, State: s.state,
		Attempts: s.attempts, Err: err,
	}
}

// transient reports whether an answer with status (and no final response in
// its body) is worth sending again: a time-out, too early, too many
// requests, or any server-side failure.
func transient(status int) bool {
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests:
		return true
	case status >= 500:
		return true
	case status >= 400:
		return false
	}
	// 1xx, 2xx and 3xx that the caller does not expect: an intermediary's
	// doing, most likely. Sending again is safe.
	return true
}

// answerError describes an answer that was not the one hoped for, when it
// is not a final refusal: the cause in an OutcomeUnknownError, or in a retry
// Event.
type answerError struct {
	status  int
	code    string
	message string
}

func (e *answerError) Error() string {
	s := strconv.Itoa(e.status) + " " + http.StatusText(e.status)
	if e.code != "" {
		s += " (" + e.code + ")"
	}
	if e.message != "" {
		s += ": " + e.message
	}
	return s
}

// errorBody is the body of the service's error answers.
type errorBody struct {
	Error *struct {
		Code    string   `json:"code"`
		Message string   `json:"message"`
		Details []Detail `json:"details"`
	} `json:"error"`
}

func (a *answer) unexpected() error {
	e := &answerError{status: a.status}
	var eb errorBody
	if json.Unmarshal(a.body, &eb) == nil && eb.Error != nil {
		e.code, e.message = eb.Error.Code, eb.Error.Message
	}
	return e
}

func (a *answer) apiError(key string) *APIError {
	e := &APIError{
		Key: key, StatusCode: a.status, RequestID: a.header.Get("X-Request-Id"),
		Body: append(json.RawMessage(nil), a.body...),
	}
	var eb errorBody
	if json.Unmarshal(a.body, &eb) == nil && eb.Error != nil {
		e.Code, e.Message, e.Details = eb.Error.Code, eb.Error.Message, eb.Error.Details
	} else {
		e.Message = http.StatusText(a.status)
	}
	return e
}

func parseProcessing(body []byte) (*processing, error) {
	var p processing
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, err
	}
	if p.LeadID == "" {
		return nil, errors.New("no lead_id")
	}
	if p.Status == "" {
		p.Status = StateProcessing
	}
	return &p, nil
}

func parseOperation(body []byte) (*Operation, error) {
	var op Operation
	if err := json.Unmarshal(body, &op); err != nil {
		return nil, err
	}
	if op.State == "" {
		return nil, errors.New("no state")
	}
	op.Raw = append(json.RawMessage(nil), body...)
	return &op, nil
}
