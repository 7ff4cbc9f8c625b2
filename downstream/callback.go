package downstream

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"time"

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
			Transport: &http.Transport{
				Proxy:               http.ProxyFromEnvironment,
				DialContext:         dialer.DialContext,
				MaxIdleConns:        100,
				MaxIdleConnsPerHost: 10,
				IdleConnTimeout:     90 * time.Second,
				TLSHandshakeTimeout: min(timeout, 5*time.Second),
			},
			// A redirect is an answer of its own: not 2xx, not followed.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		metrics: metrics,
		now:     time.Now,
	}
}

// Deliver makes one delivery attempt: body POSTed to url with
// Content-Type: application/json and the Standard Webhooks headers
// (webhook-id id, a fresh webhook-timestamp, webhook-signature by secret).
// Any 2xx is delivery. A failure is an *Error: transient (5xx, 408, 429, a
// time-out, a broken connection; with the Retry-After asked for) or not
// (any other answer).
func (c *Callbacks) Deliver(ctx context.Context, url string, secret webhook.Secret, id string, body []byte) (err error) {
	start := c.now()
	result := "success"
	defer func() {
		if err != nil {
			result = "permanent"
			if e, ok := AsError(err); ok && e.Transient {
				result = "transient"
			}
		}
		c.metrics.observe(TargetCallback, result, time.Since(start))
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return &Error{Target: TargetCallback, Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	webhook.SetHeaders(req.Header, secret, id, c.now(), body)
	resp, err := c.http.Do(req)
	if err != nil {
		return transportError(TargetCallback, err)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
		resp.Body.Close()
	}()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	return statusError(TargetCallback, resp, c.now())
}
