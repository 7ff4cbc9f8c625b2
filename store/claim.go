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
	"github.com/leadintake/leadintake/response"
)

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
	// OutcomeQuarantined: the key was new and is this request's; its
	// enquiry, judged spam, was stored and finished at once, quarantined,
	// without a job (Response: 200 received).
	OutcomeQuarantined
	// OutcomeSpamRefused: the key is new and its enquiry, judged spam, is
	// refused (ClaimParams.Refuse); nothing was stored.
	OutcomeSpamRefused
)

var outcomeNames = [...]string{"", "claimed", "reopened", "in_progress", "replayed", "mismatch", "supersedes_unknown", "already_superseded", "quarantined", "spam_refused"}

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
	// Fingerprint is the request's fingerprint (Payload.Fingerprint, keyed
	// with lead.HashKey.Request): what decides that a retry is the same
	// request. The key keeps its MAC.
	Fingerprint lead.RequestHash
	// RawHash is the hash of the request as it arrived (lead.RawHash,
	// keyed), kept with the key: a retry of the same bytes is known without
	// decoding. May be zero.
	RawHash lead.RequestHash
	// Publishable: the request came through a publishable key (a web
	// page). The key remembers it; such a request reaches only keys that
	// do: one the client claimed otherwise is a mismatch to it, whatever
	// its body, and unknown to its Supersedes.
	Publishable bool
	// ContentHMAC is the keyed hash of the lead's content without its utm
	// and its attribution (lead.HashKey.Content), what finds an earlier possible duplicate of
	// it (FlagDuplicates). May be nil.
	ContentHMAC []byte
	// Quarantine, when not empty, are the reasons a web page's enquiry was
	// judged spam: the key is claimed, the enquiry stored, and both
	// finished at once, quarantined (200 received), without a job.
	// Retention is then how long the key is kept.
	Quarantine []string
	Retention  time.Duration
	// Refuse: the enquiry was judged spam under a policy that refuses it:
	// a new key is refused (OutcomeSpamRefused), after the checks of its
	// Supersedes, and nothing is stored; a key that exists answers as it
	// stands.
	Refuse bool
}

// ClaimResult is what Store.Claim decided.
type ClaimResult struct {
	Outcome Outcome
	// State is the key's state: processing or needs_reconciliation while in
	// progress, completed or failed when finished.
	State  lead.KeyState
	LeadID uuid.UUID
	// Response is the stored final response (OutcomeReplayed only).
	Response response.Final
}

// keyRow is a key as a claim writes it (see rows.go).
type keyRow struct {
	ClientID    string `db:"client_id" pg:"text"`
	Key         string `db:"key" pg:"text"`
	Fingerprint []byte `db:"fingerprint_hmac" pg:"bytea"`
	RawHash     []byte `db:"raw_hmac" pg:"bytea"`
	// PlainHashes is always false: a claim keeps keyed hashes (it is
	// written so that a take-over of a key kept before they were keyed
	// says so too).
	PlainHashes bool      `db:"plain_hashes" pg:"bool"`
	LeadID      uuid.UUID `db:"lead_id" pg:"uuid"`
	Supersedes  *string   `db:"supersedes" pg:"text"`
	Publishable bool      `db:"publishable" pg:"bool"`
}

// leadRow is a lead as a claim writes it (see rows.go).
type leadRow struct {
	ID          uuid.UUID  `db:"id" pg:"uuid"`
	ClientID    string     `db:"client_id" pg:"text"`
	Key         string     `db:"idempotency_key" pg:"text"`
	ExternalRef string     `db:"external_ref" pg:"text"`
	Submission  string     `db:"submission" pg:"jsonb"`
	EmailHMAC   []byte     `db:"email_hmac" pg:"bytea"`
	ContentHMAC []byte     `db:"content_hmac" pg:"bytea"`
	Amends      *uuid.UUID `db:"amends" pg:"uuid"`
	Amendment   int32      `db:"amendment" pg:"int4"`
	// JobID is nil for a quarantined lead: it has no job.
	JobID *int64 `db:"job_id" pg:"int8"`
	// TraceParent is the claiming request's W3C traceparent, nil for
	// none: the lead's work continues that trace.
	TraceParent *string `db:"trace_parent" pg:"text"`
}

