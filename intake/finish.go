package intake

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// KeyRef names the key of one lead: the lead's client and key, and the lead
// itself, so that a key taken over by a newer lead (after it expired) is never
// finished by the older one.
type KeyRef struct {
	ClientID string
	Key      string
	LeadID   uuid.UUID
}

// FinishParams is a key's final response.
type FinishParams struct {
	// State is StateCompleted or StateFailed.
	State string
	// Status and Body are the response replayed from now on.
	Status int
	Body   []byte
	// FailureCode is the error code of a failed key (CodeCRMRejected,
	// CodeDownstreamUnavailable); empty when completed.
	FailureCode string
	// Retention is how long the finished key is kept.
	Retention time.Duration
}

// FinishKeyTx records a key's final response inside tx. It returns false
// when the key was not in progress for that lead any more (already finished,
// or taken over after it expired): the caller then has nothing to finish.
func FinishKeyTx(ctx context.Context, tx pgx.Tx, ref KeyRef, p *FinishParams) (bool, error) {
	var failure *string
	if p.FailureCode != "" {
		failure = &p.FailureCode
	}
	tag, err := tx.Exec(ctx, `
UPDATE idempotency_keys
SET state = $4, response_status = $5, response_body = $6, failure_code = $7,
    updated_at = now(), finished_at = now(), expires_at = now() + $8::interval
WHERE client_id = $1 AND key = $2 AND lead_id = $3
  AND state IN ('processing', 'needs_reconciliation')`,
		ref.ClientID, ref.Key, ref.LeadID, p.State, p.Status, p.Body, failure, p.Retention)
	if err != nil {
		return false, fmt.Errorf("finish key: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// SetKeyStateTx moves an unfinished key between processing and
// needs_reconciliation inside tx. It returns false when the key was not in
// state from for that lead.
func SetKeyStateTx(ctx context.Context, tx pgx.Tx, ref KeyRef, from, to string) (bool, error) {
	tag, err := tx.Exec(ctx, `
UPDATE idempotency_keys SET state = $5, updated_at = now()
WHERE client_id = $1 AND key = $2 AND lead_id = $3 AND state = $4`,
		ref.ClientID, ref.Key, ref.LeadID, from, to)
	if err != nil {
		return false, fmt.Errorf("set key state: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}
