package destination_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination"
)

// now is the fixed clock of the classification tests.
var now = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// StatusError is the rule every kind starts from: statuses that mean the
// same whichever call got them.
func TestStatusError(t *testing.T) {
	t.Parallel()

	tests := []struct {
		status    int
		class     destination.Class
		uncertain bool
	}{
		// A redirect is not followed: it is an answer of its own, and the
		// request may have been applied.
		{http.StatusMovedPermanently, destination.Transient, true},
		{http.StatusFound, destination.Transient, true},
		{http.StatusNotModified, destination.Transient, true},
		{http.StatusTemporaryRedirect, destination.Transient, true},
		{http.StatusPermanentRedirect, destination.Transient, true},
		{http.StatusBadRequest, destination.Rejected, false},
		// Refused credentials hold the destination; they do not reject
		// the lead.
		{http.StatusUnauthorized, destination.Unauthorized, false},
		{http.StatusForbidden, destination.Unauthorized, false},
		{http.StatusNotFound, destination.Rejected, false},
		{http.StatusRequestTimeout, destination.Transient, false},
		{http.StatusConflict, destination.Conflict, true},
		{http.StatusGone, destination.Rejected, false},
		{http.StatusUnprocessableEntity, destination.Rejected, false},
		{http.StatusTooManyRequests, destination.Transient, false},
		{http.StatusInternalServerError, destination.Transient, true},
		{http.StatusNotImplemented, destination.Transient, true},
		{http.StatusBadGateway, destination.Transient, true},
		{http.StatusServiceUnavailable, destination.Transient, true},
		{http.StatusGatewayTimeout, destination.Transient, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			t.Parallel()
			for _, h := range []http.Header{nil, {}} {
				e := destination.StatusError("crm upsert", tt.status, h, now)
				if e.Op != "crm upsert" || e.Status != tt.status || e.Class != tt.class || e.Uncertain != tt.uncertain {
					t.Errorf("StatusError = %+v, want op crm upsert, status %d, class %s, uncertain %t",
						e, tt.status, tt.class, tt.uncertain)
				}
				if e.RetryAfter != 0 || e.HoldAll || e.Code != "" || e.Err != nil {
					t.Errorf("StatusError = %+v, want no delay, no hold, no code, no cause without Retry-After", e)
				}
			}
		})
	}
}