// rowsOf returns the key and lead rows a claim of p writes for the lead id,
// as an amendment of ch (the zero chain for a claim that amends nothing).
func rowsOf(p *ClaimParams, leadID uuid.UUID, ch chain) (keyRow, leadRow) {
	k := keyRow{
		ClientID: p.ClientID, Key: p.Key, Fingerprint: p.Fingerprint.MAC, RawHash: p.RawHash.MAC, LeadID: leadID,
		Publishable: p.Publishable,
	}
	if sup := p.Payload.Supersedes; sup != "" {
		k.Supersedes = &sup
	}
	l := leadRow{
		ID: leadID, ClientID: p.ClientID, Key: p.Key, ExternalRef: cmp.Or(ch.externalRef, p.ExternalRef),
		Submission: string(p.Payload.Canonical), EmailHMAC: p.EmailHMAC, ContentHMAC: p.ContentHMAC,
		Amends: ch.amends, Amendment: int32(ch.amendment),
	}
	return k, l
}

// dupCandidates bounds the earlier leads a claim weighs as its original.
const dupCandidates = "20"

// insertKeysSQL claims the keys that are new, and returns the leads of
// those it claimed.
var insertKeysSQL = `
INSERT INTO idempotency_keys (` + columnList[keyRow]("") + `, state)
SELECT ` + columnList[keyRow]("r.") + `, 'processing' FROM ` + unnestRows[keyRow]("r") + `
ON CONFLICT (client_id, key) DO NOTHING
RETURNING lead_id`

// insertLeadsSQL inserts the leads of claimed keys, with their jobs, and
// each with the earliest lead of its client that has the same content and
// was claimed within @dup_window seconds under another key (another
// external reference: not along an amendment chain, whose leads share it),
// found by the content's index; none with a window of 0. A lead still
// quarantined is nobody's original: sales never saw it. Each candidate's
// key is read by its primary key, and only the dupCandidates earliest
// candidates are weighed: a flood of one quarantined text costs a claim no
// more than that, and makes a real lead after it no one's duplicate.
var insertLeadsSQL = `
INSERT INTO leads (` + columnList[leadRow]("") + `, duplicate_of)
SELECT ` + columnList[leadRow]("r.") + `,
       (SELECT c.id FROM (
            SELECT d.id, d.client_id, d.idempotency_key, d.created_at FROM leads d
            WHERE @dup_window::float8 > 0 AND r.content_hmac IS NOT NULL
              AND d.client_id = r.client_id AND d.content_hmac = r.content_hmac AND d.external_ref <> r.external_ref
              AND d.created_at > now() - @dup_window::float8 * interval '1 second'
            ORDER BY d.created_at LIMIT ` + dupCandidates + `) c
        WHERE (SELECT dk.state FROM idempotency_keys dk
               WHERE dk.client_id = c.client_id AND dk.key = c.idempotency_key) IS DISTINCT FROM 'quarantined'
        ORDER BY c.created_at LIMIT 1)
FROM ` + unnestRows[leadRow]("r")

// takeOverSQL gives an expired key to a new request's lead, if the key is
// still as read (keyAsRead). The delivery log of the key's old lead goes
// with the key.
var takeOverSQL = `
WITH old AS (
    DELETE FROM lead_calls WHERE lead_id = (
        SELECT lead_id FROM idempotency_keys k WHERE k.client_id = @at_client AND k.key = @at_key AND ` + keyAsRead + `)
)
UPDATE idempotency_keys k
SET (` + columnList[keyRow]("") + `) = (SELECT ` + columnList[keyRow]("r.") + ` FROM ` + unnestRows[keyRow]("r") + `),
    state = 'processing', response_status = NULL, response_body = NULL, failure_code = NULL,
    created_at = now(), updated_at = now(), finished_at = NULL, expires_at = NULL, reconcile_after = NULL,
    superseded_by = NULL
WHERE k.client_id = @at_client AND k.key = @at_key AND ` + keyAsRead

