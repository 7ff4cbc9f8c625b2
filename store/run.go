package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	erased      bool
}

// Erased reports whether the lead's personal data was erased: Lead and
// Enrichment are empty, and no downstream call may be made for it.
func (l *Lead) Erased() bool { return l.erased }

var leadColumns = `
    l.id, l.client_id, l.idempotency_key, l.external_ref, l.submission, l.enrichment,
    coalesce(l.enrichment_outcome, ''), l.enrichment_failures, l.crm_state, coalesce(l.crm_id, ''),
    coalesce(l.notify_outcome, ''), l.notify_failures, l.run, l.job_id,
    ` + keyColumns + `,
    EXISTS (SELECT FROM leads o WHERE o.external_ref = l.external_ref AND o.id <> l.id),
    l.amends, l.amendment, l.crm_not_updated,
    coalesce((SELECT sk.state IN ('processing', 'needs_reconciliation')
              FROM leads sl
              JOIN idempotency_keys sk ON sk.client_id = sl.client_id AND sk.key = sl.idempotency_key AND sk.lead_id = sl.id
              WHERE sl.id = l.amends), false),
    l.erased_at IS NOT NULL, coalesce(l.delivery_since, l.created_at), coalesce(l.waiting_for, ''),
    coalesce(l.booked_for, ''), coalesce(l.booked_at, 'epoch'), l.duplicate_of`

var loadLeadSQL = `
SELECT` + leadColumns + `
FROM leads l
LEFT JOIN idempotency_keys k ON k.client_id = l.client_id AND k.key = l.idempotency_key AND k.lead_id = l.id
WHERE l.id = $1`

func scanLead(row pgx.Row) (*Lead, error) {
	var (
		l          Lead
		submission []byte
		enrichment []byte
	)
	err := row.Scan(&l.ID, &l.ClientID, &l.Key, &l.ExternalRef, &submission, &enrichment,
		&l.State.Enrichment, &l.State.EnrichmentFailures, &l.State.CRM, &l.State.CRMID,
		&l.State.Notification, &l.State.NotificationFailures, &l.Run.Seq, &l.JobID,
		&l.KeyState.State, &l.KeyState.Failure, &l.KeyState.Superseded, &l.KeyState.Erased, &l.KeyState.Expired,
		&l.State.RefUsedBefore, &l.Amends, &l.State.Amendment, &l.State.CRMNotUpdated,
		&l.State.SupersededUnfinished, &l.erased, &l.DeliverySince, &l.WaitingFor, &l.BookedFor, &l.BookedAt, &l.DuplicateOf)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	l.Run.LeadID = l.ID
	l.State.PossibleDuplicate = l.DuplicateOf != nil
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
	l, err := scanLead(s.db.QueryRow(ctx, loadLeadSQL, leadID))
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
	// WaitingFor is the downstream the lead waits for from now on; empty
	// for none. BookedFor and BookedAt are a call booked ahead in a rate
	// limit (see Lead).
	WaitingFor string
	BookedFor  string
	BookedAt   time.Time
}

// saveSQL writes a save of a run's lead, if the run still holds it (or is
// the next to) and the lead is not erased.
const saveSQL = `
UPDATE leads
SET enrichment_outcome = @enrichment_outcome, enrichment = coalesce(@enrichment, enrichment),
    enrichment_failures = @enrichment_failures, crm_state = @crm_state, crm_id = @crm_id,
    notify_outcome = @notify_outcome, notify_failures = @notify_failures, crm_not_updated = @crm_not_updated,
    waiting_for = @waiting_for,
    waiting_since = CASE WHEN @waiting_for::text IS NULL THEN NULL ELSE coalesce(waiting_since, now()) END,
    booked_for = @booked_for, booked_at = @booked_at,
    run = @next_run, updated_at = now()
WHERE id = @lead AND run = @run AND erased_at IS NULL`

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
	seq := run.Seq
	if !run.Taken {
		seq++
	}
	st := p.State
	var booked *time.Time
	if p.BookedFor != "" {
		booked = &p.BookedAt
	}
	args := pgx.NamedArgs{
		"lead": run.LeadID, "run": run.Seq, "next_run": seq,
		"enrichment_outcome": nullIfEmpty(st.Enrichment), "enrichment": []byte(p.Enrichment),
		"enrichment_failures": st.EnrichmentFailures, "crm_state": st.CRM, "crm_id": nullIfEmpty(st.CRMID),
		"notify_outcome": nullIfEmpty(st.Notification), "notify_failures": st.NotificationFailures,
		"crm_not_updated": st.CRMNotUpdated, "waiting_for": nullIfEmpty(p.WaitingFor),
		"booked_for": nullIfEmpty(p.BookedFor), "booked_at": booked,
	}
	b := &pgx.Batch{}
	if p.Durable && s.pool != nil {
		b.Queue("begin")
		b.Queue(durably)
	}
	if len(p.Calls) > 0 {
		b.Queue(insertCallsSQL, rowArgs(callRows(p.Calls), nil))
	}
	b.Queue(saveSQL, args)
	if p.Durable && s.pool != nil {
		b.Queue("commit")
	}
	send := func(ctx context.Context) (saved bool, err error) {
		br := s.db.SendBatch(ctx, b)
		defer br.Close()
		for range b.Len() {
			tag, err := br.Exec()
			if err != nil {
				return false, err
			}
			if tag.Update() {
				saved = tag.RowsAffected() == 1
			}
		}
		return saved, br.Close()
	}
	var (
		saved bool
		err   error
	)
	if p.Durable {
		// A durable save commits: never cancelled (see uncancelled).
		saved, err = uncancelled(ctx, send)
	} else {
		saved, err = send(ctx)
	}
	if err != nil {
		return fmt.Errorf("save lead %s: %w", run.LeadID, err)
	}
	if saved {
		run.Seq, run.Taken = seq, true
		return nil
	}
	var erased bool
	if err := s.db.QueryRow(ctx, `SELECT erased_at IS NOT NULL FROM leads WHERE id = $1`, run.LeadID).Scan(&erased); err == nil && erased {
		return ErrErased
	}
	return ErrRunTaken
}
