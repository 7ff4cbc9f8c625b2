package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
)

// RedriveParams select the finished keys an operator redrives: Keys of
// ClientID, or every key whose response failed with Outcome (of ClientID
// when set, finished within Since when set).
type RedriveParams struct {
	ClientID string
	Keys     []string
	Outcome  response.Code
	Since    time.Duration
	// Limit bounds the keys an Outcome selects: the Limit that finished
	// first are redriven, the others counted in Redriven.Left; zero for
	// no bound.
	Limit int
	// DryRun decides what would be redriven, and changes and records
	// nothing.
	DryRun bool
	// By is who asks: the audit records the redrive (not a dry run).
	By *Who
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

// Redriven is what a redrive or a release did (or, dry, would do).
type Redriven struct {
	Keys    []KeyName
	Skipped []Skipped
	// Left counts the keys an outcome selected past the redrive's Limit,
	// for another redrive.
	Left int
}

// StateNotFound is the state a redrive reports of a key that is not there.
const StateNotFound = "not_found"

// Redrive re-opens every selected key that a retry of its request would
// re-open (lead.Key allows lead.KeyReopen: failed with
// downstream_unavailable, not superseded, not erased, not expired), the way
// a retry does (reopenTx: the same lead and external reference, a new job,
// and in time a new finish and callback), in one transaction, and records
// the redrive. A key that does not qualify is left as it is; the named ones
// are reported in Skipped. The redrive is recorded in the audit in the same
// transaction (who, the selection, the keys re-opened and those left), also
// when it re-opened none; a dry run is not.
func (s *Store) Redrive(ctx context.Context, p *RedriveParams) (*Redriven, error) {
	if !p.DryRun {
		if err := p.By.check(); err != nil {
			return nil, err
		}
	}
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
			// The keys that cannot be re-opened (superseded, erased,
			// expired) are left out here already, so that a bound takes
			// only keys it redrives and counts only those left to redrive;
			// lead.Key decides below all the same.
			rows, err := tx.Query(ctx, `
SELECT k.client_id, k.key, `+keyColumns+`, count(*) OVER ()
FROM idempotency_keys k
WHERE k.state = 'failed' AND k.failure_code = @outcome AND (@client = '' OR k.client_id = @client)
  AND (@since::float8 = 0 OR k.finished_at > now() - @since::float8 * interval '1 second')
  AND k.superseded_by IS NULL AND k.expires_at > now()
  AND NOT EXISTS (SELECT FROM leads l WHERE l.id = k.lead_id AND l.erased_at IS NOT NULL)
ORDER BY k.finished_at, k.client_id, k.key
LIMIT nullif(@limit::int, 0)`,
				pgx.NamedArgs{"outcome": string(p.Outcome), "client": p.ClientID, "since": p.Since.Seconds(), "limit": p.Limit})
			if err != nil {
				return err
			}
			for rows.Next() {
				c := candidate{ok: true}
				var matched int
				if err := rows.Scan(append(append([]any{&c.name.ClientID, &c.name.Key}, scanKey(&c.key)...), &matched)...); err != nil {
					rows.Close()
					return err
				}
				cands = append(cands, c)
				out.Left = matched - len(cands)
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
		detail := map[string]any{"keys_named": len(p.Keys)}
		if p.Outcome != "" {
			detail["outcome"] = p.Outcome
		}
		if p.Since > 0 {
			detail["since_seconds"] = p.Since.Seconds()
		}
		if len(out.Skipped) > 0 {
			detail["skipped"] = out.Skipped
		}
		if out.Left > 0 {
			detail["left"] = out.Left
		}
		return writeAudit(ctx, tx, &audit{
			who: p.By, action: ActionRedrive, clientID: p.ClientID, keys: out.Keys, count: len(out.Keys), detail: detail,
		})
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