// keyColumns are what a read of a key k returns for lead.Key (scanKey).
// They read "no key" (the zero lead.Key) where k is NULL, as an outer
// join leaves it.
const keyColumns = `coalesce(k.state, ''), coalesce(k.failure_code, ''), coalesce(k.superseded_by IS NOT NULL, false),
       EXISTS (SELECT FROM leads l WHERE l.id = k.lead_id AND l.erased_at IS NOT NULL),
       coalesce(k.expires_at <= now(), false)`

// keyAsRead is the condition that the key k is as a read found it: the
// named arguments of readArgs. A transition that lead.Key allowed on that
// read applies only to a key still so; if it changed meanwhile, the
// transition's statement changes nothing and the caller decides again.
const keyAsRead = `k.state = @state AND coalesce(k.failure_code, '') = @failure
    AND (k.superseded_by IS NOT NULL) = @superseded
    AND EXISTS (SELECT FROM leads l WHERE l.id = k.lead_id AND (l.erased_at IS NOT NULL) = @erased)
    AND coalesce(k.expires_at <= now(), false) = @expired`

// readArgs are the named arguments of keyAsRead for k.
func readArgs(k lead.Key, args pgx.NamedArgs) pgx.NamedArgs {
	if args == nil {
		args = pgx.NamedArgs{}
	}
	args["state"], args["failure"], args["superseded"], args["erased"], args["expired"] =
		string(k.State), string(k.Failure), k.Superseded, k.Erased, k.Expired
	return args
}

// scanKey scans keyColumns into k.
func scanKey(k *lead.Key) []any {
	return []any{&k.State, &k.Failure, &k.Superseded, &k.Erased, &k.Expired}
}

// readKeySQL reads a key for a claim, expired or not. A claim compares
// fingerprints only: it does not read the raw hash.
var readKeySQL = keySQL(peekColumnsWith("NULL::bytea"), false)

// readKey reads, in tx, the client's key for a claim, expired or not:
// what decides its transitions, and what a retry is answered with.
func readKey(ctx context.Context, tx pgx.Tx, clientID, key string) (*Peeked, error) {
	var e Peeked
	if err := scanPeeked(tx.QueryRow(ctx, readKeySQL, clientID, key), &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// reopenSQL gives the lead of a key that a retry (or a redrive) re-opens a
// new attempt, if the key is still as read, with the trace its work
// continues (@trace_parent, else the lead's). The lead is checked again under
// its lock: an erasure that held it commits first, the update finds it
// erased and returns nothing, and the caller decides again.
var reopenSQL = `
WITH k AS (
    UPDATE idempotency_keys k
    SET state = 'processing', response_status = NULL, response_body = NULL, failure_code = NULL,
        updated_at = now(), finished_at = NULL, expires_at = NULL
    WHERE k.client_id = @client_id AND k.key = @key AND ` + keyAsRead + `
    RETURNING k.lead_id
)
UPDATE leads SET finished_at = NULL, delivery_since = now(), waiting_for = NULL, waiting_since = NULL,
    booked_for = NULL, booked_at = NULL, updated_at = now(),
    trace_parent = coalesce(@trace_parent::text, leads.trace_parent)
FROM k WHERE leads.id = k.lead_id AND (leads.erased_at IS NOT NULL) = @erased
RETURNING leads.id, coalesce(leads.trace_parent, '')`

// supersededSQL reads, and locks, the key an amendment supersedes, with
// what the amendment inherits: the chain's external reference and the
// superseded lead's place in the chain. The lock makes of two amendments of
// one key one winner. A request through a publishable key ($3) finds only
// a key claimed through one.
const supersededSQL = `
SELECT k.superseded_by, k.lead_id, l.external_ref, l.amendment
FROM idempotency_keys k
JOIN leads l ON l.id = k.lead_id
WHERE k.client_id = $1 AND k.key = $2 AND (k.expires_at IS NULL OR k.expires_at > now())
  AND (k.publishable OR NOT $3)
FOR UPDATE OF k`

const setSupersededSQL = `
UPDATE idempotency_keys SET superseded_by = $3 WHERE client_id = $1 AND key = $2`

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
	if s.jobs == nil {
		return nil, errNoJobs
	}
	if s.claims.grouping() && p.Payload.Supersedes == "" && len(p.Quarantine) == 0 && !p.Refuse {
		leadID, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("claim: lead id: %w", err)
		}
		return s.claims.do(ctx, &groupedClaim{p: p, leadID: leadID, traceParent: tracing.TraceParent(ctx)})
	}
	return s.claimAlone(ctx, p)
}

