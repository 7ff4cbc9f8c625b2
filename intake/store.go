package intake

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leadintake/leadintake/migrations"
)

// Key states, as stored in idempotency_keys.state.
const (
	StateProcessing          = "processing"
	StateCompleted           = "completed"
	StateFailed              = "failed"
	StateNeedsReconciliation = "needs_reconciliation"
)

// EnqueueFunc inserts the job that processes a lead, inside the transaction
// that claims its key. If it fails, the whole claim is rolled back.
type EnqueueFunc func(ctx context.Context, tx pgx.Tx, leadID uuid.UUID) error

// ErrNotFound is returned by Store.Operation for a key the client does not
// have (or whose retention has passed).
var ErrNotFound = errors.New("not found")

// Store is the key store: it claims keys, answers replays and polls, and
// finishes keys for the worker. It is safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	enqueue EnqueueFunc
	// migrated is set once Ready found every migration applied.
	migrated atomic.Bool
}

// NewStore returns a Store on pool. enqueue may be nil for a store that only
// reads and finishes keys (the worker's).
func NewStore(pool *pgxpool.Pool, enqueue EnqueueFunc) *Store {
	return &Store{pool: pool, enqueue: enqueue}
}

// Outcome says what a claim found.
type Outcome int

const (
	// OutcomeClaimed: the key was new (or expired) and is now this
	// submission's; its lead and job were committed with it.
	OutcomeClaimed Outcome = iota + 1
	// OutcomeReopened: the key had failed with downstream_unavailable; the
	// same lead got a new job.
	OutcomeReopened
	// OutcomeInProgress: the same submission is still being processed.
	OutcomeInProgress
	// OutcomeFinished: the same submission is finished; replay its response.
	OutcomeFinished
	// OutcomeMismatch: the key belongs to a different payload.
	OutcomeMismatch
)

func (o Outcome) String() string {
	switch o {
	case OutcomeClaimed:
		return "claimed"
	case OutcomeReopened:
		return "reopened"
	case OutcomeInProgress:
		return "in_progress"
	case OutcomeFinished:
		return "replayed"
	case OutcomeMismatch:
		return "mismatch"
	}
	return "unknown"
}

// ClaimParams is one submission to claim a key for.
type ClaimParams struct {
	ClientID    string
	Key         string
	ExternalRef string
	Submission  *Submission
}

