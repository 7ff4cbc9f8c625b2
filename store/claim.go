package store

import (
	"cmp"
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
	// OutcomeSupersedesUnknown: the key an amendment supersedes is unknown
	// to the client, or expired; nothing was stored.
	OutcomeSupersedesUnknown
	// OutcomeAlreadySuperseded: the key an amendment supersedes was
	// superseded by another key; nothing was stored.
	OutcomeAlreadySuperseded
)

var outcomeNames = [...]string{"", "claimed", "reopened", "in_progress", "replayed", "mismatch", "supersedes_unknown", "already_superseded"}

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
	// EmailHMAC is the keyed hash of the lead's email (lead.HashKey.Email),
	// what finds it for an erasure.
	EmailHMAC []byte
	// RawHash is the SHA-256 of the request as it arrived (RawHash), kept
	// with the key: a retry of the same bytes is known without decoding.
	// May be nil.
	RawHash []byte
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
    INSERT INTO idempotency_keys (client_id, key, fingerprint, state, lead_id, supersedes, raw_hash)
    VALUES ($1, $2, $3, 'processing', $4, $7, $11)
    ON CONFLICT (client_id, key) DO NOTHING
    RETURNING lead_id
), lead AS (
    INSERT INTO leads (id, client_id, idempotency_key, external_ref, submission, amends, amendment, email_hmac)
    SELECT lead_id, $1, $2, $5, $6, $8, $9, $10 FROM claimed
)
SELECT true, 'processing', $3::bytea, lead_id, NULL::smallint, NULL::json, NULL::text, false, false, false
FROM claimed
UNION ALL
SELECT false, k.state, k.fingerprint, k.lead_id, k.response_status, k.response_body, k.failure_code,
       k.expires_at <= now(), k.superseded_by IS NOT NULL,
       EXISTS (SELECT FROM leads l WHERE l.id = k.lead_id AND l.erased_at IS NOT NULL)
FROM idempotency_keys k
WHERE k.client_id = $1 AND k.key = $2 AND NOT EXISTS (SELECT FROM claimed)`

const readKeySQL = `
SELECT false, k.state, k.fingerprint, k.lead_id, k.response_status, k.response_body, k.failure_code,
       k.expires_at <= now(), k.superseded_by IS NOT NULL,
       EXISTS (SELECT FROM leads l WHERE l.id = k.lead_id AND l.erased_at IS NOT NULL)