// claimAlone is Claim in a transaction of its own: the single way.
func (s *Store) claimAlone(ctx context.Context, p *ClaimParams) (*ClaimResult, error) {
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
	leadID, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("claim: lead id: %w", err)
	}
	var (
		res *ClaimResult
		fin finishing
	)
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		fin = finishing{}
		var ch chain
		if sup := p.Payload.Supersedes; sup != "" {
			// The key's own state answers first: a retry of an amendment
			// is a replay, whatever became of the key it supersedes.
			if r, found, err := s.answerIfExists(ctx, tx, p); found || err != nil {
				res = r
				return err
			}
			var refusal Outcome
			if ch, refusal, err = inherit(ctx, tx, p); err != nil || refusal != 0 {
				res = &ClaimResult{Outcome: refusal}
				return cmp.Or(err, errNothingToCommit)
			}
		}

		if p.Refuse {
			if r, found, err := s.answerIfExists(ctx, tx, p); found || err != nil {
				res = r
				return err
			}
			res = &ClaimResult{Outcome: OutcomeSpamRefused}
			return errNothingToCommit
		}
		k, l := rowsOf(p, leadID, ch)
		l.TraceParent = nullIfEmpty(tracing.TraceParent(ctx))
		var claimed []uuid.UUID
		rows, err := tx.Query(ctx, insertKeysSQL, rowArgs([]keyRow{k}, nil))
		if err == nil {
			claimed, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		}
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		if len(claimed) == 0 {
			// The key exists: what it holds decides.
			existing, err := readKey(ctx, tx, p.ClientID, p.Key)
			if errors.Is(err, pgx.ErrNoRows) {
				return errRaced // deleted (expired) since the insert saw it
			}
			if err != nil {
				return fmt.Errorf("claim: %w", err)
			}
			if !existing.Key.Allows(lead.KeyTakeOver) {
				res, err = s.answer(ctx, tx, p, existing)
				return err
			}
			args := readArgs(existing.Key, rowArgs([]keyRow{k}, pgx.NamedArgs{"at_client": p.ClientID, "at_key": p.Key}))
			tag, err := tx.Exec(ctx, takeOverSQL, args)
			if err != nil {
				return fmt.Errorf("claim: take over expired key: %w", err)
			}
			if tag.RowsAffected() == 0 {
				return errRaced
			}
		}
		if len(p.Quarantine) > 0 {
			// A quarantined amendment supersedes nothing until it is
			// released; it keeps what it supersedes on its key.
			res, err = s.quarantineTx(ctx, tx, p, l, &fin)
			return err
		}
		if k.Supersedes != nil {
			if _, err := tx.Exec(ctx, setSupersededSQL, p.ClientID, *k.Supersedes, p.Key); err != nil {
				return fmt.Errorf("claim: supersede: %w", err)
			}
		}
		if err := s.insertLeads(ctx, tx, []leadRow{l}); err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		res = &ClaimResult{Outcome: OutcomeClaimed, State: lead.KeyProcessing, LeadID: leadID}
		return nil
	})
	if errors.Is(err, errNothingToCommit) {
		err = nil
	}
	if err == nil {
		s.announce(fin.finals...)
	}
	return res, err
}