// ClaimResult is what Store.Claim decided.
type ClaimResult struct {
	Outcome Outcome
	// State is the key's state: processing or needs_reconciliation while in
	// progress, completed or failed when finished.
	State  string
	LeadID uuid.UUID
	// ResponseStatus and ResponseBody are the stored final response
	// (OutcomeFinished only).
	ResponseStatus int
	ResponseBody   []byte
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

// takeOverSQL gives an expired key to a new submission. The condition is
// checked again under the row lock, so of two racing take-overs one wins.
const takeOverSQL = `
UPDATE idempotency_keys
SET fingerprint = $3, state = 'processing', lead_id = $4, response_status = NULL,
    response_body = NULL, failure_code = NULL, created_at = now(), updated_at = now(),
    finished_at = NULL, expires_at = NULL
WHERE client_id = $1 AND key = $2 AND expires_at <= now()`

const insertLeadSQL = `
INSERT INTO leads (id, client_id, idempotency_key, external_ref, submission)
VALUES ($1, $2, $3, $4, $5)`

// reopenSQL gives a key that failed on transient downstream failures a new
// attempt for the same lead, again atomically under the row lock.
const reopenSQL = `
UPDATE idempotency_keys
SET state = 'processing', response_status = NULL, response_body = NULL, failure_code = NULL,
    updated_at = now(), finished_at = NULL, expires_at = NULL
WHERE client_id = $1 AND key = $2 AND state = 'failed' AND failure_code = $3
  AND fingerprint = $4 AND expires_at > now()
RETURNING lead_id`

type keyRow struct {
	claimed        bool
	state          string
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

// Claim claims p.Key for p.ClientID, or reports what the key already holds.
// A new key, its lead and its job commit in one transaction. The errors it
// returns are store errors (see IsUnavailable); a refusal is a result, not an
// error.
func (s *Store) Claim(ctx context.Context, p *ClaimParams) (*ClaimResult, error) {
	// A claim races at most a handful of times (a winner that is deleted by
	// clean-up as it expires, a take-over lost to another); past that the
	// database is misbehaving.
	for range 5 {
		res, err := s.claimOnce(ctx, p)
		if err != nil || res != nil {
			return res, err
		}
	}
	return nil, errors.New("claim: the key changed under every attempt")
}

// claimOnce returns (nil, nil) when the key changed between two statements
// and the claim must start again.
func (s *Store) claimOnce(ctx context.Context, p *ClaimParams) (*ClaimResult, error) {
	newLeadID, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("claim: lead id: %w", err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	// A connection still inside a transaction (a rollback that failed) is
	// closed by the pool, not handed to anyone else.
	defer conn.Release()

	fp := p.Submission.Fingerprint[:]
	tx, results := beginWith(ctx, conn.Conn(), claimSQL, p.ClientID, p.Key, fp, newLeadID,
		p.ExternalRef, p.Submission.Canonical)
	// The rollback stays within the claim's deadline: without one, a
	// database that hangs between the claim's statement and the rollback
	// (the replay and mismatch paths end that way) would hold the request
	// until it answered again. Once ctx is done the rollback fails at once
	// and the connection is closed, which is what a connection whose
	// statement timed out deserves.
	defer func() { _ = tx.Rollback(ctx) }()

	row, err := readClaim(results)
	if errors.Is(err, pgx.ErrNoRows) {
		// Lost the race to a transaction that committed after our snapshot:
		// read its row with a fresh one.
		row, err = scanKeyRow(tx.QueryRow(ctx, readKeySQL, p.ClientID, p.Key))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}

	switch {
	case row.claimed:
		return s.commitWithJob(ctx, tx, OutcomeClaimed, newLeadID)

	case row.expired != nil && *row.expired:
		tag, err := tx.Exec(ctx, takeOverSQL, p.ClientID, p.Key, fp, newLeadID)
		if err != nil {
			return nil, fmt.Errorf("claim: take over expired key: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil, nil
		}
		if _, err := tx.Exec(ctx, insertLeadSQL, newLeadID, p.ClientID, p.Key, p.ExternalRef, p.Submission.Canonical); err != nil {
			return nil, fmt.Errorf("claim: insert lead: %w", err)
		}
		return s.commitWithJob(ctx, tx, OutcomeClaimed, newLeadID)

	case string(row.fingerprint) != string(fp):
		return &ClaimResult{Outcome: OutcomeMismatch, State: row.state, LeadID: row.leadID}, nil

	case row.state == StateFailed && row.failureCode != nil && *row.failureCode == CodeDownstreamUnavailable:
		var leadID uuid.UUID
		err := tx.QueryRow(ctx, reopenSQL, p.ClientID, p.Key, CodeDownstreamUnavailable, fp).Scan(&leadID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("claim: reopen: %w", err)
		}
		return s.commitWithJob(ctx, tx, OutcomeReopened, leadID)

	case row.state == StateCompleted || row.state == StateFailed:
		return &ClaimResult{
			Outcome:        OutcomeFinished,
			State:          row.state,
			LeadID:         row.leadID,
			ResponseStatus: int(*row.responseStatus),
			ResponseBody:   row.responseBody,
		}, nil

	default:
		return &ClaimResult{Outcome: OutcomeInProgress, State: row.state, LeadID: row.leadID}, nil
	}
}

// readClaim reads the results of BEGIN and the claim statement, and closes
// them.
func readClaim(results pgx.BatchResults) (*keyRow, error) {
	_, err := results.Exec()
	var row *keyRow
	if err == nil {
		row, err = scanKeyRow(results.QueryRow())
	}
	if cerr := results.Close(); cerr != nil && (err == nil || errors.Is(err, pgx.ErrNoRows)) {
		err = cerr
	}
	return row, err
}

func (s *Store) commitWithJob(ctx context.Context, tx pgx.Tx, outcome Outcome, leadID uuid.UUID) (*ClaimResult, error) {
	if err := s.enqueue(ctx, tx, leadID); err != nil {
		return nil, fmt.Errorf("claim: enqueue: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("claim: commit: %w", err)
	}
	return &ClaimResult{Outcome: outcome, State: StateProcessing, LeadID: leadID}, nil
}

// Operation is what GET /v1/operations/{key} reports of a key.
type Operation struct {
	Key       string
	State     string
	LeadID    uuid.UUID
	CreatedAt time.Time
	UpdatedAt time.Time
	// ExpiresAt, ResponseStatus and ResponseBody are set once the key is
	// finished.
	ExpiresAt      *time.Time
	ResponseStatus *int16
	ResponseBody   []byte
}

// Operation returns the client's key, or ErrNotFound when the client has no
// such key (another client's key included) or its retention has passed.
func (s *Store) Operation(ctx context.Context, clientID, key string) (*Operation, error) {
	op := Operation{Key: key}
	err := s.pool.QueryRow(ctx, `
SELECT state, lead_id, created_at, updated_at, expires_at, response_status, response_body
FROM idempotency_keys
WHERE client_id = $1 AND key = $2 AND (expires_at IS NULL OR expires_at > now())`,
		clientID, key).Scan(&op.State, &op.LeadID, &op.CreatedAt, &op.UpdatedAt, &op.ExpiresAt,
		&op.ResponseStatus, &op.ResponseBody)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("operation: %w", err)
	}
	return &op, nil
}

// Ready returns nil when the database answers and holds every migration
// this binary needs. Once the migrations were found, only the database's
// answer is checked again: migrations are never taken back.
func (s *Store) Ready(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return err
	}
	if s.migrated.Load() {
		return nil
	}
	if err := migrations.Check(ctx, s.pool); err != nil {
		return err
	}
	s.migrated.Store(true)
	return nil
}

// IsUnavailable reports whether err means the database could not be used
// (not reached, not answering in time, refusing the connection, or lacking
// the migrations), as opposed to a fault of the query itself. Any error that
// is not a server error about the statement (syntax, constraint, data)
// counts as unavailability: connection refused, reset or closed, time-outs,
// a pool that could not connect, a refused role or password, a missing
// database, a server shutting down, tables not migrated yet.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) || errors.Is(err, migrations.ErrPending) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", // undefined table
			"42703", // undefined column
			"42883", // undefined function
			"3F000": // invalid schema name
			// The schema is older than this binary: not migrated yet.
			return true
		}
		switch pgErr.Code[:2] {
		case "08", // connection exception
			"28", // invalid authorization: a refused role or password
			"3D", // invalid catalog name: the database does not exist
			"40", // serialization failure, deadlock: try again
			"53", // insufficient resources
			"57", // operator intervention: shutdown, cancel, cannot connect now
			"58": // system error
			return true
		}
		return false
	}
	return true
}

// keyStates counts the keys by state and returns the age in seconds of the
// oldest processing key. Unfinished keys are counted on their partial index;
// finished ones by a scan of the table, which is why the metrics cache this.
func (s *Store) keyStates(ctx context.Context) (map[string]float64, float64, error) {
	rows, err := s.pool.Query(ctx, `
SELECT state, count(*),
       coalesce(extract(epoch FROM now() - min(updated_at) FILTER (WHERE state = 'processing')), 0)::float8
FROM idempotency_keys
WHERE expires_at IS NULL OR expires_at > now()
GROUP BY state`)
	if err != nil {
		return nil, 0, err
	}
	counts := map[string]float64{}
	var oldest float64
	for rows.Next() {
		var state string
		var n int64
		var age float64
		if err := rows.Scan(&state, &n, &age); err != nil {
			return nil, 0, err
		}
		counts[state] = float64(n)
		oldest = max(oldest, age)
	}
	return counts, oldest, rows.Err()
}