// A Retry-After is read on a transient answer only; a 429 or 503 carrying
// one holds every lead's calls to the destination.
func TestStatusErrorRetryAfter(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name       string
		status     int
		retryAfter string
		wait       time.Duration
		holdAll    bool
	}{
		{"ServiceUnavailable", http.StatusServiceUnavailable, "2", 2 * time.Second, true},
		{"TooManyRequests", http.StatusTooManyRequests, "120", 2 * time.Minute, true},
		{"TooManyRequestsWithADate", http.StatusTooManyRequests, now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"RequestTimeout", http.StatusRequestTimeout, "5", 5 * time.Second, false},
		{"ServerError", http.StatusInternalServerError, "5", 5 * time.Second, false},
		{"BadGateway", http.StatusBadGateway, "5", 5 * time.Second, false},
		{"Redirect", http.StatusFound, "5", 5 * time.Second, false},
		// A delay of none asks for no hold.
		{"ZeroHoldsNothing", http.StatusServiceUnavailable, "0", 0, false},
		{"GarbageHoldsNothing", http.StatusTooManyRequests, "soon", 0, false},
		{"IgnoredOnARefusal", http.StatusBadRequest, "30", 0, false},
		{"IgnoredOnAConflict", http.StatusConflict, "30", 0, false},
		{"IgnoredOnRefusedCredentials", http.StatusUnauthorized, "30", 0, false},
		{"IgnoredOnForbidden", http.StatusForbidden, "30", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := destination.StatusError("notify", tt.status, http.Header{"Retry-After": {tt.retryAfter}}, now)
			if e.RetryAfter != tt.wait || e.HoldAll != tt.holdAll {
				t.Errorf("RetryAfter %v, HoldAll %t; want %v, %t", e.RetryAfter, e.HoldAll, tt.wait, tt.holdAll)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()

	date := func(in time.Duration) string { return now.Add(in).Format(http.TimeFormat) }
	tests := []struct {
		name, value string
		want        time.Duration
	}{
		{"Seconds", "2", 2 * time.Second},
		{"MoreSeconds", "120", 2 * time.Minute},
		{"SecondsCappedAtAnHour", "7200", time.Hour},
		{"HugeSecondsCappedAtAnHour", "1000000000000", time.Hour},
		// Beyond an int: the cap, not garbage.
		{"OverflowingSecondsCappedAtAnHour", "99999999999999999999999", time.Hour},
		{"OverflowingNegativeSeconds", "-99999999999999999999999", 0},
		{"HTTPDate", date(90 * time.Second), 90 * time.Second},
		{"HTTPDateCappedAtAnHour", date(3 * time.Hour), time.Hour},
		{"HTTPDateInThePast", date(-time.Hour), 0},
		{"RFC850Date", now.Add(time.Minute).Format(time.RFC850), time.Minute},
		{"Zero", "0", 0},
		{"Negative", "-5", 0},
		{"Fraction", "1.5", 0},
		{"Garbage", "soon", 0},
		{"None", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := destination.ParseRetryAfter(tt.value, now); got != tt.want {
				t.Errorf("ParseRetryAfter(%q) = %v, want %v", tt.value, got, tt.want)
			}
		})
	}
}

// A call that got no answer is transient; it may have been applied unless
// the connection was never made.
func TestTransportError(t *testing.T) {
	t.Parallel()

	refused := &url.Error{Op: "Post", URL: "http://127.0.0.1:1", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}}
	reset := &url.Error{Op: "Post", URL: "http://127.0.0.1:1", Err: &net.OpError{Op: "read", Net: "tcp",
		Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}}
	tests := []struct {
		name      string
		err       error
		uncertain bool
	}{
		{"ConnectionRefused", refused, false},
		{"DialTimeout", &url.Error{Op: "Post", URL: "http://127.0.0.1:1", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}}, false},
		{"ConnectionReset", reset, true},
		{"EOF", &url.Error{Op: "Post", URL: "http://127.0.0.1:1", Err: errors.New("EOF")}, true},
		{"Timeout", &url.Error{Op: "Post", URL: "http://127.0.0.1:1", Err: context.DeadlineExceeded}, true},
		{"Cancelled", context.Canceled, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := destination.TransportError("crm create", tt.err)
			if e.Op != "crm create" || e.Status != 0 || e.Class != destination.Transient || e.Uncertain != tt.uncertain {
				t.Errorf("TransportError = %+v, want op crm create, no status, transient, uncertain %t", e, tt.uncertain)
			}
			if !errors.Is(e, tt.err) {
				t.Error("the cause is not kept")
			}
		})
	}
}