// quarantineTx stores the quarantined enquiry of a key just claimed, in tx:
// its lead, without a job, with the verdict's reasons, and its finish, as
// every finish goes (finishTx): 200 received, the callback lead.quarantined.
func (s *Store) quarantineTx(ctx context.Context, tx pgx.Tx, p *ClaimParams, l leadRow, fin *finishing) (*ClaimResult, error) {
	if _, err := tx.Exec(ctx, insertLeadsSQL, rowArgs([]leadRow{l}, pgx.NamedArgs{"dup_window": s.dupWindow.Seconds()})); err != nil {
		return nil, fmt.Errorf("claim: insert lead: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE leads SET spam_reasons = $2 WHERE id = $1`, l.ID, p.Quarantine); err != nil {
		return nil, fmt.Errorf("claim: spam reasons: %w", err)
	}
	received := response.NewReceived(l.ID.String())
	done, err := s.finishTx(ctx, tx, false, []*Finish{{
		LeadID: l.ID, ClientID: p.ClientID, Key: p.Key, From: lead.KeyProcessing, To: lead.KeyQuarantined,
		Response: received, Retention: p.Retention,
	}}, fin)
	if err != nil {
		return nil, fmt.Errorf("claim: quarantine: %w", err)
	}
	if !done[0].Applied {
		return nil, errRaced
	}
	return &ClaimResult{Outcome: OutcomeQuarantined, State: lead.KeyQuarantined, LeadID: l.ID, Response: received}, nil
}

// insertLeads inserts the jobs of the leads of claimed keys, then the leads
// with their jobs, in tx.
func (s *Store) insertLeads(ctx context.Context, tx pgx.Tx, leads []leadRow) error {
	ids := make([]uuid.UUID, len(leads))
	traces := make([]string, len(leads))
	for i := range leads {
		ids[i] = leads[i].ID
		if tp := leads[i].TraceParent; tp != nil {
			traces[i] = *tp
		}
	}
	jobIDs, err := s.jobs.ProcessLeads(ctx, tx, ids, traces)
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	if len(jobIDs) != len(leads) {
		return fmt.Errorf("enqueue: %d jobs for %d leads", len(jobIDs), len(leads))
	}
	for i := range leads {
		leads[i].JobID = &jobIDs[i]
	}
	if _, err := tx.Exec(ctx, insertLeadsSQL, rowArgs(leads, pgx.NamedArgs{"dup_window": s.dupWindow.Seconds()})); err != nil {
		return fmt.Errorf("insert leads: %w", err)
	}
	return nil
}

// inherit reads, and locks, the key the amendment p supersedes, and returns
// what the amendment inherits from it, or the outcome that refuses it.
func inherit(ctx context.Context, tx pgx.Tx, p *ClaimParams) (chain, Outcome, error) {
	var (
		supersededBy *string
		leadID       uuid.UUID
		ch           chain
	)
	err := tx.QueryRow(ctx, supersededSQL, p.ClientID, p.Payload.Supersedes, p.Publishable).Scan(&supersededBy, &leadID, &ch.externalRef, &ch.amendment)
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

// supersedableSQL reads, without a lock, what an amendment finds of the key
// it supersedes: supersededSQL's row, outside any transaction.
const supersedableSQL = `
SELECT k.superseded_by
FROM idempotency_keys k
JOIN leads l ON l.id = k.lead_id
WHERE k.client_id = $1 AND k.key = $2 AND (k.expires_at IS NULL OR k.expires_at > now())
  AND (k.publishable OR NOT $3)`

// Supersedable judges, in one read outside any transaction, the key that
// an amendment of the client's key names (supersedes), as a claim will:
// OutcomeSupersedesUnknown (unknown to the client, expired, or, for a
// request through a publishable key, not claimed through one),
// OutcomeAlreadySuperseded (by another key), or 0 when it may be amended.
// It decides nothing: the claim judges the key again under its lock. It
// lets the api refuse a page's amendment before it spends anything on it
// (a rate-limit token, a captcha verification). The errors are the
// database's.
func (s *Store) Supersedable(ctx context.Context, clientID, key, supersedes string, publishable bool) (Outcome, error) {
	var supersededBy *string
	err := s.db.QueryRow(ctx, supersedableSQL, clientID, supersedes, publishable).Scan(&supersededBy)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return OutcomeSupersedesUnknown, nil
	case err != nil:
		return 0, fmt.Errorf("superseded key: %w", err)
	case supersededBy != nil && *supersededBy != key:
		return OutcomeAlreadySuperseded, nil
	}
	return 0, nil
}

// answerIfExists answers the claim p, in tx, from its key when the key
// exists and has not expired (found); otherwise the claim goes on.
func (s *Store) answerIfExists(ctx context.Context, tx pgx.Tx, p *ClaimParams) (res *ClaimResult, found bool, err error) {
	existing, err := readKey(ctx, tx, p.ClientID, p.Key)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("claim: %w", err)
	case existing.Key.Expired:
		return nil, false, nil
	}
	res, err = s.answer(ctx, tx, p, existing)
	return res, true, err
}

