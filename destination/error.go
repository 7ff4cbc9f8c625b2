package destination

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/leadintake/leadintake/lead"
)

// MaxRetryAfter bounds the delay a destination's Retry-After can impose.
const MaxRetryAfter = time.Hour

// Class is what a failed call means for the lead, whichever vendor
// answered.
type Class int

// The classes.
const (
	// Transient: worth another attempt (a 5xx, 408, 429, a time-out, a
	// broken connection, a vendor's "try again").
	Transient Class = iota + 1
	// Rejected: the destination refuses the lead itself (validation, a
	// required field, several records under one reference, a blocked
	// duplicate, a channel that cannot take it): asking again changes
	// nothing. A CRM's rejection is crm_rejected; a channel's gives the
	// channel up for the lead.
	Rejected
	// Unauthorized: the destination's credentials are wrong or revoked (a
	// 401, a 403 for want of permission, a token endpoint's invalid_client,
	// Slack's invalid_auth, SMTP 535). It is the destination's state, not
	// the lead's: every lead bound for it waits until a call is accepted
	// again.
	Unauthorized
	// Conflict: a create met a record that exists (409): look it up.
	Conflict
)

var classNames = [...]string{"", "transient", "rejected", "unauthorized", "conflict"}

func (c Class) String() string {
	if c > 0 && int(c) < len(classNames) {
		return classNames[c]
	}
	return "unknown"
}

// Error is a failed call to a destination. Its message names the
// operation, the status and the vendor's error code, never a request or
// response body (they hold personal data), a secret, or a URL's path.
type Error struct {
	// Op names the call: "upsert", "create", "lookup", "token", "send"...
	Op string
	// Status is the HTTP status or the SMTP reply code; 0 when no answer
	// arrived.
	Status int
	Class  Class
	// Uncertain: the request may have been applied although no success
	// came back (a time-out, a broken connection, a 5xx).
	Uncertain bool
	// RetryAfter is the delay the destination asked for, at most
	// MaxRetryAfter; 0 when it asked for none.
	RetryAfter time.Duration
	// HoldAll: the answer holds every lead's calls to the destination for
	// RetryAfter (a 429 or 503 with Retry-After, a rate-limit header that
	// says none is left), not only this lead's.
	HoldAll bool
	// Code is the vendor's error code or reason (DUPLICATES_DETECTED,
	// VALIDATION_ERROR, channel_not_found): never personal data.
	Code string
	Err  error
}

func (e *Error) Error() string {
	msg := e.Op
	switch {
	case e.Status != 0 && e.smtp():
		msg += ": reply " + strconv.Itoa(e.Status)
	case e.Status != 0:
		msg += ": HTTP " + strconv.Itoa(e.Status)
	}
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// smtp reports whether Status is an SMTP reply code (the e-mail kind names
// its operations smtp ...).
func (e *Error) smtp() bool { return len(e.Op) >= 4 && e.Op[:4] == "smtp" }

func (e *Error) Unwrap() error { return e.Err }

// AsError returns err as an *Error when it is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// Classify returns the class of err: an *Error's own, Transient for any
// other error (a cancelled context, a failure of our own).
func Classify(err error) Class {
	if e, ok := AsError(err); ok {
		return e.Class
	}
	return Transient
}

// StatusError classifies an HTTP answer that is not the call's success by
// its status alone, the rule every kind starts from: a 5xx is transient
// and may have been applied; 408 and 429 are transient; 409 is a conflict;
// 401 and 403 are refused credentials; any other 4xx rejects the lead;
// anything else unexpected (1xx, 3xx) is transient and may have been
// applied. A transient answer's Retry-After is read, and a 429 or 503
// carrying one holds every lead's calls.
func StatusError(op string, status int, header http.Header, now time.Time) *Error {
	e := &Error{Op: op, Status: status}
	switch {
	case status >= 500:
		e.Class, e.Uncertain = Transient, true
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests:
		e.Class = Transient
	case status == http.StatusConflict:
		e.Class, e.Uncertain = Conflict, true
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		e.Class = Unauthorized
	case status >= 400:
		e.Class = Rejected
	default:
		e.Class, e.Uncertain = Transient, true
	}
	if e.Class == Transient && header != nil {
		e.RetryAfter = ParseRetryAfter(header.Get("Retry-After"), now)
		e.HoldAll = e.RetryAfter > 0 && (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable)
	}
	return e
}

// TransportError classifies a call that got no answer. A failure to
// connect means the request was never sent; anything after that (a
// time-out, a reset or closed connection) may have been applied.
func TransportError(op string, err error) *Error {
	e := &Error{Op: op, Class: Transient, Uncertain: true, Err: err}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		e.Uncertain = false
	}
	return e
}

// Timeout reports whether err is a call that timed out (its own deadline,
// or the job's).
func Timeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// ParseRetryAfter reads delay-seconds or an HTTP date, capped at
// MaxRetryAfter; 0 for none or garbage.
func ParseRetryAfter(v string, now time.Time) time.Duration {
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

// Errorf is an *Error of class c for op, its message made of format and
// args (which must hold no secret and no personal data).
func Errorf(op string, c Class, format string, args ...any) *Error {
	return &Error{Op: op, Class: c, Err: fmt.Errorf(format, args...)}
}

// FailureOf is how the lead's life sees a call's error (nil for none), as
// far as the destination alone tells: the shared state of the destination
// may still make a transient failure, or refused credentials, a hold (see
// package jobs).
func FailureOf(err error) *lead.Failure {
	if err == nil {
		return nil
	}
	e, ok := AsError(err)
	if !ok {
		return &lead.Failure{Transient: true, Uncertain: true}
	}
	switch e.Class {
	case Rejected:
		return &lead.Failure{}
	case Conflict:
		return &lead.Failure{Transient: true, Uncertain: true, Conflict: true}
	case Unauthorized:
		return &lead.Failure{Transient: true, Unauthorized: true, RetryAfter: e.RetryAfter}
	default:
		return &lead.Failure{Transient: true, Uncertain: e.Uncertain, RetryAfter: e.RetryAfter}
	}
}
