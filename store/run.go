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
	"github.com/leadintake/leadintake/response"
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
	// KeyState is the state of the lead's key, empty when the key is gone
	// (expired and deleted, or taken over by a newer lead).
	KeyState KeyState
	// Run is the run that holds the lead: this one after StartRun.
	Run Run
	// JobID is the job that works the lead, nil when none was recorded.
	JobID *int64
	// Amends is the lead this one amends, nil for none.
	Amends *uuid.UUID
	// Erased is true once the lead's personal data was erased: Lead and
	// Enrichment are empty, and no downstream call may be made for it.
	Erased bool
}

const leadColumns = `
    l.id, l.client_id, l.idempotency_key, l.external_ref, l.submission, l.enrichment,
    coalesce(l.enrichment_outcome, ''), l.enrichment_failures, l.crm_state, coalesce(l.crm_id, ''),
    coalesce(l.notify_outcome, ''), l.notify_failures, l.run, l.job_id,
    coalesce(k.state, ''),
    EXISTS (SELECT FROM leads o WHERE o.external_ref = l.external_ref AND o.id <> l.id),
    l.amends, l.amendment, l.crm_not_updated,
    coalesce((SELECT sk.state IN ('processing', 'needs_reconciliation')
              FROM leads sl
              JOIN idempotency_keys sk ON sk.client_id = sl.client_id AND sk.key = sl.idempotency_key AND sk.lead_id = sl.id
              WHERE sl.id = l.amends), false),
    l.erased_at IS NOT NULL`

const loadLeadSQL = `
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
		&l.KeyState, &l.State.RefUsedBefore, &l.Amends, &l.State.Amendment, &l.State.CRMNotUpdated,
		&l.State.SupersededUnfinished, &l.Erased)
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

// StartRun starts a run of a lead and returns the lead; ErrNotFound when
// there is no such lead. It reads, and writes nothing: the run takes the
// lead with its first save (see Run), which must come before any call that
// acts (the CRM, the notification; an enrichment look-up may come first).
func (s *Store) StartRun(ctx context.Context, leadID uuid.UUID) (*Lead, error) {
	l, err := scanLead(s.db.QueryRow(ctx, loadLeadSQL, leadID))
	if err != nil {
		return nil, fmt.Errorf("start run of lead %s: %w", leadID, err)
	}
	return l, nil
}

// LoadLead returns a lead as it stands, its current run included, without
// starting one; ErrNotFound when there is no such lead.
func (s *Store) LoadLead(ctx context.Context, leadID uuid.UUID) (*Lead, error) {
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

// Finish is how a lead ends: with a final response, or in reconciliation.
type Finish struct {
	// KeyState is KeyCompleted or KeyFailed with a Response, or
	// KeyNeedsReconciliation without one.
	KeyState KeyState
	Response response.Final
	// FailureCode is the error code of a failed key (crm_rejected,
	// downstream_unavailable).
	FailureCode response.Code
	// Retention is how long a finished key is kept.
	Retention time.Duration
	// State is the lead's final state; Score and Tier its score.
	State lead.State
	Score int
	Tier  lead.Tier
	// Callback, when not nil, announces a final response to the client's
	// callback: the finishing transaction writes the delivery (the
	// callbacks outbox) with it.
	Callback *CallbackKey
}

// CallbackKey names the key a callback announces.
type CallbackKey struct {
	ClientID, Key string
}

// FinishedChannel is the PostgreSQL notification channel on which a key's
// finish is announced, with the lead's id as the payload, once the
// finishing transaction committed (never for a rollback).
const FinishedChannel = "leadintake_finished"

// finishSQL ends a lead in one statement: the lead row is locked and its run
// checked; the key, still unfinished and still this lead's, takes its final
// response (or moves to needs_reconciliation); the lead takes its result.
// Nothing changes unless both hold. The statement returns the job of the
// amendment that waits for this key, if any, and whether a final response
// was written (to be announced on FinishedChannel after the commit).
const finishSQL = `
WITH l AS (
    SELECT id, client_id, idempotency_key FROM leads WHERE id = $1 AND run = $2 FOR UPDATE
), k AS (
    UPDATE idempotency_keys k
    SET state = $3, response_status = $4, response_body = $5, failure_code = $6, updated_at = now(),
        finished_at = CASE WHEN $4::smallint IS NOT NULL THEN now() END,
        expires_at = CASE WHEN $4::smallint IS NOT NULL THEN now() + $7::interval END
    FROM l
    WHERE k.client_id = l.client_id AND k.key = l.idempotency_key AND k.lead_id = l.id
      AND k.state IN ('processing', 'needs_reconciliation')
    RETURNING k.lead_id, k.client_id, k.superseded_by
)
UPDATE leads
SET score = $8, tier = $9, crm_state = $10, crm_id = $11, notify_outcome = $12, warnings = $13,
    crm_not_updated = $14, updated_at = now(), finished_at = CASE WHEN $4::smallint IS NOT NULL THEN now() END
WHERE id = (SELECT lead_id FROM k)
RETURNING
    (SELECT al.job_id
     FROM k
     JOIN idempotency_keys ak ON ak.client_id = k.client_id AND ak.key = k.superseded_by AND ak.state = 'processing'
     JOIN leads al ON al.id = ak.lead_id
     WHERE $4::smallint IS NOT NULL),
    $4::smallint IS NOT NULL`

// Finished is what a finish did.
type Finished struct {
	// Applied is false when nothing was left to finish: the key was no
	// longer unfinished and the lead's, or a later run holds the lead.
	Applied bool
	// WakeJobID is the job of the amendment that waits for this key to
	// finish; nil for none.
	WakeJobID *int64
	// CallbackID is the delivery written for Finish.Callback; nil for none.
	CallbackID *uuid.UUID
}

// Finish ends the run's lead as f says, and runs inTx (the completion of the
// run's job, the wake-up of a waiting amendment) in the same transaction
// when it is not nil; inTx runs whether or not anything was finished.
func (s *Store) Finish(ctx context.Context, run Run, f *Finish, inTx func(pgx.Tx, *Finished) error) (*Finished, error) {
	var (
		status   *int16
		body     []byte
		failure  *string
		warnings = f.State.Warnings()
	)
	if f.KeyState.Finished() {
		st := int16(f.Response.Status)
		status, body = &st, f.Response.Body
	}
	if f.FailureCode != "" {
		failure = nullIfEmpty(f.FailureCode)
	}
	done := &Finished{}
	var final bool
	err := s.inDurableTx(ctx, finishSQL, []any{run.LeadID, run.Seq, f.KeyState, status, body, failure, f.Retention,
		f.Score, nullIfEmpty(f.Tier), f.State.CRM, nullIfEmpty(f.State.CRMID), nullIfEmpty(f.State.Notification),
		warnings, f.State.CRMNotUpdated}, func(tx pgx.Tx, first pgx.Row) error {
		err := first.Scan(&done.WakeJobID, &final)
		switch {
		case err == nil:
			done.Applied = true
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		if done.Applied && f.Callback != nil && f.KeyState.Finished() {
			if done.CallbackID, err = insertCallback(ctx, tx, run.LeadID, f); err != nil {
				return err
			}
		}
		if inTx != nil {
			return inTx(tx, done)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("finish lead %s: %w", run.LeadID, err)
	}
	if done.Applied && final {
		s.announce(run.LeadID)
	}
	return done, nil
}