// answer answers, in tx, a claim whose key exists and is not expired, as
// the key answers a retry (Peeked.Answer), and re-opens the key when a
// retry re-opens it.
func (s *Store) answer(ctx context.Context, tx pgx.Tx, p *ClaimParams, e *Peeked) (*ClaimResult, error) {
	res, decided, _ := e.Answer(p.Publishable, func() (bool, error) {
		return p.Fingerprint.Matches(e.Fingerprint, e.PlainHashes), nil
	})
	switch {
	case decided:
		return res, errNothingToCommit
	case e.Key.Retry() == lead.RetryReopens:
		if err := s.reopenTx(ctx, tx, p.ClientID, p.Key, e.Key, lead.KeyReopen, tracing.TraceParent(ctx)); err != nil {
			return nil, err
		}
		return &ClaimResult{Outcome: OutcomeReopened, State: lead.KeyProcessing, LeadID: e.LeadID}, nil
	default:
		return nil, errRaced // expired meanwhile: claim it
	}
}

// reopenTx re-opens, in tx, the client's key as read (k, which allows
// event: lead.KeyReopen, a retry's or a redrive's, or lead.KeyRelease, a
// quarantine's), and enqueues its lead's new job: the one way a finished
// key works again. It returns errRaced when the key changed since it was
// read. traceParent is the re-opening request's (a retry's), which the
// lead's work continues from now on; empty (a redrive, a release), the
// lead's work continues the trace of the request that last claimed or
// re-opened it.
func (s *Store) reopenTx(ctx context.Context, tx pgx.Tx, clientID, key string, k lead.Key, event lead.KeyEvent, traceParent string) error {
	if !k.Allows(event) {
		return errRaced
	}
	var leadID uuid.UUID
	err := tx.QueryRow(ctx, reopenSQL, readArgs(k, pgx.NamedArgs{
		"client_id": clientID, "key": key, "trace_parent": nullIfEmpty(traceParent),
	})).Scan(&leadID, &traceParent)
	if errors.Is(err, pgx.ErrNoRows) {
		return errRaced
	}
	if err != nil {
		return fmt.Errorf("reopen: %w", err)
	}
	if err := enqueue(ctx, tx, s.jobs, leadID, traceParent); err != nil {
		return fmt.Errorf("reopen: %w", err)
	}
	return nil
}

// errNothingToCommit ends a transaction that only read: it is rolled back.
var errNothingToCommit = errors.New("nothing to commit")

// setJobSQL records the job that works a lead, in the transaction that
// inserted it.
const setJobSQL = `UPDATE leads SET job_id = $2 WHERE id = $1`

// enqueue inserts, in tx, a new job for an existing lead (re-opened, or
// resumed after reconciliation), continuing the trace of traceParent (none
// when empty), and records it on the lead.
func enqueue(ctx context.Context, tx pgx.Tx, jobs Jobs, leadID uuid.UUID, traceParent string) error {
	ids, err := jobs.ProcessLeads(ctx, tx, []uuid.UUID{leadID}, []string{traceParent})
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	if len(ids) != 1 {
		return fmt.Errorf("enqueue: %d jobs for one lead", len(ids))
	}
	if _, err := tx.Exec(ctx, setJobSQL, leadID, ids[0]); err != nil {
		return fmt.Errorf("record job: %w", err)
	}
	return nil
}

// Operation is what GET /v1/operations/{key} reports of a key.
type Operation struct {
	Key       string
	State     lead.KeyState
	LeadID    uuid.UUID
	CreatedAt time.Time
	UpdatedAt time.Time
	// ExpiresAt and Response are set once the key is finished.
	ExpiresAt *time.Time
	Response  *response.Final
	// Supersedes is the key this key's request amends; SupersededBy the
	// key whose request amends it. Empty for none.
	Supersedes, SupersededBy string
	// Publishable: the key was claimed through a publishable key; only
	// such keys are a web page's to see.
	Publishable bool
}

// operationColumns are what Operation reads of a key k.
const operationColumns = `k.state, k.lead_id, k.created_at, k.updated_at, k.expires_at, k.response_status, k.response_body,
       coalesce(k.supersedes, ''), coalesce(k.superseded_by, ''), k.publishable`

