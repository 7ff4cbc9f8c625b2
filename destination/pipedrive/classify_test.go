package pipedrive

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination"
)

// TestAnswerError is the classification of Pipedrive's answers: each
// documented status (and shape) to its class.
func TestAnswerError(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	const (
		v1Unauthorized = `{"success":false,"error":"unauthorized access","errorCode":401,"error_info":"Please check developers.pipedrive.com for more information about Pipedrive API.","data":null,"additional_data":null}`
		v1Forbidden    = `{"success":false,"error":"Scope and URL mismatch","errorCode":403}`
		validation     = `{"success":false,"error":"Validation failed: unknown field","code":"ERR_SCHEMA_VALIDATION_FAILED","error_info":"Please check developers.pipedrive.com for more information about Pipedrive API.","data":null}`
		// A message that quotes what was sent: never kept.
		quoting    = `{"success":false,"error":"Invalid value ada@example.com for email","error_info":"...","data":null}`
		archived   = `{"success":false,"error":"Archived lead cannot be edited","error_info":"...","data":null}`
		notFound   = `{"success":false,"error":"Lead not found","error_info":"...","data":null}`
		overLimit  = `{"success":false,"error":"Request over limit","errorCode":429}`
		serverFail = `{"success":false,"error":"Internal server error"}`
	)
	tests := []struct {
		name      string
		method    string
		status    int
		header    http.Header
		body      string
		class     destination.Class
		code      string
		uncertain bool
		holdAll   bool
		wait      time.Duration
	}{
		{name: "Unauthorized", status: 401, body: v1Unauthorized, class: destination.Unauthorized},
		{name: "AccountNotOpen", status: 402, body: `{"success":false,"error":"Company account is not open"}`, class: destination.Unauthorized, code: "payment_required"},
		{name: "Forbidden", status: 403, body: v1Forbidden, class: destination.Unauthorized},
		{name: "Validation", method: http.MethodPost, status: 400, body: validation, class: destination.Rejected, code: "ERR_SCHEMA_VALIDATION_FAILED"},
		{name: "ValidationQuotingTheLead", method: http.MethodPost, status: 400, body: quoting, class: destination.Rejected},
		{name: "UnprocessableEntity", method: http.MethodPost, status: 422, body: validation, class: destination.Rejected, code: "ERR_SCHEMA_VALIDATION_FAILED"},
		{name: "ArchivedLead", method: http.MethodPatch, status: 400, body: archived, class: destination.Rejected, code: "archived"},
		{name: "LeadGone", method: http.MethodPatch, status: 404, body: notFound, class: destination.Rejected, code: "not_found"},
		{name: "NotFoundOnARead", method: http.MethodGet, status: 404, body: `{"success":false,"error":"Not found"}`, class: destination.Transient, code: "not_found"},
		{name: "EndpointRetired", method: http.MethodGet, status: 410, body: `{"success":false,"error":"Gone"}`, class: destination.Transient},
		{name: "Conflict", method: http.MethodPost, status: 409, body: `{"success":false,"error":"Conflict"}`, class: destination.Conflict, uncertain: true},
		{name: "RateLimitRetryAfter", status: 429, header: http.Header{"Retry-After": {"7"}, "X-Ratelimit-Reset": {"2"}}, body: overLimit,
			class: destination.Transient, holdAll: true, wait: 7 * time.Second},
		{name: "RateLimitReset", status: 429, header: http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"3"}}, body: overLimit,
			class: destination.Transient, holdAll: true, wait: 3 * time.Second},
		{name: "RateLimitResetAsATime", status: 429, header: http.Header{"X-Ratelimit-Reset": {strconv.FormatInt(now.Add(90*time.Second).Unix(), 10)}}, body: overLimit,
			class: destination.Transient, holdAll: true, wait: 90 * time.Second},
		{name: "RateLimitDailyBudget", status: 429, header: http.Header{"X-Ratelimit-Reset": {"50400"}}, body: overLimit,
			class: destination.Transient, holdAll: true, wait: destination.MaxRetryAfter},
		{name: "RateLimitSaysNothing", status: 429, body: `{}`, class: destination.Transient, holdAll: true, wait: 2 * time.Second},
		{name: "ServerError", status: 500, body: serverFail, class: destination.Transient, uncertain: true},
		{name: "Maintenance", status: 503, header: http.Header{"Retry-After": {"30"}}, body: "<html>", class: destination.Transient, uncertain: true,
			holdAll: true, wait: 30 * time.Second},
		{name: "NotJSON", method: http.MethodPost, status: 400, body: "<html>bad</html>", class: destination.Rejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			h := tt.header
			if h == nil {
				h = http.Header{}
			}
			e := answerError(&destination.Request{Op: "crm create", Method: method},
				&destination.Response{Status: tt.status, Header: h, Body: []byte(tt.body)}, now)
			if e.Class != tt.class || e.Code != tt.code || e.Uncertain != tt.uncertain || e.HoldAll != tt.holdAll || e.RetryAfter != tt.wait {
				t.Errorf("got class %s code %q uncertain %v hold %v wait %s; want %s %q %v %v %s",
					e.Class, e.Code, e.Uncertain, e.HoldAll, e.RetryAfter, tt.class, tt.code, tt.uncertain, tt.holdAll, tt.wait)
			}
			if e.Status != tt.status {
				t.Errorf("status %d", e.Status)
			}
			if msg := e.Error(); strings.Contains(msg, "@") || strings.Contains(msg, "Invalid value") {
				t.Errorf("the error %q shows the answer's message", msg)
			}
		})
	}
}

func TestSafeWord(t *testing.T) {
	for in, want := range map[string]string{"varchar": "varchar", "varchar_auto": "varchar_auto", "ada@example.com": "unknown", "": "unknown"} {
		if got := safeWord(in); got != want {
			t.Errorf("safeWord(%q) = %q, want %q", in, got, want)
		}
	}
}
