// Package response is leadintake's vocabulary towards callers: every error
// code with its HTTP status, the error body, and the bodies of the final
// responses that a finished key replays, whole or as a web page sees them
// (ForBrowser). The api writes the errors; the worker writes the final
// responses (the store those of a quarantine and an erasure); all take the
// words from here.
package response

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Code is an error code, as sent in {"error": {"code": ...}}.
type Code string

// Error codes of requests the API refuses.
const (
	CodeUnauthorized         Code = "unauthorized"
	CodeClientMismatch       Code = "client_mismatch"
	CodeKeyMissing           Code = "idempotency_key_missing"
	CodeKeyInvalid           Code = "idempotency_key_invalid"
	CodeUnsupportedMediaType Code = "unsupported_media_type"
	CodeBodyTooLarge         Code = "body_too_large"
	CodeInvalidJSON          Code = "invalid_json"
	CodeUnknownField         Code = "unknown_field"
	CodeValidationFailed     Code = "validation_failed"
	CodeKeyReused            Code = "idempotency_key_reused"
	CodeStoreUnavailable     Code = "store_unavailable"
	CodeNotFound             Code = "not_found"
	CodeMethodNotAllowed     Code = "method_not_allowed"
	CodeRequestTimeout       Code = "request_timeout"
	CodeHeadersTooLarge      Code = "request_header_fields_too_large"
	CodeBadRequest           Code = "bad_request"
	CodeInternal             Code = "internal_error"
	// CodeSupersedesInvalid: a malformed Supersedes (400), or one naming
	// the request's own key (422).
	CodeSupersedesInvalid Code = "supersedes_invalid"
	// CodeSupersedesUnknown: the superseded key is unknown to the client,
	// or expired.
	CodeSupersedesUnknown Code = "supersedes_unknown"
	// CodeAlreadySuperseded: another key superseded that key first.
	CodeAlreadySuperseded Code = "already_superseded"
	// CodeForbiddenForPublishableKey: a publishable key may only submit
	// leads and read their operations.
	CodeForbiddenForPublishableKey Code = "forbidden_for_publishable_key"
	// CodeOriginNotAllowed: the Origin is not one the publishable key (or,
	// for a preflight, any key) allows.
	CodeOriginNotAllowed Code = "origin_not_allowed"
	// CodeRateLimited: too many new submissions from one publishable key
	// and address.
	CodeRateLimited Code = "rate_limited"
	// CodeSignatureInvalid: an inbound webhook's signature is missing,
	// wrong, or too old.
	CodeSignatureInvalid Code = "signature_invalid"
	// CodeSpamRefused: a web page's enquiry judged spam under a policy
	// that refuses it; nothing was stored.
	CodeSpamRefused Code = "spam_refused"
	// CodeCaptchaUnavailable: the page's captcha token could not be
	// verified (the siteverify service timed out or answered oddly);
	// nothing was stored.
	CodeCaptchaUnavailable Code = "captcha_unavailable"
)

// Error codes of failed leads, in their stored final responses.
const (
	// CodeCRMRejected: the CRM refused the lead for good.
	CodeCRMRejected Code = "crm_rejected"
	// CodeDownstreamUnavailable: the attempts ran out on transient
	// failures; a retry with the same body re-opens the key.
	CodeDownstreamUnavailable Code = "downstream_unavailable"
	// CodeErased: the lead's personal data was erased on request before it
	// finished.
	CodeErased Code = "erased"
)

var statusOf = map[Code]int{
	CodeUnauthorized:               http.StatusUnauthorized,
	CodeClientMismatch:             http.StatusForbidden,
	CodeKeyMissing:                 http.StatusBadRequest,
	CodeKeyInvalid:                 http.StatusBadRequest,
	CodeUnsupportedMediaType:       http.StatusUnsupportedMediaType,
	CodeBodyTooLarge:               http.StatusRequestEntityTooLarge,
	CodeInvalidJSON:                http.StatusBadRequest,
	CodeUnknownField:               http.StatusUnprocessableEntity,
	CodeValidationFailed:           http.StatusUnprocessableEntity,
	CodeKeyReused:                  http.StatusUnprocessableEntity,
	CodeStoreUnavailable:           http.StatusServiceUnavailable,
	CodeNotFound:                   http.StatusNotFound,
	CodeMethodNotAllowed:           http.StatusMethodNotAllowed,
	CodeRequestTimeout:             http.StatusRequestTimeout,
	CodeHeadersTooLarge:            http.StatusRequestHeaderFieldsTooLarge,
	CodeBadRequest:                 http.StatusBadRequest,
	CodeInternal:                   http.StatusInternalServerError,
	CodeSupersedesInvalid:          http.StatusUnprocessableEntity,
	CodeSupersedesUnknown:          http.StatusUnprocessableEntity,
	CodeAlreadySuperseded:          http.StatusConflict,
	CodeForbiddenForPublishableKey: http.StatusForbidden,
	CodeOriginNotAllowed:           http.StatusForbidden,
	CodeRateLimited:                http.StatusTooManyRequests,
	CodeSignatureInvalid:           http.StatusUnauthorized,
	CodeSpamRefused:                http.StatusForbidden,
	CodeCaptchaUnavailable:         http.StatusServiceUnavailable,
	CodeErased:                     http.StatusUnprocessableEntity,
	CodeCRMRejected:                http.StatusUnprocessableEntity,
	CodeDownstreamUnavailable:      http.StatusBadGateway,
}

