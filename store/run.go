package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
	erased bool
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
    l.erased_at IS NOT NULL`

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
		&l.State.SupersededUnfinished, &l.erased)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	l.Run.LeadID = l.ID
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

// Save records the lead's state after a step (and the enrichment's answer,
// when enrichment is not nil), in one statement; the worker saves before
// every call that acts. The first save of a run takes the lead (run.Seq and
// run.Taken change). It returns ErrRunTaken when another run holds the
// lead, and ErrErased when its personal data was erased: either way the
// run stops.
//
// A save's commit does not wait for the disk when the session's
// synchronous_commit is off (the worker's): a save lost to a crash of
// PostgreSQL makes the lead do a step again, which every step allows (an
// enrichment look-up, an upsert under the external reference, a
// notification with its Idempotency-Key), except a POST in create mode:
// the save written ahead of one is made durable (durable true), and so is
// every finish.
func (s *Store) Save(ctx context.Context, run *Run, st lead.State, enrichment json.RawMessage, durable bool) error {
	var raw []byte
	if enrichment != nil {
		raw = enrichment
	}
	seq := run.Seq
	if !run.Taken {
		seq++
	}
	tag, err := s.exec(ctx, durable, `
UPDATE leads
SET enrichment_outcome = $3, enrichment = coalesce($4, enrichment), enrichment_failures = $5,
    crm_state = $6, crm_id = $7, notify_outcome = $8, notify_failures = $9, crm_not_updated = $10,
    run = $11, updated_at = now()
WHERE id = $1 AND run = $2 AND erased_at IS NULL`,
		run.LeadID, run.Seq, nullIfEmpty(st.Enrichment), raw, st.EnrichmentFailures,
		st.CRM, nullIfEmpty(st.CRMID), nullIfEmpty(st.Notification), st.NotificationFailures, st.CRMNotUpdated, seq)
	if err != nil {
		return fmt.Errorf("save lead %s: %w", run.LeadID, err)
	}
	if tag.RowsAffected() == 1 {
		run.Seq, run.Taken = seq, true
		return nil
	}
	var erased bool
	if err := s.db.QueryRow(ctx, `SELECT erased_at IS NOT NULL FROM leads WHERE id = $1`, run.LeadID).Scan(&erased); err == nil && erased {
		return ErrErased
	}
	return ErrRunTaken
}
