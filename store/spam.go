package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/lead"
)

// StateAlreadySuperseded is the state a release reports of a quarantined
// amendment whose superseded key another amendment superseded meanwhile.
const StateAlreadySuperseded = "already_superseded"

// Release runs the client's quarantined keys as a new claim would have
// run them: each, if lead.Key allows lead.KeyRelease (quarantined, not
// superseded, not erased, not expired), is re-opened the way a retry
// re-opens a key (reopenTx: the same lead, a new job; in time a finish and
// its callback), never judged again; a quarantined amendment supersedes its
// key now. A key that does not qualify is left as it is and reported in
// Skipped with its state. All in one transaction, with the release's row
// in the audit (who, the keys released and those left), also when it
// released none.
func (s *Store) Release(ctx context.Context, p *ReleaseParams) (*Redriven, error) {
	if err := p.By.check(); err != nil {
		return nil, err
	}
	clientID := p.ClientID
	return s.reopenKeys(ctx, "release", func(tx pgx.Tx, out *Redriven) error {
		for _, key := range p.Keys {
			name := KeyName{ClientID: clientID, Key: key}
			e, err := readKey(ctx, tx, clientID, key)
			switch {
			case errors.Is(err, pgx.ErrNoRows) || err == nil && e.Key.Expired:
				out.Skipped = append(out.Skipped, Skipped{KeyName: name, State: StateNotFound})
				continue
			case err != nil:
				return err
			case !e.Key.Allows(lead.KeyRelease):
				out.Skipped = append(out.Skipped, Skipped{KeyName: name, State: whyNotReleased(e.Key)})
				continue
			}
			// A quarantined amendment supersedes its key now, if nothing
			// else did meanwhile.
			var supersedes *string
			if err := tx.QueryRow(ctx, `SELECT supersedes FROM idempotency_keys WHERE client_id = $1 AND key = $2`,
				clientID, key).Scan(&supersedes); err != nil {
				return err
			}
			if supersedes != nil {
				tag, err := tx.Exec(ctx, `
UPDATE idempotency_keys SET superseded_by = $3
WHERE client_id = $1 AND key = $2 AND (superseded_by IS NULL OR superseded_by = $3)`, clientID, *supersedes, key)
				if err != nil {
					return err
				}
				if tag.RowsAffected() == 0 {
					out.Skipped = append(out.Skipped, Skipped{KeyName: name, State: StateAlreadySuperseded})
					continue
				}
			}
			if err := s.reopenTx(ctx, tx, clientID, key, e.Key, lead.KeyRelease, ""); err != nil {
				return err
			}
			out.Keys = append(out.Keys, name)
		}
		var detail map[string]any
		if len(out.Skipped) > 0 {
			detail = map[string]any{"skipped": out.Skipped}
		}
		return writeAudit(ctx, tx, &audit{
			who: p.By, action: ActionRelease, clientID: clientID, keys: out.Keys, count: len(out.Keys), detail: detail,
		})
	})
}

// ReleaseParams name the quarantined keys an operator releases.
type ReleaseParams struct {
	ClientID string
	Keys     []string
	// By is who asks: the audit records the release.
	By *Who
}

// QuarantinedKey is one quarantined key as an operator lists it: no
// personal data.
type QuarantinedKey struct {
	ClientID  string    `json:"client_id"`
	Key       string    `json:"key"`
	LeadID    uuid.UUID `json:"lead_id"`
	CreatedAt time.Time `json:"created_at"`
	Reasons   []string  `json:"reasons"`
}

// QuarantineFilter selects quarantined keys: of ClientID (empty for any),
// claimed within Since (zero for any), at most Limit (default 100), oldest
// first.
type QuarantineFilter struct {
	ClientID string
	Since    time.Duration
	Limit    int
}

// Quarantined returns the quarantined keys f selects; expired ones are left
// out.
func (s *Store) Quarantined(ctx context.Context, f QuarantineFilter) ([]QuarantinedKey, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	return selectAll[QuarantinedKey](ctx, s.db, "quarantined keys", `
SELECT k.client_id, k.key, k.lead_id, k.created_at, coalesce(l.spam_reasons, '{}')
FROM idempotency_keys k
JOIN leads l ON l.id = k.lead_id
WHERE k.state = 'quarantined' AND (k.expires_at IS NULL OR k.expires_at > now())
  AND ($1 = '' OR k.client_id = $1)
  AND ($2::float8 = 0 OR k.created_at > now() - $2::float8 * interval '1 second')
ORDER BY k.created_at, k.client_id, k.key
LIMIT $3`, f.ClientID, f.Since.Seconds(), f.Limit)
}

// QuarantinedEnquiry is a quarantined key with the enquiry it holds, for
// the operator who looks at it: its personal data included.
type QuarantinedEnquiry struct {
	QuarantinedKey
	// Submission is the enquiry as stored (canonical JSON); nil once its
	// personal data was erased.
	Submission []byte
}

// QuarantinedEnquiry returns the client's quarantined key and its enquiry,
// for who asks, and records the look in the audit in the same transaction;
// ErrNotFound when the client has no such key, or it is not quarantined
// (or expired): nothing shown, nothing recorded.
func (s *Store) QuarantinedEnquiry(ctx context.Context, clientID, key string, by *Who) (*QuarantinedEnquiry, error) {
	if err := by.check(); err != nil {
		return nil, err
	}
	var q QuarantinedEnquiry
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
SELECT k.client_id, k.key, k.lead_id, k.created_at, coalesce(l.spam_reasons, '{}'), l.submission
FROM idempotency_keys k
JOIN leads l ON l.id = k.lead_id
WHERE k.client_id = $1 AND k.key = $2 AND k.state = 'quarantined' AND (k.expires_at IS NULL OR k.expires_at > now())`,
			clientID, key).Scan(&q.ClientID, &q.Key, &q.LeadID, &q.CreatedAt, &q.Reasons, &q.Submission)
		if err != nil {
			return err
		}
		return writeAudit(ctx, tx, &audit{
			who: by, action: ActionShowEnquiry, clientID: clientID, keys: []KeyName{{clientID, key}}, count: 1,
			detail: map[string]any{"quarantined": true},
		})
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("quarantined enquiry: %w", err)
	}
	return &q, nil
}

// whyNotReleased names what keeps a key from its release: erased or
// superseded (a quarantined key may be either), else its state.
func whyNotReleased(k lead.Key) string {
	switch {
	case k.Erased:
		return "erased"
	case k.Superseded:
		return "superseded"
	}
	return string(k.State)
}
