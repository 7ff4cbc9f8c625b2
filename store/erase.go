package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/response"
)

// Ways an erasure was asked for, as its record says.
const (
	ErasureByCommand  = "command"
	ErasureByAdminAPI = "admin_api"
)

// EraseParams is one erasure request: every lead of ClientID whose email's
// HMAC is EmailHMAC.
type EraseParams struct {
	ClientID  string
	EmailHMAC []byte
	// Via records how it was asked for: ErasureByCommand or
	// ErasureByAdminAPI.
	Via string
	// Retention is how long the keys it finishes are kept.
	Retention time.Duration
	// Callback is true when the client has a callback: the finishes of
	// the erasure are announced like any other.
	Callback bool
}

// Erased is what an erasure did.
type Erased struct {
	// Count is the number of leads whose personal data it erased.
	Count int
	// Callbacks are the deliveries of the keys it finished (with
	// Callback).
	Callbacks []uuid.UUID
	// WakeJobIDs are the jobs of the amendments that waited for a key it
	// finished.
	WakeJobIDs []int64
}

// Erase erases, at once and in one transaction, the personal data of every
// lead of the client whose email matches, whatever the lead's state: its
// submission and enrichment are gone; its ids, client, external_ref, CRM
// id, score, tier, outcome and times stay. A lead not yet finished is
// finished as failed, 422 erased: its key replays that answer from now on,
// is never re-opened, and a run of its job stops at its next step. The
// request is recorded (client, email HMAC, count, time), also when nothing
// matched. inTx (nil for none) runs in the same transaction, to enqueue the
// callbacks and wake the amendments of Erased.
func (s *Store) Erase(ctx context.Context, p *EraseParams, inTx func(pgx.Tx, *Erased) error) (*Erased, error) {
	out := &Erased{}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		*out = Erased{}
		// The leads are locked first; their keys are read by the next
		// statement, whose snapshot is taken once the locks are held: a
		// re-open of one of the keys that committed before is seen
		// (processing, finished here), one that did not yet cannot commit
		// (it updates the lead too, and finds it erased).
		var ids []uuid.UUID
		rows, err := tx.Query(ctx, `
SELECT id FROM leads WHERE client_id = $1 AND email_hmac = $2 AND erased_at IS NULL
ORDER BY id FOR UPDATE`, p.ClientID, p.EmailHMAC)
		if err != nil {
			return err
		}
		if ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `
SELECT l.id, l.idempotency_key, coalesce(k.state IN ('processing', 'needs_reconciliation'), false)
FROM leads l
LEFT JOIN idempotency_keys k ON k.client_id = l.client_id AND k.key = l.idempotency_key AND k.lead_id = l.id
WHERE l.id = ANY($1)
ORDER BY l.id`, ids)
		if err != nil {
			return err
		}
		type match struct {
			ID         uuid.UUID
			Key        string
			Unfinished bool
		}
		matches, err := pgx.CollectRows(rows, pgx.RowToStructByPos[match])
		if err != nil {
			return err
		}
		for _, m := range matches {
			if !m.Unfinished {
				continue
			}
			if err := finishErased(ctx, tx, p, m.ID, m.Key, out); err != nil {
				return err
			}
		}
		tag, err := tx.Exec(ctx, `
UPDATE leads
SET submission = NULL, enrichment = NULL, email_hmac = NULL, erased_at = now(), updated_at = now(),
    finished_at = coalesce(finished_at, now())
WHERE id = ANY($1)`, ids)
		if err != nil {
			return err
		}
		out.Count = int(tag.RowsAffected())
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO erasures (id, client_id, email_hmac, erased, via) VALUES ($1, $2, $3, $4, $5)`,
			id, p.ClientID, p.EmailHMAC, out.Count, p.Via); err != nil {
			return err
		}
		if inTx != nil {
			return inTx(tx, out)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("erase: %w", err)
	}
	return out, nil
}

// finishErased finishes the unfinished key of an erased lead as failed,
// 422 erased, announcing it as every finish is.
func finishErased(ctx context.Context, tx pgx.Tx, p *EraseParams, leadID uuid.UUID, key string, out *Erased) error {
	final := response.NewFailed(leadID.String(), response.CodeErased,
		"the lead's personal data was erased on request before it finished")
	var wake *int64
	err := tx.QueryRow(ctx, `
WITH k AS (
    UPDATE idempotency_keys
    SET state = 'failed', response_status = $4, response_body = $5, failure_code = $6, updated_at = now(),
        finished_at = now(), expires_at = now() + $7::interval
    WHERE client_id = $1 AND key = $2 AND lead_id = $3 AND state IN ('processing', 'needs_reconciliation')
    RETURNING client_id, superseded_by, pg_notify('`+FinishedChannel+`', lead_id::text)
)
SELECT (SELECT al.job_id
        FROM idempotency_keys ak JOIN leads al ON al.id = ak.lead_id
        WHERE ak.client_id = k.client_id AND ak.key = k.superseded_by AND ak.state = 'processing')
FROM k`, p.ClientID, key, leadID, final.Status, final.Body, response.CodeErased, p.Retention).Scan(&wake)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // the worker finished it meanwhile: it keeps its response
	}
	if err != nil {
		return fmt.Errorf("finish erased lead %s: %w", leadID, err)
	}
	if wake != nil {
		out.WakeJobIDs = append(out.WakeJobIDs, *wake)
	}
	if p.Callback {
		id, err := insertCallback(ctx, tx, leadID, &Finish{
			KeyState: KeyFailed, Response: final, Callback: &CallbackKey{ClientID: p.ClientID, Key: key},
		})
		if err != nil {
			return err
		}
		out.Callbacks = append(out.Callbacks, *id)
	}
	return nil
}

// EraseFinishedBefore erases the personal data of up to limit leads that
// finished before the time given and are not erased yet, oldest first,
// skipping rows another transaction holds, and returns how many (the
// retention of LEAD_RETENTION).
func (s *Store) EraseFinishedBefore(ctx context.Context, before time.Time, limit int) (int64, error) {
	tag, err := s.db.Exec(ctx, `
UPDATE leads
SET submission = NULL, enrichment = NULL, email_hmac = NULL, erased_at = now(), updated_at = now()
WHERE id IN (
    SELECT id FROM leads
    WHERE erased_at IS NULL AND finished_at < $1
    ORDER BY finished_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED)`, before, limit)
	if err != nil {
		return 0, fmt.Errorf("erase finished leads: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Erasure is one recorded erasure request.
type Erasure struct {
	ClientID    string
	EmailHMAC   []byte
	Erased      int
	RequestedAt time.Time
	Via         string
}

// Erasures returns the erasure requests recorded for the client and the
// email's HMAC, oldest first.
func (s *Store) Erasures(ctx context.Context, clientID string, emailHMAC []byte) ([]Erasure, error) {
	rows, err := s.db.Query(ctx, `
SELECT client_id, email_hmac, erased, requested_at, via FROM erasures
WHERE client_id = $1 AND email_hmac = $2 ORDER BY requested_at`, clientID, emailHMAC)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Erasure])
}
