package pipedrive

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/leadintake/leadintake/destination"
)

// defaultHold is how long a 429 that names no wait holds the destination:
// Pipedrive's burst window.
const defaultHold = 2 * time.Second

var (
	codeRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)
	wordRE = regexp.MustCompile(`^[a-z_]{1,32}$`)
)

// errorBody is Pipedrive's error answer: {"success": false, "error":
// message, "error_info": hint, "errorCode": status} on v1, and a "code"
// such as ERR_SCHEMA_VALIDATION_FAILED where the API gives one.
type errorBody struct {
	Error string          `json:"error"`
	Code  json.RawMessage `json:"code"`
}

// code is the answer's error code: its "code" when it is one (a word, no
// data), else a word for what the message says of the lead (archived,
// converted, not found). The message itself is never kept: it may quote
// what was sent.
func (b errorBody) code() string {
	var c string
	if json.Unmarshal(b.Code, &c) == nil && codeRE.MatchString(c) {
		return c
	}
	msg := strings.ToLower(b.Error)
	switch {
	case strings.Contains(msg, "archived"):
		return "archived"
	case strings.Contains(msg, "converted"):
		return "converted"
	case strings.Contains(msg, "not found"):
		return "not_found"
	}
	return ""
}

// answerError classifies an answer of Pipedrive's that is not the call's
// success. It starts from the status (destination.StatusError: 5xx
// transient and uncertain, 401 and 403 refused credentials, 409 conflict,
// other 4xx the lead's rejection), and then:
//   - 402 (the company account is not open: a trial ended, payment details
//     missing) is the destination's state, as refused credentials are;
//   - 404 to a read is the destination's (a wrong base_url), transient;
//   - 410 (an endpoint Pipedrive retired) is transient, not the lead's: a
//     redrive after an upgrade delivers it;
//   - 429 holds every lead's calls for Retry-After, else x-ratelimit-reset,
//     else the 2-second burst window.
func answerError(req *destination.Request, resp *destination.Response, now time.Time) *destination.Error {
	e := destination.StatusError(req.Op, resp.Status, resp.Header, now)
	var b errorBody
	_ = json.Unmarshal(resp.Body, &b)
	e.Code = b.code()
	switch {
	case resp.Status == http.StatusPaymentRequired:
		e.Class = destination.Unauthorized
		if e.Code == "" {
			e.Code = "payment_required"
		}
	case resp.Status == http.StatusNotFound && req.Method == http.MethodGet:
		e.Class, e.Uncertain = destination.Transient, false
	case resp.Status == http.StatusGone:
		e.Class, e.Uncertain = destination.Transient, false
	case resp.Status == http.StatusTooManyRequests:
		e.RetryAfter, e.HoldAll = rateLimitWait(resp.Header, now), true
	}
	return e
}

// rateLimitWait is how long a 429 asks to wait: Retry-After, else
// x-ratelimit-reset (seconds left in the window; a Unix time is read as
// one), else defaultHold; at most destination.MaxRetryAfter.
func rateLimitWait(h http.Header, now time.Time) time.Duration {
	if d := destination.ParseRetryAfter(h.Get("Retry-After"), now); d > 0 {
		return d
	}
	var d time.Duration
	if n, err := strconv.ParseInt(strings.TrimSpace(h.Get("X-Ratelimit-Reset")), 10, 64); err == nil && n > 0 {
		if n > 1_000_000_000 {
			d = time.Unix(n, 0).Sub(now)
		} else {
			d = time.Duration(min(n, int64(destination.MaxRetryAfter/time.Second))) * time.Second
		}
	}
	if d <= 0 {
		return defaultHold
	}
	return min(d, destination.MaxRetryAfter)
}

// safeWord is s when it is a plain lower-case word (a field type), for a
// message; "unknown" otherwise.
func safeWord(s string) string {
	if wordRE.MatchString(s) {
		return s
	}
	return "unknown"
}
