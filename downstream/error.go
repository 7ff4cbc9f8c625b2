package downstream

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// MaxRetryAfter bounds the delay a downstream's Retry-After can impose.
const MaxRetryAfter = time.Hour

// Error is a failed downstream call. Its message names the target and the
// status, never a request or response body (they may hold personal data).
type Error struct {
	// Target is the call: enrichment, crm_upsert, crm_create, crm_lookup or
	// notify.
	Target string
	// StatusCode is the HTTP status, 0 when no answer arrived.
	StatusCode int
	// Transient failures are worth retrying; the others are a verdict.
	Transient bool
	// Uncertain means the request may have been applied even though no
	// success came back: a time-out, a broken connection, a 5xx.
	Uncertain bool
	// RetryAfter is the delay the downstream asked for (Retry-After), at
	// most MaxRetryAfter; 0 when it asked for none.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	switch {
	case e.StatusCode != 0 && e.Err != nil:
		return fmt.Sprintf("%s: HTTP %d: %v", e.Target, e.StatusCode, e.Err)
	case e.StatusCode != 0:
		return fmt.Sprintf("%s: HTTP %d", e.Target, e.StatusCode)
	default:
		return fmt.Sprintf("%s: %v", e.Target, e.Err)
	}
}

func (e *Error) Unwrap() error { return e.Err }

// AsError returns err as a *Error when it is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// IsTransient reports whether err is a downstream failure worth retrying.
// Errors that are not *Error (a cancelled context, say) count as transient.
func IsTransient(err error) bool {
	if e, ok := AsError(err); ok {
		return e.Transient
	}
	return err != nil
}

// statusError classifies an answer that is not the call's success: a 5xx,
// 408 and 429 are transient (a 5xx may have been applied), 409 is transient
// and, for a create, a sign that the record exists; any other 4xx is
// permanent; anything else unexpected (1xx, 3xx) is transient and uncertain.
func statusError(target string, resp *http.Response, now time.Time) *Error {
	e := &Error{Target: target, StatusCode: resp.StatusCode}
	switch code := resp.StatusCode; {
	case code >= 500:
		e.Transient, e.Uncertain = true, true
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests:
		e.Transient = true
	case code == http.StatusConflict:
		e.Transient, e.Uncertain = true, true
	case code >= 400:
		e.Transient = false
	default:
		e.Transient, e.Uncertain = true, true
	}
	if e.Transient {
		e.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), now)
	}
	return e
}

// transportError classifies a call that got no answer. A failure to connect
// means the request was never sent; anything after that (a time-out, a reset
// or closed connection) may have been applied.
func transportError(target string, err error) *Error {
	e := &Error{Target: target, Transient: true, Uncertain: true, Err: err}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		e.Uncertain = false
	}
	return e
}

// parseRetryAfter reads delay-seconds or an HTTP date, capped at
// MaxRetryAfter; 0 for none or garbage.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	// Atoi clamps a number too large for an int, and says so with ErrRange:
	// a delay that long is the cap, not garbage.
	if secs, err := strconv.Atoi(v); err == nil || errors.Is(err, strconv.ErrRange) {
		if secs < 0 {
			return 0
		}
		d = time.Duration(min(secs, int(MaxRetryAfter/time.Second))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return max(0, min(d, MaxRetryAfter))
}