FROM idempotency_keys k WHERE k.client_id = $1 AND k.key = $2`

// takeOverSQL gives an expired key to a new request. The condition is
// checked again under the row lock, so of two racing take-overs one wins.
const takeOverSQL = `
WITH key AS (
    UPDATE idempotency_keys
    SET fingerprint = $3, raw_hash = $11, state = 'processing', lead_id = $4, response_status = NULL,
        response_body = NULL, failure_code = NULL, created_at = now(), updated_at = now(),
        finished_at = NULL, expires_at = NULL, reconcile_after = NULL,
        supersedes = $7, superseded_by = NULL
    WHERE client_id = $1 AND key = $2 AND expires_at <= now()
    RETURNING lead_id
)
INSERT INTO leads (id, client_id, idempotency_key, external_ref, submission, amends, amendment, email_hmac)
SELECT lead_id, $1, $2, $5, $6, $8, $9, $10 FROM key`

// reopenSQL gives a key that failed on transient downstream failures a new
// attempt for the same lead, again atomically under the row lock. A
// superseded key is never re-opened (its amendment carries the enquiry
// on), nor one whose lead's personal data was erased (there is nothing left
// to send): both replay their stored answer. The lead's row is checked
// again under its lock: an erasure that held it commits first, the update
// finds it erased and returns nothing, and the claim starts again (and
// replays).
const reopenSQL = `
WITH k AS (
    UPDATE idempotency_keys k
    SET state = 'processing', response_status = NULL, response_body = NULL, failure_code = NULL,
        updated_at = now(), finished_at = NULL, expires_at = NULL
    WHERE k.client_id = $1 AND k.key = $2 AND k.state = 'failed' AND k.failure_code = $3
      AND k.fingerprint = $4 AND k.expires_at > now() AND k.superseded_by IS NULL
      AND EXISTS (SELECT FROM leads l WHERE l.id = k.lead_id AND l.erased_at IS NULL)
    RETURNING k.lead_id
)
UPDATE leads SET finished_at = NULL FROM k WHERE leads.id = k.lead_id AND leads.erased_at IS NULL
RETURNING leads.id`

// supersededSQL reads, and locks, the key an amendment supersedes, with
// what the amendment inherits: the chain's external reference and the
// superseded lead's place in the chain. The lock makes of two amendments of
// one key one winner.
const supersededSQL = `
SELECT k.superseded_by, k.lead_id, l.external_ref, l.amendment
FROM idempotency_keys k
JOIN leads l ON l.id = k.lead_id
WHERE k.client_id = $1 AND k.key = $2 AND (k.expires_at IS NULL OR k.expires_at > now())
FOR UPDATE OF k`

const setSupersededSQL = `
UPDATE idempotency_keys SET superseded_by = $3 WHERE client_id = $1 AND key = $2`

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
	superseded     bool
	erased         bool
}

func scanKeyRow(row pgx.Row) (*keyRow, error) {
	var r keyRow
	err := row.Scan(&r.claimed, &r.state, &r.fingerprint, &r.leadID, &r.responseStatus,
		&r.responseBody, &r.failureCode, &r.expired, &r.superseded, &r.erased)
	return &r, err
}

// chain is what an amendment inherits from the key it supersedes.
type chain struct {
	externalRef string
	amends      *uuid.UUID
	amendment   int
}

// errRaced means the key changed between two statements of a claim: it
// starts again.
var errRaced = errors.New("the key changed during the claim")

// Claim claims p.Key for p.ClientID, or reports what the key already holds.
// A new key, its lead and its job commit in one transaction. The errors it
// returns are the database's (see IsUnavailable); a refusal is a result, not
// an error.
func (s *Store) Claim(ctx context.Context, p *ClaimParams) (*ClaimResult, error) {
	if s.group != nil && p.Payload.Supersedes == "" {
		res, ok, err := s.group.claim(ctx, p)
		if ok || err != nil {
			return res, err
		}
		// Not claimed by a group: the key exists (or the group failed).
	}
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
		ch := chain{externalRef: p.ExternalRef}
		var supersedes *string
		if sup := p.Payload.Supersedes; sup != "" {
			supersedes = &sup
			// The key's own state answers first: a retry of an amendment
			// is a replay, whatever became of the key it supersedes.
			row, err := scanKeyRow(tx.QueryRow(ctx, readKeySQL, p.ClientID, p.Key))
			switch {
			case err == nil && !(row.expired != nil && *row.expired):
				res, err = answerExisting(ctx, tx, p, row)
				return err
			case err != nil && !errors.Is(err, pgx.ErrNoRows):
				return fmt.Errorf("claim: %w", err)
			}
			var refusal Outcome
			if ch, refusal, err = inherit(ctx, tx, p); err != nil || refusal != 0 {
				res = &ClaimResult{Outcome: refusal}
				return cmp.Or(err, errNothingToCommit)
			}
		}

		row, err := scanKeyRow(tx.QueryRow(ctx, claimSQL, p.ClientID, p.Key, fp, newLeadID,
			ch.externalRef, p.Payload.Canonical, supersedes, ch.amends, ch.amendment, p.EmailHMAC, p.RawHash))
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
		case row.expired != nil && *row.expired:
			tag, err := tx.Exec(ctx, takeOverSQL, p.ClientID, p.Key, fp, newLeadID, ch.externalRef,
				p.Payload.Canonical, supersedes, ch.amends, ch.amendment, p.EmailHMAC, p.RawHash)
			if err != nil {
				return fmt.Errorf("claim: take over expired key: %w", err)
			}
			if tag.RowsAffected() == 0 {
				return errRaced
			}
		default:
			res, err = answerExisting(ctx, tx, p, row)
			return err
		}
		if supersedes != nil {
			if _, err := tx.Exec(ctx, setSupersededSQL, p.ClientID, *supersedes, p.Key); err != nil {
				return fmt.Errorf("claim: supersede: %w", err)
			}
		}
		res, err = claimed(ctx, tx, p, OutcomeClaimed, newLeadID)
		return err
	})
	if errors.Is(err, errNothingToCommit) {
		err = nil
	}
	return res, err
}

// inherit reads, and locks, the key the amendment p supersedes, and returns
// what the amendment inherits from it, or the outcome that refuses it.
func inherit(ctx context.Context, tx pgx.Tx, p *ClaimParams) (chain, Outcome, error) {
	var (
		supersededBy *string
		leadID       uuid.UUID
		ch           chain
	)
	err := tx.QueryRow(ctx, supersededSQL, p.ClientID, p.Payload.Supersedes).Scan(&supersededBy, &leadID, &ch.externalRef, &ch.amendment)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ch, OutcomeSupersedesUnknown, nil
	case err != nil:
		return ch, 0, fmt.Errorf("claim: superseded key: %w", err)
	case supersededBy != nil && *supersededBy != p.Key:
		// (Superseded by this very key: a twin of this request won the
		// race; the claim below finds the key and answers as a replay.)
		return ch, OutcomeAlreadySuperseded, nil
	}
	ch.amends = &leadID
	ch.amendment++
	return ch, 0, nil
}

// answerExisting answers a claim whose key exists and is not expired: a
// different body is a mismatch, a key that failed on transient downstream
// failures is re-opened (unless an amendment superseded it), a finished key
// is replayed, and an unfinished one is in progress.
func answerExisting(ctx context.Context, tx pgx.Tx, p *ClaimParams, row *keyRow) (*ClaimResult, error) {
	fp := p.Payload.Fingerprint[:]
	switch {
	case string(row.fingerprint) != string(fp):
		return &ClaimResult{Outcome: OutcomeMismatch, State: row.state, LeadID: row.leadID}, errNothingToCommit

	case row.state == KeyFailed && !row.superseded && !row.erased && row.failureCode != nil &&
		response.Code(*row.failureCode) == response.CodeDownstreamUnavailable:
		var leadID uuid.UUID
		err := tx.QueryRow(ctx, reopenSQL, p.ClientID, p.Key, response.CodeDownstreamUnavailable, fp).Scan(&leadID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, errRaced
		}
		if err != nil {
			return nil, fmt.Errorf("claim: reopen: %w", err)
		}
		return claimed(ctx, tx, p, OutcomeReopened, leadID)

	case row.state.Finished():
		return &ClaimResult{
			Outcome:  OutcomeReplayed,
			State:    row.state,
			LeadID:   row.leadID,
			Response: response.Final{Status: int(*row.responseStatus), Body: row.responseBody},
		}, errNothingToCommit

	default:
		return &ClaimResult{Outcome: OutcomeInProgress, State: row.state, LeadID: row.leadID}, errNothingToCommit
	}
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
	// Supersedes is the key this key's request amends; SupersededBy the
	// key whose request amends it. Empty for none.
	Supersedes, SupersededBy string
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
SELECT state, lead_id, created_at, updated_at, expires_at, response_status, response_body,
       coalesce(supersedes, ''), coalesce(superseded_by, '')
FROM idempotency_keys
WHERE client_id = $1 AND key = $2 AND (expires_at IS NULL OR expires_at > now())`,
		clientID, key).Scan(&op.State, &op.LeadID, &op.CreatedAt, &op.UpdatedAt, &op.ExpiresAt, &status, &body,
		&op.Supersedes, &op.SupersededBy)
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