// Operation returns the client's key, or ErrNotFound when the client has no
// such key (another client's key included) or its retention has passed.
// With GroupClaims, concurrent reads (polls, and the looks of requests
// that wait for their keys, woken together when their keys finish or the
// listening connection comes back) are read together, in one statement a
// group, at most GroupOpts.MaxInFlight statements at a time.
func (s *Store) Operation(ctx context.Context, clientID, key string) (*Operation, error) {
	op, err := lookUp(ctx, s.ops, "operation", clientID, key)
	if err != nil {
		return nil, err
	}
	op.Key = key
	return op, nil
}

// scanOperation scans a row of operationColumns, after the columns first
// (the place in a group), into op.
func scanOperation(row pgx.Row, op *Operation, first ...any) error {
	var (
		status *int16
		body   []byte
	)
	dest := append(first, &op.State, &op.LeadID, &op.CreatedAt, &op.UpdatedAt, &op.ExpiresAt, &status, &body,
		&op.Supersedes, &op.SupersededBy, &op.Publishable)
	if err := row.Scan(dest...); err != nil {
		return err
	}
	if status != nil {
		op.Response = &response.Final{Status: int(*status), Body: body}
	}
	return nil
}

// Peeked is a key as a read found it (Peek's, outside any transaction, or
// a claim's): enough to answer a retry (Answer).
type Peeked struct {
	Key    lead.Key
	LeadID uuid.UUID
	// Fingerprint is the request's fingerprint as the key keeps it, and
	// RawHash the hash of its bytes as they arrived (nil for keys claimed
	// before it was kept): keyed, or plain for a key whose PlainHashes
	// the worker has not keyed yet. Compare them with
	// lead.RequestHash.Matches.
	Fingerprint []byte
	RawHash     []byte
	PlainHashes bool
	// Response is the final response of a finished key.
	Response response.Final
	// Publishable: the key was claimed through a publishable key (see
	// ClaimParams.Publishable).
	Publishable bool
}

// Answer is how the key answers a retry when a read can decide it (a
// mismatch, a replay, a key in progress), and false when only a claim can
// (lead.Key.Retry: the retry re-opens the key, or claims it). publishable
// says the request came through a publishable key: a key not claimed
// through one is a mismatch to it, whatever its body, and says nothing of
// itself. same reports whether the request is the key's (its fingerprint
// matches); it is asked only when that decides, and its error is
// returned.
func (p *Peeked) Answer(publishable bool, same func() (bool, error)) (*ClaimResult, bool, error) {
	if publishable && !p.Publishable {
		return &ClaimResult{Outcome: OutcomeMismatch}, true, nil
	}
	ok, err := same()
	switch {
	case err != nil:
		return nil, false, err
	case !ok:
		return &ClaimResult{Outcome: OutcomeMismatch, State: p.Key.State, LeadID: p.LeadID}, true, nil
	}
	switch p.Key.Retry() {
	case lead.RetryReplay:
		return &ClaimResult{Outcome: OutcomeReplayed, State: p.Key.State, LeadID: p.LeadID, Response: p.Response}, true, nil
	case lead.RetryInProgress:
		return &ClaimResult{Outcome: OutcomeInProgress, State: p.Key.State, LeadID: p.LeadID}, true, nil
	default:
		return nil, false, nil
	}
}

// peekColumns are what Peek reads of a key k.
var peekColumns = peekColumnsWith("k.raw_hmac")

// peekColumnsWith are peekColumns with raw for the raw hash.
func peekColumnsWith(raw string) string {
	return keyColumns + `, k.lead_id, k.fingerprint_hmac, ` + raw + `, k.plain_hashes, k.response_status, k.response_body, k.publishable`
}

// Peek reads the client's key in one statement outside any transaction,
// and returns ErrNotFound when there is none or it expired. It decides
// nothing a claim decides: a key it does not find may be claimed by
// someone else a moment later, and only Claim claims. It lets the api
// answer retries of keys that exist (replays, keys in progress,
// mismatches) without a transaction, and spare them the rate limit of new
// submissions. With GroupClaims, concurrent peeks are read together, in
// one statement.
func (s *Store) Peek(ctx context.Context, clientID, key string) (*Peeked, error) {
	return lookUp(ctx, s.peeks, "peek", clientID, key)
}

