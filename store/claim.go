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

// EnqueueFunc inserts the job that processes a lead inside tx, the
// transaction that claims its key (or re-opens it, or resumes it after
// reconciliation), and returns the job's id. If it fails, the whole
// transaction is rolled back.
type EnqueueFunc func(ctx context.Context, tx pgx.Tx, leadID uuid.UUID) (jobID int64, err error)

// Outcome says what a claim found.
type Outcome int

// Claim outcomes.
const (
	// OutcomeClaimed: the key was new (or expired) and is now this
	// request's; its lead and job were committed with it.
	OutcomeClaimed Outcome = iota + 1
	// OutcomeReopened: the key had failed with downstream_unavailable; the
	// same lead got a new job.
	OutcomeReopened
	// OutcomeInProgress: the same request is still being processed.
	OutcomeInProgress
	// OutcomeReplayed: the same request is finished; its response is
	// replayed.
	OutcomeReplayed
	// OutcomeMismatch: the key belongs to a different request body.
	OutcomeMismatch
)

var outcomeNames = [...]string{"", "claimed", "reopened", "in_progress", "replayed", "mismatch"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o > 0 {
		return outcomeNames[o]
	}
	return "unknown"
}

// ClaimParams is one request to claim a key for.
type ClaimParams struct {
	ClientID    string
	Key         string
	ExternalRef string
	Payload     *lead.Payload
	// Enqueue inserts the lead's job when the key is claimed or re-opened.
	Enqueue EnqueueFunc
}

// ClaimResult is what Store.Claim decided.
type ClaimResult struct {
	Outcome Outcome
	// State is the key's state: processing or needs_reconciliation while in
	// progress, completed or failed when finished.
	State  KeyState
	LeadID uuid.UUID
	// Response is the stored final response (OutcomeReplayed only).
	Response response.Final
}

// claimSQL inserts the key and the lead when the key is new, and otherwise
// returns the existing row, in one statement. A row inserted by a transaction
// that committed after this statement's snapshot was taken is not visible to
// the second SELECT: the statement then returns nothing, and Claim reads the
// row again with a new snapshot.
const claimSQL = `
WITH claimed AS (
    INSERT INTO idempotency_keys (client_id, key, fingerprint, state, lead_id)
    VALUES ($1, $2, $3, 'processing', $4)
    ON CONFLICT (client_id, key) DO NOTHING
    RETURNING lead_id
), lead AS (
    INSERT INTO leads (id, client_id, idempotency_key, external_ref, submission)
    SELECT lead_id, $1, $2, $5, $6 FROM claimed
)
SELECT true, 'processing', $3::bytea, lead_id, NULL::smallint, NULL::json, NULL::text, false
FROM claimed
UNION ALL
SELECT false, k.state, k.fingerprint, k.lead_id, k.response_status, k.response_body, k.failure_code,
       k.expires_at <= now()
FROM idempotency_keys k
WHERE k.client_id = $1 AND k.key = $2 AND NOT EXISTS (SELECT FROM claimed)`

const readKeySQL = `
SELECT false, state, fingerprint, lead_id, response_status, response_body, failure_code,
       expires_at <= now()
FROM idempotency_keys WHERE client_id = $1 AND key = $2`

// takeOverSQL gives an expired key to a new request. The condition is
// checked again under the row lock, so of two racing take-overs one wins.
const takeOverSQL = `
WITH key AS (
    UPDATE idempotency_keys
    SET fingerprint = $3, state = 'processing', lead_id = $4, response_status = NULL,
        response_body = NULL, failure_code = NULL, created_at = now(), updated_at = now(),
        finished_at = NULL, expires_at = NULL, reconcile_after = NULL
    WHERE client_id = $1 AND key = $2 AND expires_at <= now()
    RETURNING lead_id
)
INSERT INTO leads (id, client_id, idempotency_key, external_ref, submission)
SELECT lead_id, $1, $2, $5, $6 FROM key`

// reopenSQL gives a key that failed on transient downstream failures a new
// attempt for the same lead, again atomically under the row lock.
const reopenSQL = `
UPDATE idempotency_keys
SET state = 'processing', response_status = NULL, response_body = NULL, failure_code = NULL,
    updated_at = now(), finished_at = NULL, expires_at = NULL
WHERE client_id = $1 AND key = $2 AND state = 'failed' AND failure_code = $3
  AND fingerprint = $4 AND expires_at > now()
RETURNING lead_id`

// setJobSQL records the job that works a lead, in the transaction that
// inserted it.
const setJobSQL = `UPDATE leads SET job_id = $2 WHERE id = $1`

type keyRow struct {
	claimed        bool
	state          KeyState
	fingerprint    []byte
	leadID         uuid.UUID
	responseStatus *int16
	responseBody   []byte
	failureCode    *string
	expired        *bool
}

func scanKeyRow(row pgx.Row) (*keyRow, error) {
	var r keyRow
	err := row.Scan(&r.claimed, &r.state, &r.fingerprint, &r.leadID, &r.responseStatus,
		&r.responseBody, &r.failureCode, &r.expired)
	return &r, err
}

// errRaced means the key changed between two statements of a claim: it
// starts again.
var errRaced = errors.New("the key changed during the claim")