// Error's message names the operation, the status and the vendor's code.
func TestErrorMessage(t *testing.T) {
	t.Parallel()

	tests := []struct {
		err  *destination.Error
		want string
	}{
		{&destination.Error{Op: "crm upsert", Status: 503}, "crm upsert: HTTP 503"},
		{&destination.Error{Op: "notify", Err: errors.New("connection reset")}, "notify: connection reset"},
		{&destination.Error{Op: "enrichment", Status: 200, Err: errors.New("unreadable answer")}, "enrichment: HTTP 200: unreadable answer"},
		{&destination.Error{Op: "crm create", Status: 400, Code: "VALIDATION_ERROR"}, "crm create: HTTP 400 VALIDATION_ERROR"},
		{&destination.Error{Op: "send", Code: "channel_not_found"}, "send channel_not_found"},
		{&destination.Error{Op: "smtp send", Status: 550, Code: "5.1.1"}, "smtp send: reply 550 5.1.1"},
		{&destination.Error{Op: "crm lookup"}, "crm lookup"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	wrapped := fmt.Errorf("crm: %w", tests[1].err)
	if e, ok := destination.AsError(wrapped); !ok || e != tests[1].err {
		t.Error("AsError does not see through wrapping")
	}
	if _, ok := destination.AsError(context.Canceled); ok {
		t.Error("AsError takes a foreign error for an *Error")
	}
	if e := destination.Errorf("crm update", destination.Rejected, "no %s", "update"); e.Error() != "crm update: no update" || e.Class != destination.Rejected {
		t.Errorf("Errorf = %q (%s)", e, e.Class)
	}
}

func TestClassString(t *testing.T) {
	t.Parallel()

	for c, want := range map[destination.Class]string{
		destination.Transient: "transient", destination.Rejected: "rejected", destination.Unauthorized: "unauthorized",
		destination.Conflict: "conflict", 0: "unknown", 99: "unknown",
	} {
		if got := c.String(); got != want {
			t.Errorf("Class(%d) = %q, want %q", int(c), got, want)
		}
	}
}

// A foreign error (a cancelled context, a failure of our own) is transient
// and may have been applied; no error is no failure.
func TestClassifyAndFailureOf(t *testing.T) {
	t.Parallel()

	if c := destination.Classify(fmt.Errorf("x: %w", &destination.Error{Class: destination.Rejected})); c != destination.Rejected {
		t.Errorf("Classify of a wrapped rejection = %s", c)
	}
	if c := destination.Classify(context.Canceled); c != destination.Transient {
		t.Errorf("Classify(context.Canceled) = %s, want transient", c)
	}
	if f := destination.FailureOf(nil); f != nil {
		t.Errorf("FailureOf(nil) = %+v, want nil", f)
	}
	tests := []struct {
		name string
		err  error
		// want, as Transient, Uncertain, Conflict, Unauthorized.
		transient, uncertain, conflict, unauthorized bool
		wait                                         time.Duration
	}{
		{name: "Foreign", err: context.Canceled, transient: true, uncertain: true},
		{name: "Rejected", err: &destination.Error{Class: destination.Rejected, Status: 400}},
		{name: "Conflict", err: &destination.Error{Class: destination.Conflict, Status: 409, Uncertain: true}, transient: true, uncertain: true, conflict: true},
		{name: "Unauthorized", err: &destination.Error{Class: destination.Unauthorized, Status: 401, RetryAfter: time.Minute}, transient: true, unauthorized: true, wait: time.Minute},
		{name: "TransientCertain", err: &destination.Error{Class: destination.Transient, Status: 429, RetryAfter: 2 * time.Second}, transient: true, wait: 2 * time.Second},
		{name: "TransientUncertain", err: &destination.Error{Class: destination.Transient, Status: 503, Uncertain: true}, transient: true, uncertain: true},
	}
	for _, tt := range tests {
		f := destination.FailureOf(tt.err)
		if f == nil || f.Transient != tt.transient || f.Uncertain != tt.uncertain || f.Conflict != tt.conflict ||
			f.Unauthorized != tt.unauthorized || f.RetryAfter != tt.wait {
			t.Errorf("%s: FailureOf = %+v", tt.name, f)
		}
	}
}

func TestOrigin(t *testing.T) {
	t.Parallel()

	tests := map[string]string{
		"https://hooks.slack.com/services/T000/B000/XXXXSECRET": "https://hooks.slack.com",
		"http://user:password@127.0.0.1:8080/p?token=SECRET#f":  "http://127.0.0.1:8080",
		"https://crm.example":    "https://crm.example",
		"/relative/SECRET":       "(a URL)",
		"http://[::1":            "(a URL)",
		"":                       "(a URL)",
		"mailto:ada@example.com": "(a URL)",
	}
	for raw, want := range tests {
		if got := destination.Origin(raw); got != want {
			t.Errorf("Origin(%q) = %q, want %q", raw, got, want)
		}
	}
}