// Peeked is a key as a read outside any transaction found it: enough to
// answer a retry that cannot change it.
type Peeked struct {
	State       KeyState
	LeadID      uuid.UUID
	Fingerprint []byte
	// RawHash is the request's as it arrived (nil for keys claimed
	// before it was kept).
	RawHash []byte
	// Response is the final response of a finished key.
	Response response.Final
	// Reopenable: the key failed with downstream_unavailable and may be
	// re-opened by a retry (not superseded, its lead not erased); only a
	// claim may do that.
	Reopenable bool
}

// Answer is what a retry with the same request gets from the key, when a
// read can decide it: replayed (finished), or in progress; false when only
// a claim can (the key may be re-opened).
func (p *Peeked) Answer() (*ClaimResult, bool) {
	switch {
	case p.Reopenable:
		return nil, false
	case p.State.Finished():
		return &ClaimResult{Outcome: OutcomeReplayed, State: p.State, LeadID: p.LeadID, Response: p.Response}, true
	default:
		return &ClaimResult{Outcome: OutcomeInProgress, State: p.State, LeadID: p.LeadID}, true
	}
}

// peekColumns are what Peek reads of a key k ($3: the code of a failure
// that a retry re-opens).
const peekColumns = `k.state, k.lead_id, k.fingerprint, k.raw_hash, k.response_status, k.response_body,
       coalesce(k.state = 'failed' AND k.failure_code = $3 AND k.superseded_by IS NULL
         AND NOT EXISTS (SELECT FROM leads l WHERE l.id = k.lead_id AND l.erased_at IS NOT NULL), false)`