// Claim claims p.Key for p.ClientID, or reports what the key already holds.
// A new key, its lead and its job commit in one transaction. The errors it
// returns are the database's (see IsUnavailable); a refusal is a result, not
// an error.
func (s *Store) Claim(ctx context.Context, p *ClaimParams) (*ClaimResult, error) {
	// A claim races at most a handful of times (a winner that is deleted by
	// clean-up as it expires, a take-over lost to another); past that the
	// database is misbehaving.
	for range 5 {
		res, err := s.claimOnce(ctx, p)
		if !errors.Is(err, errRaced) {
			return res, err
		}
	}
	return nil, errors.New("claim: the key changed under every attempt")
}

func (s *Store) claimOnce(ctx context.Context, p *ClaimParams) (*ClaimResult, error) {
	newLeadID, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("claim: lead id: %w", err)
	}
	fp := p.Payload.Fingerprint[:]
	var res *ClaimResult
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		row, err := scanKeyRow(tx.QueryRow(ctx, claimSQL, p.ClientID, p.Key, fp, newLeadID,
			p.ExternalRef, p.Payload.Canonical))
		if errors.Is(err, pgx.ErrNoRows) {
			// Lost the race to a transaction that committed after our
			// snapshot: read its row with a fresh one.
			row, err = scanKeyRow(tx.QueryRow(ctx, readKeySQL, p.ClientID, p.Key))
			if errors.Is(err, pgx.ErrNoRows) {
				return errRaced
			}
		}
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}

		switch {
		case row.claimed:
			res, err = claimed(ctx, tx, p, OutcomeClaimed, newLeadID)
			return err

		case row.expired != nil && *row.expired:
			tag, err := tx.Exec(ctx, takeOverSQL, p.ClientID, p.Key, fp, newLeadID, p.ExternalRef, p.Payload.Canonical)
			if err != nil {
				return fmt.Errorf("claim: take over expired key: %w", err)
			}
			if tag.RowsAffected() == 0 {
				return errRaced
			}
			res, err = claimed(ctx, tx, p, OutcomeClaimed, newLeadID)
			return err

		case string(row.fingerprint) != string(fp):
			res = &ClaimResult{Outcome: OutcomeMismatch, State: row.state, LeadID: row.leadID}
			return errNothingToCommit

		case row.state == KeyFailed && row.failureCode != nil && response.Code(*row.failureCode) == response.CodeDownstreamUnavailable:
			var leadID uuid.UUID
			err := tx.QueryRow(ctx, reopenSQL, p.ClientID, p.Key, response.CodeDownstreamUnavailable, fp).Scan(&leadID)
			if errors.Is(err, pgx.ErrNoRows) {
				return errRaced
			}
			if err != nil {
				return fmt.Errorf("claim: reopen: %w", err)
			}
			res, err = claimed(ctx, tx, p, OutcomeReopened, leadID)
			return err

		case row.state.Finished():
			res = &ClaimResult{
				Outcome:  OutcomeReplayed,
				State:    row.state,
				LeadID:   row.leadID,
				Response: response.Final{Status: int(*row.responseStatus), Body: row.responseBody},
			}
			return errNothingToCommit

		default:
			res = &ClaimResult{Outcome: OutcomeInProgress, State: row.state, LeadID: row.leadID}
			return errNothingToCommit
		}
	})
	if errors.Is(err, errNothingToCommit) {
		err = nil
	}
	return res, err
}

// errNothingToCommit ends a transaction that only read: it is rolled back.
var errNothingToCommit = errors.New("nothing to commit")

// claimed enqueues the job of a claimed or re-opened lead and records it on
// the lead, inside the claim's transaction.
func claimed(ctx context.Context, tx pgx.Tx, p *ClaimParams, outcome Outcome, leadID uuid.UUID) (*ClaimResult, error) {
	if err := enqueue(ctx, tx, p.Enqueue, leadID); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return &ClaimResult{Outcome: outcome, State: KeyProcessing, LeadID: leadID}, nil
}

func enqueue(ctx context.Context, tx pgx.Tx, fn EnqueueFunc, leadID uuid.UUID) error {
	jobID, err := fn(ctx, tx, leadID)
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	if _, err := tx.Exec(ctx, setJobSQL, leadID, jobID); err != nil {
		return fmt.Errorf("record job: %w", err)
	}
	return nil
}

// Operation is what GET /v1/operations/{key} reports of a key.
type Operation struct {
	Key       string
	State     KeyState
	LeadID    uuid.UUID
	CreatedAt time.Time
	UpdatedAt time.Time
	// ExpiresAt and Response are set once the key is finished.
	ExpiresAt *time.Time
	Response  *response.Final
}

// Operation returns the client's key, or ErrNotFound when the client has no
// such key (another client's key included) or its retention has passed.
func (s *Store) Operation(ctx context.Context, clientID, key string) (*Operation, error) {
	op := Operation{Key: key}
	var (
		status *int16
		body   []byte
	)
	err := s.db.QueryRow(ctx, `
SELECT state, lead_id, created_at, updated_at, expires_at, response_status, response_body
FROM idempotency_keys
WHERE client_id = $1 AND key = $2 AND (expires_at IS NULL OR expires_at > now())`,
		clientID, key).Scan(&op.State, &op.LeadID, &op.CreatedAt, &op.UpdatedAt, &op.ExpiresAt, &status, &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("operation: %w", err)
	}
	if status != nil {
		op.Response = &response.Final{Status: int(*status), Body: body}
	}
	return &op, nil
}
