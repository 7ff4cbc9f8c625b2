// Package intake is leadintake's public HTTP API: authentication of the
// caller, the Idempotency-Key rules and the key's external reference, and
// the handlers that put a request through them, decode its body (package
// lead), claim its key (package store) and answer in the vocabulary of
// package response. routes.go lists every route, and which of them are
// public or open to web pages.
//
// One concern a file: handler.go builds the API, middleware.go holds what
// every request goes through (its log line and metrics) and trace.go its
// span, auth.go who may call and from which page, key.go and ref.go the
// Idempotency-Key and its external reference, leads.go the submission
// (POST /v1/leads, and the signed webhooks of webhook.go), peek.go when a
// submission reads its key before it claims it, operations.go the poll of
// a key and the health routes, wait.go Prefer: wait, ratelimit.go the rate
// limit of web pages (whose new submissions package spam judges), and
// errors.go the one place where an error becomes an answer. Per-request
// values live in one typed request (request.go).
//
// The package knows nothing of the queue or of the downstream services: its
// store starts the claimed leads' jobs through the Jobs the wiring gave it.
package intake
