package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Error codes the service sends, in an *APIError's Code or a *Failed's
// Code. The service may send others; these are the ones a caller is most
// likely to act on.
const (
	CodeUnauthorized          = "unauthorized"
	CodeInvalidJSON           = "invalid_json"
	CodeUnknownField          = "unknown_field"
	CodeValidationFailed      = "validation_failed"
	CodeKeyInvalid            = "idempotency_key_invalid"
	CodeKeyReused             = "idempotency_key_reused"
	CodeSupersedesInvalid     = "supersedes_invalid"
	CodeSupersedesUnknown     = "supersedes_unknown"
	CodeAlreadySuperseded     = "already_superseded"
	CodeNotFound              = "not_found"
	CodeCRMRejected           = "crm_rejected"
	CodeDownstreamUnavailable = "downstream_unavailable"
	CodeErased                = "erased"
)

// Detail is one entry of an error's details: which field broke which rule.
type Detail struct {
	Field   string `json:"field"`
	Problem string `json:"problem"`
}

// APIError is a request the service refused for good: an error answer
// ({"error": {"code", "message", "details"}}) with a 4xx status other than
// 408, 425 and 429. Sending the same request again gets the same answer, so
// the client does not. For a submission, a refusal stores nothing: the key
// is still free for a corrected request.
type APIError struct {
	// Key is the idempotency key of the request ("" when it had none).
	Key string
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// Code is the error code ("validation_failed", ...); "" when the
	// answer was not the service's error body (a proxy's page, say).
	Code    string
	Message string
	Details []Detail
	// RequestID is the answer's X-Request-Id, for the service's logs.
	RequestID string
	// Body is the answer's body, as received.
	Body json.RawMessage
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "leadintake: refused (%d", e.StatusCode)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	b.WriteString(")")
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	for _, d := range e.Details {
		fmt.Fprintf(&b, "; %s: %s", d.Field, d.Problem)
	}
	return b.String()
}

// Failed is a lead that failed for good: its key's final response is a
// failure ({"status": "failed", "error": {"code", "message"}}), which the
// service replays for that key from then on. The code is crm_rejected,
// erased or downstream_unavailable.
//
// downstream_unavailable is not a verdict on the lead: the service's
// attempts ran out on transient failures. Submitting the same body with the
// same key again re-opens the key (unless another key supersedes it), and
// the client does not do that on its own.
type Failed struct {
	// Key is the idempotency key of the enquiry.
	Key string
	// StatusCode is the status of the final response (422, 502).
	StatusCode int
	LeadID     string
	Code       string
	Message    string
	// Body is the final response's body, byte for byte as the service
	// stored it.
	Body json.RawMessage
}

func (e *Failed) Error() string {
	return fmt.Sprintf("leadintake: lead %s failed (%d %s): %s", e.LeadID, e.StatusCode, e.Code, e.Message)
}

// Reopenable reports whether submitting the same body with the same key
// again starts a new attempt (downstream_unavailable) rather than replaying
// the failure.
func (e *Failed) Reopenable() bool { return e.Code == CodeDownstreamUnavailable }

// OutcomeUnknownError is what Submit, Amend and Wait return when they gave
// up, because their context ended, before a final answer: the enquiry may or
// may not have been stored, and may still be processed. It carries the key:
// Wait with it, or Submit the same body with SubmitOptions.Key set to it,
// finds out later, and neither can create a second lead.
type OutcomeUnknownError struct {
	// Key is the enquiry's idempotency key: the handle to resume with.
	Key string
	// Accepted reports whether the service acknowledged the key (a 202):
	// the enquiry is then stored and will be processed; only its final
	// answer is unknown.
	Accepted bool
	// LeadID is the lead's id when the service named it.
	LeadID string
	// State is the last state the service reported (processing,
	// needs_reconciliation), if any.
	State string
	// Attempts counts the requests sent.
	Attempts int
	// Err is why the client stopped: the context's error, joined with the
	// last attempt's failure when there was one.
	Err error
}

func (e *OutcomeUnknownError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "leadintake: outcome unknown for key %s", e.Key)
	switch {
	case e.Accepted && e.State != "":
		fmt.Fprintf(&b, " (accepted as lead %s, %s)", e.LeadID, e.State)
	case e.Accepted:
		fmt.Fprintf(&b, " (accepted as lead %s)", e.LeadID)
	}
	fmt.Fprintf(&b, " after %d attempt(s)", e.Attempts)
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	b.WriteString("; resume with the same key")
	return b.String()
}

func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// IsFinal reports whether err is a final answer of the service about the
// request (an *APIError or a *Failed), as opposed to giving up
// (*OutcomeUnknownError) or a local error.
func IsFinal(err error) bool {
	var apiErr *APIError
	var failed *Failed
	return errors.As(err, &apiErr) || errors.As(err, &failed)
}