// scanPeeked scans a row of peekColumns, after the columns first (the
// place in a group), into p.
func scanPeeked(row pgx.Row, p *Peeked, first ...any) error {
	var (
		status *int16
		body   []byte
	)
	dest := append(first, scanKey(&p.Key)...)
	if err := row.Scan(append(dest, &p.LeadID, &p.Fingerprint, &p.RawHash, &p.PlainHashes, &status, &body, &p.Publishable)...); err != nil {
		return err
	}
	if status != nil {
		p.Response = response.Final{Status: int(*status), Body: body}
	}
	return nil
}

// keySQL reads columns of the key k that $1 (the client) and $2 (the key)
// name; an expired key too unless live.
func keySQL(columns string, live bool) string {
	sql := `
SELECT ` + columns + `
FROM idempotency_keys k
WHERE k.client_id = $1 AND k.key = $2`
	if live {
		sql += ` AND (k.expires_at IS NULL OR k.expires_at > now())`
	}
	return sql
}

// keysSQL reads columns of the keys that the arrays $1 (clients) and $2
// (keys) name, expired ones left out, after n, the key's place in the
// arrays, from 1. Each key is looked up by its primary key (LATERAL, and
// LIMIT 1 so that the planner keeps it so): as a join, the planner may
// hash the whole table, whatever its size, when its statistics are old or
// missing.
func keysSQL(columns string) string {
	return `
SELECT g.n, ` + columns + `
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS g(client_id, key, n)
CROSS JOIN LATERAL (
    SELECT * FROM idempotency_keys k1
    WHERE k1.client_id = g.client_id AND k1.key = g.key AND (k1.expires_at IS NULL OR k1.expires_at > now())
    LIMIT 1
) k`
}

// newKeyReader returns the batcher of reads of live keys' columns,
// scanned by scan, recorded as name in a grouped read's traces.
func newKeyReader[T any](s *Store, name, columns string, scan func(pgx.Row, *T, ...any) error) *batcher[KeyName, *T] {
	one, many := keySQL(columns, true), keysSQL(columns)
	return &batcher[KeyName, *T]{
		name: name,
		run: func(ctx context.Context, names []KeyName, answer func(int, *T, error)) error {
			return readKeys(ctx, s.pool, many, names, scan, answer)
		},
		single: func(ctx context.Context, n KeyName) (*T, error) { return readKeyAlone(ctx, s.db, one, n, scan) },
	}
}

// lookUp reads the client's key with b: ErrNotFound as it is, any other
// error as what's.
func lookUp[T any](ctx context.Context, b *batcher[KeyName, *T], what, clientID, key string) (*T, error) {
	v, err := b.do(ctx, KeyName{clientID, key})
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, ErrNotFound
	case err != nil:
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}

// readKeyAlone reads the key name with sql (of keySQL), scanned by scan;
// ErrNotFound when there is none.
func readKeyAlone[T any](ctx context.Context, db DB, sql string, name KeyName, scan func(pgx.Row, *T, ...any) error) (*T, error) {
	v := new(T)
	err := scan(db.QueryRow(ctx, sql, name.ClientID, name.Key), v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

// readKeys reads the keys names in one statement, sql (of keysSQL), and
// answers each: its row, scanned by scan after its place, or ErrNotFound.
func readKeys[T any](ctx context.Context, db DB, sql string, names []KeyName, scan func(pgx.Row, *T, ...any) error, answer func(int, *T, error)) error {
	clients, keys := make([]string, len(names)), make([]string, len(names))
	for i, n := range names {
		clients[i], keys[i] = n.ClientID, n.Key
	}
	rows, err := db.Query(ctx, sql, clients, keys)
	if err != nil {
		return err
	}
	defer rows.Close()
	got := make([]*T, len(names))
	for rows.Next() {
		var (
			n int
			v = new(T)
		)
		if err := scan(rows, v, &n); err != nil {
			return err
		}
		if n >= 1 && n <= len(names) {
			got[n-1] = v
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for i, v := range got {
		if v == nil {
			answer(i, nil, ErrNotFound)
		} else {
			answer(i, v, nil)
		}
	}
	return nil
}
