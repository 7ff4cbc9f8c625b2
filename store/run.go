package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/lead"
)

// Run is one run of a lead: an attempt of its job, or the reconciler acting
// on it. A run reads the lead's number (leads.run) when it starts and takes
// the next one with its first save; every write of a run applies only while
// the number is still the one it read or took, so that of two runs at once
// exactly one acts: a run that saves takes the lead from every run that
// started before, and a run whose first save comes second stops.
type Run struct {
	LeadID uuid.UUID
	Seq    int32
	// Taken is set once a save of this run took the lead (Seq is then
	// the number it took).
	Taken bool
}

// Lead is a lead as the worker reads it: the enquiry, the key it belongs to,
// and what its steps saved so far.
type Lead struct {
	ID          uuid.UUID
	ClientID    string
	Key         string
	ExternalRef string
	Lead        lead.Lead
	// Enrichment is the enrichment service's answer, as saved; nil without
	// data.
	Enrichment json.RawMessage
	State      lead.State
	// KeyState is the lead's key as read: its state and what its
	// transitions depend on. Its State is empty when the key is gone
	// (expired and deleted, or taken over by a newer lead).
	KeyState lead.Key
	// Run is the run that holds the lead.
	Run Run
	// JobID is the job that works the lead, nil when none was recorded.
	JobID *int64
	// Amends is the lead this one amends, nil for none.
	Amends *uuid.UUID
	// DeliverySince is when the lead's delivery started: its claim, or its
	// latest re-open (DELIVERY_MAX_AGE counts from it).
	DeliverySince time.Time
	// WaitingFor is the downstream the lead waits for, empty for none.
	WaitingFor string
	// BookedFor is the downstream a call of the lead is booked ahead with
	// in its rate limit, to start at BookedAt; empty for none.
	BookedFor string
	BookedAt  time.Time
	// DuplicateOf is the earlier lead this one may duplicate (see
	// Store.FlagDuplicates); nil for none.
	DuplicateOf *uuid.UUID
	// ChainReceipts are the receipts of the messages of the lead this one
	// amends, by channel: an amendment updates them where its channel can.
	ChainReceipts map[string]string
	erased        bool
}

// Erased reports whether the lead's personal data was erased: Lead and
// Enrichment are empty, and no downstream call may be made for it.
func (l *Lead) Erased() bool { return l.erased }

var leadColumns = `
    l.id, l.client_id, l.idempotency_key, l.external_ref, l.submission, l.enrichment,
    coalesce(l.enrichment_outcome, ''), l.enrichment_failures, l.crm_state, coalesce(l.crm_id, ''),
    coalesce(l.notify_outcome, ''), coalesce(l.crm_destination, ''), coalesce(l.crm_prepared, ''), l.channels, l.run, l.job_id,
    ` + keyColumns + `,
    EXISTS (SELECT FROM leads o WHERE o.external_ref = l.external_ref AND o.id <> l.id),
    l.amends, l.amendment, l.crm_not_updated,
    coalesce((SELECT sk.state IN ('processing', 'needs_reconciliation')
              FROM leads sl
              JOIN idempotency_keys sk ON sk.client_id = sl.client_id AND sk.key = sl.idempotency_key AND sk.lead_id = sl.id
              WHERE sl.id = l.amends), false),
    l.erased_at IS NOT NULL, coalesce(l.delivery_since, l.created_at), coalesce(l.waiting_for, ''),
    coalesce(l.booked_for, ''), coalesce(l.booked_at, 'epoch'), l.duplicate_of,
    coalesce((SELECT sl.crm_id FROM leads sl WHERE sl.id = l.amends AND sl.crm_state = 'accepted'), ''),
    (SELECT sl.channels FROM leads sl WHERE sl.id = l.amends),
    coalesce(l.owner, ''), l.owner_decided,
    coalesce((SELECT sl.owner FROM leads sl WHERE sl.id = l.amends), ''),
    coalesce((SELECT sl.owner_decided FROM leads sl WHERE sl.id = l.amends), false)`

var loadLeadSQL = `
SELECT` + leadColumns + `
FROM leads l
LEFT JOIN idempotency_keys k ON k.client_id = l.client_id AND k.key = l.idempotency_key AND k.lead_id = l.id
WHERE l.id = $1`

