package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/internal/tracing"
	"github.com/leadintake/leadintake/lead"
)

// KeyRef names a client's key and the lead it holds.
type KeyRef struct {
	ClientID string
	Key      string
	LeadID   uuid.UUID
}

// AwaitingReconciliation returns up to limit keys in needs_reconciliation,
// those not tried yet first, then those whose last look-up failed longest
// ago.
func (s *Store) AwaitingReconciliation(ctx context.Context, limit int) ([]KeyRef, error) {
	return selectAll[KeyRef](ctx, s.db, "keys awaiting reconciliation", `
SELECT client_id, key, lead_id FROM idempotency_keys
WHERE state = 'needs_reconciliation'
ORDER BY reconcile_after NULLS FIRST, updated_at
LIMIT $1`, limit)
}

// PostponeReconciliation moves a key awaiting reconciliation to the back of
// the line: its look-up failed, or its lead cannot be read.
func (s *Store) PostponeReconciliation(ctx context.Context, ref KeyRef) error {
	_, err := s.db.Exec(ctx, `
UPDATE idempotency_keys SET reconcile_after = now()
WHERE client_id = $1 AND key = $2 AND lead_id = $3 AND state = 'needs_reconciliation'`,
		ref.ClientID, ref.Key, ref.LeadID)
	if err != nil {
		return fmt.Errorf("postpone reconciliation: %w", err)
	}
	return nil
}

// Resume puts a lead awaiting reconciliation back to work with the state
// that reconciliation settled (lead.Settle): its key processing again, its
// CRM step as settled, and a new job, in one transaction. l is the lead as
// read, its key included; nothing changes, and Resume returns false, when
// its key does not allow lead.KeyResume or is no longer as read (another
// reconciler, or an operator, settled it first).
func (s *Store) Resume(ctx context.Context, l *Lead, st lead.State) (bool, error) {
	return s.resume(ctx, l, st, nil)
}

// Settle is Resume for an operator who settled the key by hand (`api keys
// settle`): when the lead resumes, the settle is recorded in the audit in
// the same transaction (who, the key, the CRM id found or none); when it
// does not, nothing is.
func (s *Store) Settle(ctx context.Context, l *Lead, st lead.State, by *Who) (bool, error) {
	if err := by.check(); err != nil {
		return false, err
	}
	return s.resume(ctx, l, st, by)
}

func (s *Store) resume(ctx context.Context, l *Lead, st lead.State, by *Who) (bool, error) {
	if s.jobs == nil {
		return false, errNoJobs
	}
	if !l.KeyState.Allows(lead.KeyResume) {
		return false, nil
	}
	var resumed bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var kept string
		err := tx.QueryRow(ctx, `
WITH k AS (
    UPDATE idempotency_keys k SET state = 'processing', reconcile_after = NULL, updated_at = now()
    FROM leads r
    WHERE r.id = @lead AND r.run = @run
      AND k.client_id = r.client_id AND k.key = r.idempotency_key AND k.lead_id = r.id
      AND `+keyAsRead+`
    RETURNING k.lead_id
)
UPDATE leads SET crm_state = @crm_state, crm_id = @crm_id, updated_at = now()
WHERE id = (SELECT lead_id FROM k)
RETURNING coalesce(trace_parent, '')`, readArgs(l.KeyState, pgx.NamedArgs{
			"lead": l.ID, "run": l.Run.Seq, "crm_state": st.CRM, "crm_id": nullIfEmpty(st.CRMID),
		})).Scan(&kept)
		if errors.Is(err, pgx.ErrNoRows) {
			return errNothingToCommit
		}
		if err != nil {
			return err
		}
		resumed = true
		if by != nil {
			detail := map[string]any{"found": st.CRM == lead.CRMAccepted}
			if st.CRMID != "" {
				detail["crm_id"] = st.CRMID
			}
			if err := writeAudit(ctx, tx, &audit{
				who: by, action: ActionSettle, clientID: l.ClientID, keys: []KeyName{{l.ClientID, l.Key}}, count: 1, detail: detail,
			}); err != nil {
				return err
			}
		}
		// The resumed job continues the trace of ctx (the reconciler's
		// span in the lead's trace, see LeadTraceParent), else, for an
		// operator's settle, the trace of the POST that last claimed or
		// re-opened the key.
		return enqueue(ctx, tx, s.jobs, l.ID, cmp.Or(tracing.TraceParent(ctx), kept))
	})
	if errors.Is(err, errNothingToCommit) {
		err = nil
	}
	if err != nil {
		return false, fmt.Errorf("resume lead %s: %w", l.ID, err)
	}
	return resumed, nil
}

// Unfinished is a lead whose key is processing.
type Unfinished struct {
	Run Run
	// JobID is the job recorded for the lead; nil when none was.
	JobID     *int64
	UpdatedAt time.Time
}

// UnfinishedCursor is where a walk through the processing keys stands; the
// zero value starts it.
type UnfinishedCursor struct {
	UpdatedAt time.Time
	LeadID    uuid.UUID
}

// Processing returns up to limit leads whose key is processing and was last
// changed before olderThan, oldest first, after the cursor, and the cursor
// of the next page.
func (s *Store) Processing(ctx context.Context, olderThan time.Time, after UnfinishedCursor, limit int) ([]Unfinished, UnfinishedCursor, error) {
	rows, err := s.db.Query(ctx, `
SELECT l.id, l.run, l.job_id, k.updated_at
FROM idempotency_keys k
JOIN leads l ON l.id = k.lead_id
WHERE k.state = 'processing' AND k.updated_at < $1
  AND (k.updated_at, k.lead_id) > ($2, $3)
ORDER BY k.updated_at, k.lead_id
LIMIT $4`, olderThan, after.UpdatedAt, after.LeadID, limit)
	if err != nil {
		return nil, after, fmt.Errorf("processing keys: %w", err)
	}
	defer rows.Close()
	var list []Unfinished
	for rows.Next() {
		var u Unfinished
		if err := rows.Scan(&u.Run.LeadID, &u.Run.Seq, &u.JobID, &u.UpdatedAt); err != nil {
			return nil, after, fmt.Errorf("processing keys: %w", err)
		}
		list = append(list, u)
		after = UnfinishedCursor{UpdatedAt: u.UpdatedAt, LeadID: u.Run.LeadID}
	}
	if err := rows.Err(); err != nil {
		return nil, after, fmt.Errorf("processing keys: %w", err)
	}
	return list, after, nil
}

// DeleteExpiredKeys deletes up to limit keys whose retention has passed,
// oldest first, skipping rows another transaction holds, with their leads'
// delivery logs, and returns how many keys it deleted.
func (s *Store) DeleteExpiredKeys(ctx context.Context, limit int) (int64, error) {
	var n int64
	err := s.db.QueryRow(ctx, `
WITH k AS (
    DELETE FROM idempotency_keys
    WHERE (client_id, key) IN (
        SELECT client_id, key FROM idempotency_keys
        WHERE expires_at <= now()
        ORDER BY expires_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED)
    RETURNING lead_id
), c AS (
    DELETE FROM lead_calls WHERE lead_id IN (SELECT lead_id FROM k)
)
SELECT count(*) FROM k`, limit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("delete expired keys: %w", err)
	}
	return n, nil
}
