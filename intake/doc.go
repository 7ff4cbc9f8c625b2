// Package intake is leadintake's public HTTP API: authentication of the
// caller, the Idempotency-Key rules and the key's external reference, and
// the handlers that put a request through them, decode its body (package
// lead), claim its key (package store) and answer in the vocabulary of
// package response. routes.go lists every route.
//
// The package knows nothing of the queue or of the downstream services: its
// store starts the claimed leads' jobs through the Jobs the wiring gave it.
package intake