// loadLeadsSQL is loadLeadSQL for many leads at once.
var loadLeadsSQL = `
SELECT` + leadColumns + `
FROM leads l
LEFT JOIN idempotency_keys k ON k.client_id = l.client_id AND k.key = l.idempotency_key AND k.lead_id = l.id
WHERE l.id = ANY($1)`

func scanLead(row pgx.Row) (*Lead, error) {
	var (
		l          Lead
		submission []byte
		enrichment []byte
		channels   []byte
		chain      []byte
	)
	err := row.Scan(&l.ID, &l.ClientID, &l.Key, &l.ExternalRef, &submission, &enrichment,
		&l.State.Enrichment, &l.State.EnrichmentFailures, &l.State.CRM, &l.State.CRMID,
		&l.State.Notification, &l.State.CRMDestination, &l.State.CRMPrepared, &channels, &l.Run.Seq, &l.JobID,
		&l.KeyState.State, &l.KeyState.Failure, &l.KeyState.Superseded, &l.KeyState.Erased, &l.KeyState.Expired,
		&l.State.RefUsedBefore, &l.Amends, &l.State.Amendment, &l.State.CRMNotUpdated,
		&l.State.SupersededUnfinished, &l.erased, &l.DeliverySince, &l.WaitingFor, &l.BookedFor, &l.BookedAt, &l.DuplicateOf,
		&l.State.ChainCRMID, &chain, &l.State.Owner, &l.State.OwnerDecided, &l.State.ChainOwner, &l.State.ChainOwnerDecided)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	l.Run.LeadID = l.ID
	l.State.PossibleDuplicate = l.DuplicateOf != nil
	if err := scanChannels(channels, &l.State); err != nil {
		return nil, fmt.Errorf("lead %s: channels: %w", l.ID, err)
	}
	if chain != nil {
		var amended lead.State
		if err := scanChannels(chain, &amended); err != nil {
			return nil, fmt.Errorf("lead %s: the amended lead's channels: %w", l.ID, err)
		}
		for _, c := range amended.Channels {
			if c.Receipt != "" {
				if l.ChainReceipts == nil {
					l.ChainReceipts = map[string]string{}
				}
				l.ChainReceipts[c.Name] = c.Receipt
			}
		}
	}
	if len(enrichment) > 0 {
		l.Enrichment = enrichment
	}
	if submission != nil {
		if err := json.Unmarshal(submission, &l.Lead); err != nil {
			return nil, fmt.Errorf("lead %s: submission: %w", l.ID, err)
		}
	}
	return &l, nil
}

// Lead returns a lead as it stands, its key and the run that holds it
// included; ErrNotFound when there is no such lead. It reads, and writes
// nothing: a run of the worker takes the lead with its first save (see
// Run), which comes before any call that acts.
func (s *Store) Lead(ctx context.Context, leadID uuid.UUID) (*Lead, error) {
	l, err := s.loads.do(ctx, leadID)
	if err != nil {
		return nil, fmt.Errorf("load lead %s: %w", leadID, err)
	}
	return l, nil
}

// nullIfEmpty stores an empty step state as NULL, as the CHECK constraints
// want it.
func nullIfEmpty[S ~string](v S) *string {
	if v == "" {
		return nil
	}
	s := string(v)
	return &s
}

// SaveParams is what a save of a lead writes.
type SaveParams struct {
	// State is the lead's state after its last step.
	State lead.State
	// Enrichment is the enrichment service's answer, when it came since
	// the last save; nil keeps what is saved.
	Enrichment json.RawMessage
	// Durable makes the save on disk before it returns, whatever the
	// session's synchronous_commit (the worker's is off).
	Durable bool
	// Calls are the downstream calls made since the last save, for the
	// delivery log.
	Calls []Call
	// Assign, when set, makes the save choose the lead's owner, once: the
	// next of Assign.Owners in the turn of Assign.Pool kept in the
	// database. The owner chosen is returned in Assign.Owner.
	Assign *Assign
	// WaitingFor is the downstream the lead waits for from now on; empty
	// for none. BookedFor and BookedAt are a call booked ahead in a rate
	// limit (see Lead).
	WaitingFor string
	BookedFor  string
	BookedAt   time.Time
}

