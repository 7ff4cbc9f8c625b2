package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
)

// Ways a redrive was asked for, as its record says.
const (
	RedriveByCommand  = "cli"
	RedriveByAdminAPI = "admin"
)

// RedriveParams select the finished keys an operator redrives: Keys of
// ClientID, or every key whose response failed with Outcome (of ClientID
// when set, finished within Since when set).
type RedriveParams struct {
	ClientID string
	Keys     []string
	Outcome  response.Code
	Since    time.Duration
	// DryRun decides what would be redriven, and changes and records
	// nothing.
	DryRun bool
	// Via records how it was asked for: RedriveByCommand or
	// RedriveByAdminAPI.
	Via string
}

// KeyName names one key of a client.
type KeyName struct {
	ClientID string `json:"client_id"`
	Key      string `json:"key"`
}

// Skipped is a key named in a redrive that did not qualify, and its state
// (not_found for a key the client does not have, or that expired).
type Skipped struct {
	KeyName
	State string `json:"state"`
}

// Redriven is what a redrive did (or, dry, would do).
type Redriven struct {
	Keys    []KeyName
	Skipped []Skipped
}

// StateNotFound is the state a redrive reports of a key that is not there.
const StateNotFound = "not_found"

// Redrive re-opens every selected key that a retry of its request would
// re-open (lead.Key allows lead.KeyReopen: failed with
// downstream_unavailable, not superseded, not erased, not expired), the way
// a retry does (reopenTx: the same lead and external reference, a new job,
// and in time a new finish and callback), in one transaction, and records
// the redrive. A key that does not qualify is left as it is; the named ones
// are reported in Skipped.
func (s *Store) Redrive(ctx context.Context, p *RedriveParams) (*Redriven, error) {
	return s.reopenKeys(ctx, "redrive", func(tx pgx.Tx, out *Redriven) error {
		type candidate struct {
			name KeyName
			key  lead.Key
			ok   bool
		}
		var cands []candidate
		if len(p.Keys) > 0 {
			for _, k := range p.Keys {
				e, err := readKey(ctx, tx, p.ClientID, k)
				switch {
				case errors.Is(err, pgx.ErrNoRows):
					cands = append(cands, candidate{name: KeyName{p.ClientID, k}})
				case err != nil:
					return err
				default:
					cands = append(cands, candidate{name: KeyName{p.ClientID, k}, key: e.Key, ok: true})
				}
			}
		} else {
			rows, err := tx.Query(ctx, `
SELECT k.client_id, k.key, `+keyColumns+`
FROM idempotency_keys k
WHERE k.state = 'failed' AND k.failure_code = @outcome AND (@client = '' OR k.client_id = @client)
  AND (@since::float8 = 0 OR k.finished_at > now() - @since::float8 * interval '1 second')
ORDER BY k.finished_at, k.client_id, k.key`,
				pgx.NamedArgs{"outcome": string(p.Outcome), "client": p.ClientID, "since": p.Since.Seconds()})
			if err != nil {
				return err
			}
			for rows.Next() {
				c := candidate{ok: true}
				if err := rows.Scan(append([]any{&c.name.ClientID, &c.name.Key}, scanKey(&c.key)...)...); err != nil {
					rows.Close()
					return err
				}
				cands = append(cands, c)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		for _, c := range cands {
			switch {
			case !c.ok || c.key.Expired:
				out.Skipped = append(out.Skipped, Skipped{KeyName: c.name, State: StateNotFound})
				continue
			case !c.key.Allows(lead.KeyReopen):
				if len(p.Keys) > 0 {
					out.Skipped = append(out.Skipped, Skipped{KeyName: c.name, State: string(c.key.State)})
				}
				continue
			}
			if !p.DryRun {
				if err := s.reopenTx(ctx, tx, c.name.ClientID, c.name.Key, c.key, lead.KeyReopen, ""); err != nil {
					return err
				}
			}
			out.Keys = append(out.Keys, c.name)
		}
		if p.DryRun {
			return errNothingToCommit
		}
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		var since *float64
		if p.Since > 0 {
			secs := p.Since.Seconds()
			since = &secs
		}
		_, err = tx.Exec(ctx, `
INSERT INTO redrives (id, via, client_id, outcome, since, keys, redriven)
VALUES ($1, $2, $3, $4, $5 * interval '1 second', $6, $7)`,
			id, p.Via, nullIfEmpty(p.ClientID), nullIfEmpty(p.Outcome), since, len(p.Keys), len(out.Keys))
		return err
	})
}

// reopenKeys runs fill, which re-opens keys (reopenTx) and lists in out the
// keys it re-opened and those it left, in one transaction: committed unless
// fill returns errNothingToCommit (nothing to write, as a dry run). A key
// that changed between its read and its re-open (a retry re-opened it
// first, an erasure, an amendment: errRaced) starts it all again, a few
// times at most. what names the operation in errors.
func (s *Store) reopenKeys(ctx context.Context, what string, fill func(tx pgx.Tx, out *Redriven) error) (*Redriven, error) {
	if s.jobs == nil {
		return nil, errNoJobs
	}
	for range 5 {
		out := &Redriven{}
		err := s.inTx(ctx, func(tx pgx.Tx) error { return fill(tx, out) })
		switch {
		case errors.Is(err, errRaced):
			continue
		case err != nil && !errors.Is(err, errNothingToCommit):
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: the keys changed under every attempt", what)
}
