// Package client is the caller's side of leadintake's retry contract, for Go
// programs that submit leads: it owns the idempotency key of an enquiry,
// every retry of it, the wait for its final answer, and the line between "the
// service said no" and "we do not know what happened".
//
// The rules it keeps:
//
//   - One key per enquiry. Submit draws a new random key (a version 4 UUID
//     from crypto/rand) for each enquiry unless the caller gives one, and
//     never changes it: an unchanged retry reuses the key, a new enquiry gets
//     a new key, and an enquiry edited after an uncertain outcome is sent
//     with Amend (a new key with Supersedes naming the earlier one).
//   - Every retry is the same request. A transport error, a time-out, a 5xx,
//     a 408, a 425 or a 429 is retried with the same key and the same bytes,
//     after the server's Retry-After when it sends one, else after a
//     jittered exponential back-off. The body is encoded once, before the
//     first attempt.
//   - Waiting is part of submitting. After a 202 the client asks the status
//     URL (GET /v1/operations/{key}) with Prefer: wait=N until the key has a
//     final answer; a server that does not hold requests is polled at the
//     pace of its Retry-After.
//   - A final answer is never confused with giving up. Submit returns a
//     *Result for a completed lead; a *Failed for a lead that failed for
//     good (crm_rejected, downstream_unavailable, erased); an *APIError for
//     a request the service refused (validation_failed,
//     idempotency_key_reused, supersedes_unknown, already_superseded...);
//     and an *OutcomeUnknownError, carrying the key, when it stopped (the
//     context ended) before any of those: the enquiry may or may not have
//     been stored, and Wait or Submit with the same key and body finds out
//     later without risk of a second lead.
//
// # Go's transport re-sends requests with an Idempotency-Key
//
// net/http's Transport treats a request that carries an Idempotency-Key
// header as safe to send again, and does so by itself, once, when a kept-alive
// connection it reused turns out to have been closed by the server without an
// answer. That is exactly what this package would do next anyway: the
// re-sent request has the same key and, through Request.GetBody, the same
// bytes, and the service answers it as the same enquiry. So the package
// leaves that behaviour on; such a re-send is invisible to it and is not
// counted as an attempt in Events. It is safe only because the service
// deduplicates by key: do not point a Client at an endpoint that does not.
//
// # Contexts
//
// Submit and Wait retry until they get a final answer or their context ends:
// give them a context with a deadline. Each attempt is bounded on its own by
// Options.Timeout (plus the time the server was asked to hold it).
package client