// saveRow is a save as saveSQL takes it (see rows.go).
type saveRow struct {
	LeadID             uuid.UUID `db:"lead_id" pg:"uuid"`
	Run                int32     `db:"run" pg:"int4"`
	NextRun            int32     `db:"next_run" pg:"int4"`
	EnrichmentOutcome  *string   `db:"enrichment_outcome" pg:"text"`
	Enrichment         []byte    `db:"enrichment" pg:"jsonb"`
	EnrichmentFailures int16     `db:"enrichment_failures" pg:"int2"`
	CRMState           string    `db:"crm_state" pg:"text"`
	CRMID              *string   `db:"crm_id" pg:"text"`
	NotifyOutcome      *string   `db:"notify_outcome" pg:"text"`
	CRMDestination     *string   `db:"crm_destination" pg:"text"`
	CRMPrepared        *string   `db:"crm_prepared" pg:"text"`
	Channels           []byte    `db:"channels" pg:"jsonb"`
	Owner              *string   `db:"owner" pg:"text"`
	OwnerDecided       bool      `db:"owner_decided" pg:"bool"`
	// AssignPool, when set, makes the save choose the lead's owner among
	// AssignOwners (comma-separated names; none: no owner): see Assign.
	AssignPool    *string    `db:"assign_pool" pg:"text"`
	AssignOwners  string     `db:"assign_owners" pg:"text"`
	CRMNotUpdated bool       `db:"crm_not_updated" pg:"bool"`
	WaitingFor    *string    `db:"waiting_for" pg:"text"`
	BookedFor     *string    `db:"booked_for" pg:"text"`
	BookedAt      *time.Time `db:"booked_at" pg:"timestamptz"`
}

// saveSQL writes saves of runs' leads, each if its run still holds the
// lead (or is the next to) and the lead is not erased, and returns the
// leads it saved with their owners.
//
// A save that assigns (assign_pool set) chooses the lead's owner once, in
// the same statement: the pool's turn (owner_turns) moves on by the number
// of leads of the statement that take an owner from it, and each of them,
// in the order they were claimed, takes the next of the pool's owners. A
// lead whose owner was decided keeps it.
var saveSQL = `
WITH r AS (
    SELECT * FROM ` + unnestRows[saveRow]("r") + `
), held AS (
    SELECT r.lead_id, r.assign_pool, string_to_array(r.assign_owners, ',') AS owners, l.created_at
    FROM r JOIN leads l ON l.id = r.lead_id AND l.run = r.run AND l.erased_at IS NULL AND NOT l.owner_decided
    WHERE r.assign_pool IS NOT NULL AND r.assign_owners <> ''
    FOR UPDATE OF l
), a AS (
    SELECT held.*, row_number() OVER (PARTITION BY assign_pool ORDER BY created_at, lead_id) AS n,
           count(*) OVER (PARTITION BY assign_pool) AS cnt
    FROM held
), t AS (
    INSERT INTO owner_turns AS o (pool, turn)
    SELECT assign_pool, max(cnt) FROM a GROUP BY assign_pool
    ON CONFLICT (pool) DO UPDATE SET turn = o.turn + excluded.turn
    RETURNING o.pool, o.turn
), chosen AS (
    SELECT a.lead_id, a.owners[((t.turn - a.cnt + a.n - 1) % cardinality(a.owners)) + 1] AS owner
    FROM a JOIN t ON t.pool = a.assign_pool
)
UPDATE leads
SET enrichment_outcome = r.enrichment_outcome, enrichment = coalesce(r.enrichment, leads.enrichment),
    enrichment_failures = r.enrichment_failures, crm_state = r.crm_state, crm_id = r.crm_id,
    notify_outcome = r.notify_outcome, crm_not_updated = r.crm_not_updated,
    crm_destination = r.crm_destination, crm_prepared = r.crm_prepared, channels = r.channels,
    owner = CASE WHEN leads.owner_decided THEN leads.owner
                 WHEN r.assign_pool IS NOT NULL THEN c.owner
                 ELSE r.owner END,
    owner_decided = leads.owner_decided OR r.owner_decided OR r.assign_pool IS NOT NULL,
    waiting_for = r.waiting_for,
    waiting_since = CASE WHEN r.waiting_for IS NULL THEN NULL ELSE coalesce(leads.waiting_since, now()) END,
    booked_for = r.booked_for, booked_at = r.booked_at,
    run = r.next_run, updated_at = now()
FROM r LEFT JOIN chosen c ON c.lead_id = r.lead_id
WHERE leads.id = r.lead_id AND leads.run = r.run AND leads.erased_at IS NULL
RETURNING leads.id, coalesce(leads.owner, '')`

