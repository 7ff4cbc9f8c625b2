package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Callback is one delivery owed to a client's callback.
type Callback struct {
	ID        uuid.UUID
	ClientID  string
	Payload   []byte
	CreatedAt time.Time
	// Done is set once it was delivered or given up.
	Done bool
	// TraceParent is that of the request that last claimed or re-opened
	// the key of the finish delivered ("" for none): the delivery
	// continues its trace.
	TraceParent string
}

// LoadCallback returns a delivery; ErrNotFound when there is none.
func (s *Store) LoadCallback(ctx context.Context, id uuid.UUID) (*Callback, error) {
	cb := &Callback{ID: id}
	err := s.db.QueryRow(ctx, `
SELECT c.client_id, c.payload, c.created_at, c.delivered_at IS NOT NULL OR c.given_up_at IS NOT NULL,
       coalesce((SELECT l.trace_parent FROM leads l WHERE l.id = c.lead_id), '')
FROM callbacks c WHERE c.id = $1`, id).Scan(&cb.ClientID, &cb.Payload, &cb.CreatedAt, &cb.Done, &cb.TraceParent)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("load callback: %w", err)
	}
	return cb, nil
}

// CallbackAttempted records the end of one delivery attempt: delivered,
// given up, or neither (another attempt follows).
func (s *Store) CallbackAttempted(ctx context.Context, id uuid.UUID, delivered, givenUp bool) error {
	_, err := s.db.Exec(ctx, `
UPDATE callbacks
SET attempts = attempts + 1,
    delivered_at = CASE WHEN $2 THEN now() END,
    given_up_at = CASE WHEN $3 THEN now() END
WHERE id = $1 AND delivered_at IS NULL AND given_up_at IS NULL`, id, delivered, givenUp)
	if err != nil {
		return fmt.Errorf("record callback attempt: %w", err)
	}
	return nil
}

// OldestPendingCallback is the age of the oldest delivery still owed; zero
// when none is.
func (s *Store) OldestPendingCallback(ctx context.Context) (time.Duration, error) {
	var secs float64
	err := s.db.QueryRow(ctx, `
SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
FROM callbacks WHERE delivered_at IS NULL AND given_up_at IS NULL`).Scan(&secs)
	if err != nil {
		return 0, fmt.Errorf("oldest pending callback: %w", err)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// DeleteOldCallbacks deletes up to limit deliveries that ended (delivered
// or given up) before the time given, and returns how many.
func (s *Store) DeleteOldCallbacks(ctx context.Context, endedBefore time.Time, limit int) (int64, error) {
	tag, err := s.db.Exec(ctx, `
DELETE FROM callbacks WHERE id IN (
    SELECT id FROM callbacks
    WHERE coalesce(delivered_at, given_up_at) < $1
    LIMIT $2
    FOR UPDATE SKIP LOCKED)`, endedBefore, limit)
	if err != nil {
		return 0, fmt.Errorf("delete old callbacks: %w", err)
	}
	return tag.RowsAffected(), nil
}