// Status returns the HTTP status of code; an unknown code is 500.
func (c Code) Status() int {
	if s, ok := statusOf[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// MaxDetails is the most details an error lists: a body of thousands of
// broken members is answered with the first MaxDetails of them (in member
// order), never with an answer as big as the body.
const MaxDetails = 20

// Detail is one entry of an error's details: which field broke which rule.
type Detail struct {
	Field   string `json:"field"`
	Problem string `json:"problem"`
}

// ErrorBody is the body of every error answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the error member of ErrorBody.
type ErrorDetail struct {
	Code    Code     `json:"code"`
	Message string   `json:"message"`
	Details []Detail `json:"details,omitempty"`
}

// The statuses of a lead's final response, as its body's "status".
const (
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	// StatusReceived is a quarantined enquiry's: stored, not sent on
	// unless an operator releases it. A page shows it the thank-you of a
	// completed one.
	StatusReceived = "received"
)

// Completed is the body of the 201 of a lead the CRM accepted.
type Completed struct {
	Status   string   `json:"status"`
	LeadID   string   `json:"lead_id"`
	CRMID    string   `json:"crm_id"`
	Score    int      `json:"score"`
	Tier     string   `json:"tier"`
	Notified bool     `json:"notified"`
	Warnings []string `json:"warnings"`
	// Amends is the id of the lead an amendment amends; absent otherwise.
	Amends string `json:"amends,omitempty"`
	// Owner is the name of the lead's owner; absent when none was
	// assigned.
	Owner string `json:"owner,omitempty"`
}

// Failed is the body of a failed lead's final response.
type Failed struct {
	Status string      `json:"status"`
	LeadID string      `json:"lead_id"`
	Error  FailedError `json:"error"`
}

// FailedError is the error member of Failed.
type FailedError struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// Warnings of a completed lead.
const (
	WarnEnrichmentUnavailable = "enrichment_unavailable"
	WarnNotificationFailed    = "notification_failed"
	WarnCRMNotUpdated         = "crm_not_updated"
	// WarnPossibleDuplicate: an earlier lead of the client, under another
	// key, has the same email and content (within DUPLICATE_WINDOW).
	WarnPossibleDuplicate = "possible_duplicate"
)

// Final is a finished key's response: the status and the exact bytes every
// replay answers with.
type Final struct {
	Status int
	Body   []byte
}

// NewCompleted returns the final response of a completed lead.
func NewCompleted(b *Completed) Final {
	b.Status = StatusCompleted
	if b.Warnings == nil {
		b.Warnings = []string{}
	}
	return Final{Status: http.StatusCreated, Body: Marshal(b)}
}

// Received is the body of a quarantined enquiry's final response.
type Received struct {
	Status string `json:"status"`
	LeadID string `json:"lead_id"`
}

// NewReceived returns the final response of a quarantined enquiry: 200
// {"status": "received", "lead_id"}.
func NewReceived(leadID string) Final {
	return Final{Status: http.StatusOK, Body: Marshal(&Received{Status: StatusReceived, LeadID: leadID})}
}

// NewFailed returns the final response of a lead that failed with code.
func NewFailed(leadID string, code Code, message string) Final {
	return Final{Status: code.Status(), Body: Marshal(&Failed{
		Status: StatusFailed, LeadID: leadID, Error: FailedError{Code: code, Message: message},
	})}
}

// Marshal encodes v as compact JSON without escaping <, > and & (the bodies
// are for programs, not for embedding in HTML). The values given here never
// fail to encode; one that does is a programming error.
func Marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("response: " + err.Error())
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// Error is a refusal with a code: the API answers it as ErrorBody with the
// code's status (or Status, where one code has two). Err, the cause, is
// logged but never shown to the caller.
type Error struct {
	Code    Code
	Message string
	Details []Detail
	Err     error
	// Status overrides the code's status when not zero.
	Status int
}

// HTTPStatus is the status the error is answered with.
func (e *Error) HTTPStatus() int {
	if e.Status != 0 {
		return e.Status
	}
	return e.Code.Status()
}

func (e *Error) Error() string {
	if e.Err != nil {
		return string(e.Code) + ": " + e.Message + ": " + e.Err.Error()
	}
	return string(e.Code) + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of err when it is (or wraps) an *Error, and
// CodeInternal otherwise.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// browserView is what a web page sees of a final response.
type browserView struct {
	Status string       `json:"status"`
	LeadID string       `json:"lead_id"`
	Error  *FailedError `json:"error,omitempty"`
}

// ForBrowser projects a stored final body for a web page (a request with a
// publishable key): its status and lead id, and for a failure the error's
// code and message; no CRM id, score, tier or warnings. The stored body
// itself is unchanged.
func ForBrowser(body []byte) []byte {
	var v browserView
	if err := json.Unmarshal(body, &v); err != nil {
		return Marshal(&browserView{Status: StatusFailed})
	}
	return Marshal(&v)
}