// Assign is the pool a save chooses a lead's owner from
// (SaveParams.Assign).
type Assign struct {
	// Pool names the pool's turn (the client and the pool's owners); empty
	// when no rule matched: the lead gets no owner.
	Pool string
	// Owners are the pool's owners not away, in the pool's order; none:
	// the lead gets no owner.
	Owners []string
	// Owner is the owner the save chose, "" for none; set by Save.
	Owner string
}

// saveRowOf is the save p of run.
func saveRowOf(run *Run, p *SaveParams) saveRow {
	next := run.Seq
	if !run.Taken {
		next++
	}
	st := p.State
	r := saveRow{
		LeadID: run.LeadID, Run: run.Seq, NextRun: next,
		EnrichmentOutcome: nullIfEmpty(st.Enrichment), Enrichment: p.Enrichment,
		EnrichmentFailures: int16(st.EnrichmentFailures), CRMState: string(st.CRM), CRMID: nullIfEmpty(st.CRMID),
		NotifyOutcome:  nullIfEmpty(st.Notification),
		CRMDestination: nullIfEmpty(st.CRMDestination), CRMPrepared: nullIfEmpty(st.CRMPrepared), Channels: channelsJSON(&st),
		Owner: nullIfEmpty(st.Owner), OwnerDecided: st.OwnerDecided,
		CRMNotUpdated: st.CRMNotUpdated, WaitingFor: nullIfEmpty(p.WaitingFor), BookedFor: nullIfEmpty(p.BookedFor),
	}
	if p.BookedFor != "" {
		at := p.BookedAt
		r.BookedAt = &at
	}
	if a := p.Assign; a != nil {
		pool := a.Pool
		r.AssignPool, r.AssignOwners = &pool, strings.Join(a.Owners, ",")
	}
	return r
}

// Save records the lead's state after a step (and the enrichment's answer,
// and the calls made, for the delivery log), in one round trip; the worker
// saves before every call that acts. The first save of a run takes the lead
// (run.Seq and run.Taken change). It returns ErrRunTaken when another run
// holds the lead, and ErrErased when its personal data was erased: either
// way the run stops.
//
// A save's commit does not wait for the disk when the session's
// synchronous_commit is off (the worker's), unless p.Durable: a save lost to
// a crash of PostgreSQL makes the lead do a step again, which every step
// allows but a POST in create mode (see lead.SaveDurable).
func (s *Store) Save(ctx context.Context, run *Run, p SaveParams) error {
	row := saveRowOf(run, &p)
	var (
		saved savedLead
		err   error
	)
	if p.Durable {
		saved, err = s.durables.do(ctx, pendingSave{row: row, calls: p.Calls})
	} else {
		saved, err = s.saves.do(ctx, pendingSave{row: row, calls: p.Calls})
	}
	if err != nil {
		return fmt.Errorf("save lead %s: %w", run.LeadID, err)
	}
	if saved.saved {
		run.Seq, run.Taken = row.NextRun, true
		if p.Assign != nil {
			p.Assign.Owner = saved.owner
		}
		return nil
	}
	var erased bool
	if err := s.db.QueryRow(ctx, `SELECT erased_at IS NOT NULL FROM leads WHERE id = $1`, run.LeadID).Scan(&erased); err == nil && erased {
		return ErrErased
	}
	return ErrRunTaken
}

// savedLead is what a save of one lead came to: whether it was saved, and
// its owner then.
type savedLead struct {
	saved bool
	owner string
}

// savedLeads are the leads a statement saved, with their owners.
type savedLeads map[uuid.UUID]string

func (s savedLeads) of(id uuid.UUID) savedLead {
	owner, ok := s[id]
	return savedLead{saved: ok, owner: owner}
}

