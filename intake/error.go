package intake

import (
	"errors"
	"fmt"
	"net/http"
)

// Error codes. Each maps to exactly one HTTP status, in StatusOf.
const (
	CodeUnauthorized          = "unauthorized"
	CodeClientMismatch        = "client_mismatch"
	CodeKeyMissing            = "idempotency_key_missing"
	CodeKeyInvalid            = "idempotency_key_invalid"
	CodeUnsupportedMediaType  = "unsupported_media_type"
	CodeBodyTooLarge          = "body_too_large"
	CodeInvalidJSON           = "invalid_json"
	CodeUnknownField          = "unknown_field"
	CodeValidationFailed      = "validation_failed"
	CodeKeyReused             = "idempotency_key_reused"
	CodeStoreUnavailable      = "store_unavailable"
	CodeNotFound              = "not_found"
	CodeMethodNotAllowed      = "method_not_allowed"
	CodeRequestTimeout        = "request_timeout"
	CodeHeadersTooLarge       = "request_header_fields_too_large"
	CodeInternal              = "internal_error"
	CodeBadRequest            = "bad_request"
	CodeCRMRejected           = "crm_rejected"
	CodeDownstreamUnavailable = "downstream_unavailable"
)

var codeStatus = map[string]int{
	CodeUnauthorized:         http.StatusUnauthorized,
	CodeClientMismatch:       http.StatusForbidden,
	CodeKeyMissing:           http.StatusBadRequest,
	CodeKeyInvalid:           http.StatusBadRequest,
	CodeUnsupportedMediaType: http.StatusUnsupportedMediaType,
	CodeBodyTooLarge:         http.StatusRequestEntityTooLarge,
	CodeInvalidJSON:          http.StatusBadRequest,
	CodeUnknownField:         http.StatusUnprocessableEntity,
	CodeValidationFailed:     http.StatusUnprocessableEntity,
	CodeKeyReused:            http.StatusUnprocessableEntity,
	CodeStoreUnavailable:     http.StatusServiceUnavailable,
	CodeNotFound:             http.StatusNotFound,
	CodeMethodNotAllowed:     http.StatusMethodNotAllowed,
	CodeRequestTimeout:       http.StatusRequestTimeout,
	CodeHeadersTooLarge:      http.StatusRequestHeaderFieldsTooLarge,
	CodeBadRequest:           http.StatusBadRequest,
	CodeInternal:             http.StatusInternalServerError,
}

// StatusOf returns the HTTP status of an error code; unknown codes are 500.
func StatusOf(code string) int {
	if s, ok := codeStatus[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Detail is one entry of an error's details: which field broke which rule.
type Detail struct {
	Field   string `json:"field"`
	Problem string `json:"problem"`
}

// Error is the error every refusal of the API is expressed as. Handlers return
// it; the HTTP error handler turns it into the response
// {"error": {"code", "message", "details"}} with the status of its code.
type Error struct {
	Code    string
	Message string
	Details []Detail
	// Err is the underlying cause, logged but never shown to the caller.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with the given code and message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err when it is (or wraps) an *Error, and
// CodeInternal otherwise.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