const peekSQL = `
SELECT ` + peekColumns + `
FROM idempotency_keys k
WHERE k.client_id = $1 AND k.key = $2 AND (k.expires_at IS NULL OR k.expires_at > now())`

// peekManySQL reads the keys of a group of peeks at once; n is the peek's
// place in the group, from 1. Each key is looked up by its primary key
// (LATERAL, and LIMIT 1 so that the planner keeps it so): as a join, the
// planner may hash the whole table, whatever its size, when its statistics
// are old or missing.
const peekManySQL = `
SELECT g.n, ` + peekColumns + `
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS g(client_id, key, n)
CROSS JOIN LATERAL (
    SELECT * FROM idempotency_keys k1
    WHERE k1.client_id = g.client_id AND k1.key = g.key AND (k1.expires_at IS NULL OR k1.expires_at > now())
    LIMIT 1
) k`

// Peek reads the client's key in one statement outside any transaction,
// and returns ErrNotFound when there is none or it expired. It decides
// nothing a claim decides: a key it does not find may be claimed by
// someone else a moment later, and only Claim claims. It lets the api
// answer retries of keys that exist (replays, keys in progress,
// mismatches) without a transaction, and spare them the rate limit of new
// submissions. With GroupClaims, concurrent peeks are read together, in
// one statement.
func (s *Store) Peek(ctx context.Context, clientID, key string) (*Peeked, error) {
	if s.peeks == nil {
		return scanPeeked(s.db.QueryRow(ctx, peekSQL, clientID, key, response.CodeDownstreamUnavailable))
	}
	p := &pendingPeek{clientID: clientID, key: key, done: make(chan struct{})}
	s.peeks.add(p)
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return nil, fmt.Errorf("peek: %w", ctx.Err())
	}
}

// pendingPeek is one peek waiting for its group.
type pendingPeek struct {
	clientID, key string
	res           *Peeked
	err           error
	done          chan struct{}
}

// peekGroup reads a group of peeks in one statement.
func (s *Store) peekGroup(group []*pendingPeek) {
	defer func() {
		for _, p := range group {
			close(p.done)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), s.group.opts.Timeout)
	defer cancel()
	clients, keys := make([]string, len(group)), make([]string, len(group))
	for i, p := range group {
		clients[i], keys[i] = p.clientID, p.key
	}
	rows, err := s.pool.Query(ctx, peekManySQL, clients, keys, response.CodeDownstreamUnavailable)
	if err == nil {
		for rows.Next() {
			var n int
			var pk Peeked
			var status *int16
			var body []byte
			if err = rows.Scan(&n, &pk.State, &pk.LeadID, &pk.Fingerprint, &pk.RawHash, &status, &body, &pk.Reopenable); err != nil {
				break
			}
			if status != nil {
				pk.Response = response.Final{Status: int(*status), Body: body}
			}
			if n >= 1 && n <= len(group) {
				group[n-1].res = &pk
			}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	for _, p := range group {
		switch {
		case err != nil:
			p.res, p.err = nil, fmt.Errorf("peek: %w", err)
		case p.res == nil:
			p.err = ErrNotFound
		}
	}
}

func scanPeeked(row pgx.Row) (*Peeked, error) {
	var (
		p      Peeked
		status *int16
		body   []byte
	)
	err := row.Scan(&p.State, &p.LeadID, &p.Fingerprint, &p.RawHash, &status, &body, &p.Reopenable)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("peek: %w", err)
	}
	if status != nil {
		p.Response = response.Final{Status: int(*status), Body: body}
	}
	return &p, nil
}