// saveRows writes the saves rows (and the calls, for the delivery log) in
// one round trip, in a transaction of its own made durable when durable,
// and returns the leads it saved.
func (s *Store) saveRows(ctx context.Context, durable bool, rows []saveRow, calls []Call) (savedLeads, error) {
	b := &pgx.Batch{}
	durable = durable && s.pool != nil
	if durable {
		b.Queue("begin")
		b.Queue(durably)
	}
	if len(calls) > 0 {
		b.Queue(insertCallsSQL, rowArgs(callRows(calls), nil))
	}
	at := b.Len()
	b.Queue(saveSQL, rowArgs(rows, nil))
	if durable {
		b.Queue("commit")
	}
	br := s.db.SendBatch(ctx, b)
	defer br.Close()
	saved := savedLeads{}
	for i := range b.Len() {
		if i != at {
			if _, err := br.Exec(); err != nil {
				return nil, err
			}
			continue
		}
		res, err := br.Query()
		if err != nil {
			return nil, err
		}
		for res.Next() {
			var (
				id    uuid.UUID
				owner string
			)
			if err := res.Scan(&id, &owner); err != nil {
				res.Close()
				return nil, err
			}
			saved[id] = owner
		}
		if err := res.Err(); err != nil {
			return nil, err
		}
	}
	return saved, br.Close()
}

// Holds checks, writing nothing, that run still holds its lead (no later
// run took it; run took it with a save) and that the lead's personal data
// is not erased: ErrRunTaken or ErrErased when not, as Save would answer.
func (s *Store) Holds(ctx context.Context, run *Run) error {
	_, err := s.checks.do(ctx, *run)
	if err != nil && !errors.Is(err, ErrRunTaken) && !errors.Is(err, ErrErased) {
		return fmt.Errorf("check the hold on lead %s: %w", run.LeadID, err)
	}
	return err
}

// checkGroup reads the leads of runs in one statement, and answers each
// run's check.
func (s *Store) checkGroup(ctx context.Context, runs []Run, answer func(int, struct{}, error)) error {
	ids := make([]uuid.UUID, len(runs))
	for i, run := range runs {
		ids[i] = run.LeadID
	}
	rows, err := s.db.Query(ctx, `SELECT id, run, erased_at IS NOT NULL FROM leads WHERE id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	type hold struct {
		run    int32
		erased bool
	}
	holds := make(map[uuid.UUID]hold, len(runs))
	for rows.Next() {
		var (
			id uuid.UUID
			h  hold
		)
		if err := rows.Scan(&id, &h.run, &h.erased); err != nil {
			rows.Close()
			return err
		}
		holds[id] = h
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for i, run := range runs {
		h, ok := holds[run.LeadID]
		switch {
		case ok && h.erased:
			answer(i, struct{}{}, ErrErased)
		case !ok || !run.Taken || h.run != run.Seq:
			answer(i, struct{}{}, ErrRunTaken)
		default:
			answer(i, struct{}{}, nil)
		}
	}
	return nil
}

// channelRow is one notification channel's state, as leads.channels holds
// it.
type channelRow struct {
	Name     string            `json:"name"`
	State    lead.ChannelState `json:"state,omitempty"`
	Failures int               `json:"failures,omitempty"`
	Receipt  string            `json:"receipt,omitempty"`
	Since    int64             `json:"since,omitempty"`
}

// channelsJSON is the lead's channels as leads.channels holds them: nil
// (NULL) until they are chosen.
func channelsJSON(st *lead.State) []byte {
	if !st.ChannelsSet {
		return nil
	}
	rows := []channelRow{}
	for _, c := range st.Channels {
		if c.Name != "" {
			rows = append(rows, channelRow{Name: c.Name, State: c.State, Failures: c.Failures, Receipt: c.Receipt, Since: c.Since})
		}
	}
	b, _ := json.Marshal(rows)
	return b
}

// scanChannels reads leads.channels into st.
func scanChannels(raw []byte, st *lead.State) error {
	if raw == nil {
		return nil
	}
	var rows []channelRow
	if err := json.Unmarshal(raw, &rows); err != nil {
		return err
	}
	st.ChannelsSet = true
	for i, r := range rows[:min(len(rows), lead.MaxChannels)] {
		st.Channels[i] = lead.Channel{Name: r.Name, State: r.State, Failures: r.Failures, Receipt: r.Receipt, Since: r.Since}
	}
	return nil
}
