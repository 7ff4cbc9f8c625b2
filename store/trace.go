package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// LeadTraceParent returns the W3C traceparent of the request that last
// claimed or re-opened the lead's key ("" for none): the trace that the
// lead's work, whoever does it (its job, the reconciler, a callback
// delivery), continues. ErrNotFound when there is no such lead.
func (s *Store) LeadTraceParent(ctx context.Context, leadID uuid.UUID) (string, error) {
	var tp string
	err := s.db.QueryRow(ctx, `SELECT coalesce(trace_parent, '') FROM leads WHERE id = $1`, leadID).Scan(&tp)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("lead %s: trace: %w", leadID, err)
	}
	return tp, nil
}
