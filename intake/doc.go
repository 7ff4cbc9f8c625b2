// Package intake is the submission side of leadintake: the lead and its
// validation, the Idempotency-Key rules, the request fingerprint, the key store
// (claim, replay, status, finish) and the HTTP API that puts them together.
//
// A submission is claimed in one PostgreSQL transaction: the key row, the lead
// row and the job that processes the lead commit together or not at all. The
// unique index on (client_id, key) decides every race; nothing is looked up
// first and inserted after.
//
// The package knows nothing of the queue or of the downstream services: the
// wiring hands the store an EnqueueFunc that inserts the processing job inside
// the claim's transaction.
package intake
