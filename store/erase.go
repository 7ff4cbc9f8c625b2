package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
)

// EraseParams is one erasure request: every lead of ClientID whose email's
// HMAC is EmailHMAC.
type EraseParams struct {
	ClientID  string
	EmailHMAC []byte
	// By is who asks: the audit records the request.
	By *Who
	// Retention is how long the keys it finishes are kept.
	Retention time.Duration
}

// Erased is what an erasure did.
type Erased struct {
	// Count is the number of leads whose personal data it erased.
	Count int
	// Finished is the number of unfinished keys it finished as failed,
	// 422 erased.
	Finished int
}

// Erase erases, at once and in one transaction, the personal data of every
// lead of the client whose email matches, whatever the lead's state: its
// submission and enrichment are gone; its ids, client, external_ref, CRM
// id, score, tier, outcome and times stay. A lead not yet finished is
// finished as failed, 422 erased, the way every finish goes (finishTx): its
// key replays that answer from now on, is never re-opened, its client's
// callback hears of it, the amendment waiting for it is woken, and a run of
// its job stops at its next step. The request is recorded in the audit in
// the same transaction (who, client, the email's HMAC, count, time), also
// when nothing matched.
func (s *Store) Erase(ctx context.Context, p *EraseParams) (*Erased, error) {
	if err := p.By.check(); err != nil {
		return nil, err
	}
	out := &Erased{}
	var fin finishing
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		*out, fin = Erased{}, finishing{}
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
SELECT l.id, l.idempotency_key, `+keyColumns+`
FROM leads l
LEFT JOIN idempotency_keys k ON k.client_id = l.client_id AND k.key = l.idempotency_key AND k.lead_id = l.id
WHERE l.id = ANY($1)
ORDER BY l.id`, ids)
		if err != nil {
			return err
		}
		var finishes []*Finish
		for rows.Next() {
			var (
				id  uuid.UUID
				key string
				k   lead.Key
			)
			if err := rows.Scan(append([]any{&id, &key}, scanKey(&k)...)...); err != nil {
				rows.Close()
				return err
			}
			if to, ok := k.After(lead.KeyErase, ""); ok && to != k.State {
				finishes = append(finishes, &Finish{
					LeadID: id, ClientID: p.ClientID, Key: key, From: k.State, To: to,
					Response: response.NewFailed(id.String(), response.CodeErased,
						"the lead's personal data was erased on request before it finished"),
					FailureCode: response.CodeErased, Retention: p.Retention,
				})
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(finishes) > 0 {
			done, err := s.finishTx(ctx, tx, false, finishes, &fin)
			if err != nil {
				return err
			}
			for _, d := range done {
				if d.Applied {
					out.Finished++
				}
			}
		}
		tag, err := tx.Exec(ctx, `
UPDATE leads
SET submission = NULL, enrichment = NULL, email_hmac = NULL, content_hmac = NULL, erased_at = now(), updated_at = now(),
    finished_at = coalesce(finished_at, now())
WHERE id = ANY($1)`, ids)
		if err != nil {
			return err
		}
		out.Count = int(tag.RowsAffected())
		return writeAudit(ctx, tx, &audit{
			who: p.By, action: ActionErase, clientID: p.ClientID, count: out.Count, emailHMAC: p.EmailHMAC,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("erase: %w", err)
	}
	s.announce(fin.finals...)
	return out, nil
}

// EraseFinishedBefore erases the personal data of up to limit leads that
// finished before the time given and are not erased yet, oldest first,
// skipping rows another transaction holds, and returns how many (the
// retention of LEAD_RETENTION).
func (s *Store) EraseFinishedBefore(ctx context.Context, before time.Time, limit int) (int64, error) {
	tag, err := s.db.Exec(ctx, `
UPDATE leads
SET submission = NULL, enrichment = NULL, email_hmac = NULL, content_hmac = NULL, erased_at = now(), updated_at = now()
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
