package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
)

// Finish is how one key ends: with a final response, or in reconciliation.
// Every finisher (the worker, the reconciler's orphan finisher, an erasure)
// ends keys this way, through finishTx.
type Finish struct {
	// LeadID, ClientID and Key name the lead and its key.
	LeadID        uuid.UUID
	ClientID, Key string
	// From is the key's state as the finisher read it: the finish applies
	// only to a key still in it, and still this lead's.
	From lead.KeyState
	// Run, when not nil, fences the finish: it applies only while this run
	// holds the lead (no later run started).
	Run *Run
	// To is KeyCompleted or KeyFailed with a Response, or
	// KeyNeedsReconciliation without one.
	To       lead.KeyState
	Response response.Final
	// FailureCode is the error code of a failed key (crm_rejected,
	// downstream_unavailable, erased).
	FailureCode response.Code
	// Retention is how long a finished key is kept.
	Retention time.Duration
	// Result is the lead's result; nil keeps what the lead holds (an
	// erasure's finish).
	Result *Result
	// Calls are the downstream calls made since the lead's last save, for
	// the delivery log.
	Calls []Call
	// Enrichment is the enrichment service's answer when it came since the
	// lead's last save; nil keeps what is saved.
	Enrichment json.RawMessage
}

// Result is what a lead's run ends with.
type Result struct {
	State lead.State
	Score int
	Tier  lead.Tier
}

// Finished is what a finish did.
type Finished struct {
	// Applied is false when nothing was left to finish: the key was no
	// longer as read or no longer the lead's, or a later run holds the
	// lead.
	Applied bool
}

// FinishedChannel is the PostgreSQL notification channel on which a key's
// finish is announced, with the lead's id as the payload, once the
// finishing transaction committed (never for a rollback).
const FinishedChannel = "leadintake_finished"

// finishRow is a Finish as finishSQL takes it (see rows.go).
type finishRow struct {
	LeadID    uuid.UUID `db:"lead_id" pg:"uuid"`
	ClientID  string    `db:"client_id" pg:"text"`
	Key       string    `db:"key" pg:"text"`
	From      string    `db:"from_state" pg:"text"`
	Run       *int32    `db:"run" pg:"int4"`
	To        string    `db:"to_state" pg:"text"`
	Status    *int16    `db:"status" pg:"int2"`
	Body      []byte    `db:"body" pg:"json"`
	Failure   *string   `db:"failure" pg:"text"`
	Retention float64   `db:"retention_s" pg:"float8"`
	HasResult bool      `db:"has_result" pg:"bool"`
	Score     *int16    `db:"score" pg:"int2"`
	Tier      *string   `db:"tier" pg:"text"`
	CRM       string    `db:"crm_state" pg:"text"`
	CRMID     *string   `db:"crm_id" pg:"text"`
	Notify    *string   `db:"notify_outcome" pg:"text"`
	// Warnings are comma-separated: one array per row cannot be unnested.
	Warnings      string `db:"warnings" pg:"text"`
	CRMNotUpdated bool   `db:"crm_not_updated" pg:"bool"`
	// The rest of the state, as a save writes it: the finish is the lead's
	// last save.
	EnrichmentOutcome  *string `db:"enrichment_outcome" pg:"text"`
	Enrichment         []byte  `db:"enrichment" pg:"jsonb"`
	EnrichmentFailures int16   `db:"enrichment_failures" pg:"int2"`
	CRMDestination     *string `db:"crm_destination" pg:"text"`
	CRMPrepared        *string `db:"crm_prepared" pg:"text"`
	Channels           []byte  `db:"channels" pg:"jsonb"`
	Owner              *string `db:"owner" pg:"text"`
	OwnerDecided       bool    `db:"owner_decided" pg:"bool"`
}

func rowOf(f *Finish) finishRow {
	r := finishRow{
		LeadID: f.LeadID, ClientID: f.ClientID, Key: f.Key, From: string(f.From), To: string(f.To),
		Failure: nullIfEmpty(f.FailureCode), Retention: f.Retention.Seconds(),
	}
	if f.Run != nil {
		seq := f.Run.Seq
		r.Run = &seq
	}
	if f.To.Finished() {
		st := int16(f.Response.Status)
		r.Status, r.Body = &st, f.Response.Body
	}
	if res := f.Result; res != nil {
		score := int16(res.Score)
		r.HasResult, r.Score, r.Tier = true, &score, nullIfEmpty(res.Tier)
		r.CRM, r.CRMID, r.Notify = string(res.State.CRM), nullIfEmpty(res.State.CRMID), nullIfEmpty(res.State.Notification)
		r.Warnings, r.CRMNotUpdated = strings.Join(res.State.Warnings(), ","), res.State.CRMNotUpdated
		r.EnrichmentOutcome, r.Enrichment = nullIfEmpty(res.State.Enrichment), f.Enrichment
		r.EnrichmentFailures = int16(res.State.EnrichmentFailures)
		r.CRMDestination, r.CRMPrepared = nullIfEmpty(res.State.CRMDestination), nullIfEmpty(res.State.CRMPrepared)
		r.Channels = channelsJSON(&res.State)
		r.Owner, r.OwnerDecided = nullIfEmpty(res.State.Owner), res.State.OwnerDecided
	}
	return r
}

// finishSQL ends leads in one statement: each lead row is locked (and its
// run checked when the finish is fenced); its key, still in the state read
// and still this lead's, takes its final response (or moves to
// needs_reconciliation); the lead takes its result. Nothing changes for a
// row unless both hold. It returns, per key it finished, whether a final
// response was written, and the job of the amendment that waits for the
// key, if any.
var finishSQL = `
WITH f AS (
    SELECT * FROM ` + unnestRows[finishRow]("f") + `
), l AS (
    SELECT leads.id FROM leads JOIN f ON f.lead_id = leads.id
    WHERE f.run IS NULL OR leads.run = f.run
    ORDER BY leads.id
    FOR UPDATE OF leads
), k AS (
    UPDATE idempotency_keys k
    SET state = f.to_state, response_status = f.status, response_body = f.body, failure_code = f.failure,
        updated_at = now(),
        finished_at = CASE WHEN f.status IS NOT NULL THEN now() END,
        expires_at = CASE WHEN f.status IS NOT NULL THEN now() + f.retention_s * interval '1 second' END
    FROM f JOIN l ON l.id = f.lead_id
    WHERE k.client_id = f.client_id AND k.key = f.key AND k.lead_id = f.lead_id AND k.state = f.from_state
    RETURNING k.lead_id, k.client_id, k.superseded_by, f.status IS NOT NULL AS final
), r AS (
    UPDATE leads SET
        score = CASE WHEN f.has_result THEN f.score ELSE leads.score END,
        tier = CASE WHEN f.has_result THEN f.tier ELSE leads.tier END,
        crm_state = CASE WHEN f.has_result THEN f.crm_state ELSE leads.crm_state END,
        crm_id = CASE WHEN f.has_result THEN f.crm_id ELSE leads.crm_id END,
        notify_outcome = CASE WHEN f.has_result THEN f.notify_outcome ELSE leads.notify_outcome END,
        warnings = CASE WHEN f.has_result THEN coalesce(string_to_array(nullif(f.warnings, ''), ','), '{}') ELSE leads.warnings END,
        crm_not_updated = CASE WHEN f.has_result THEN f.crm_not_updated ELSE leads.crm_not_updated END,
        enrichment_outcome = CASE WHEN f.has_result THEN f.enrichment_outcome ELSE leads.enrichment_outcome END,
        enrichment = coalesce(f.enrichment, leads.enrichment),
        enrichment_failures = CASE WHEN f.has_result THEN f.enrichment_failures ELSE leads.enrichment_failures END,
        crm_destination = CASE WHEN f.has_result THEN f.crm_destination ELSE leads.crm_destination END,
        crm_prepared = CASE WHEN f.has_result THEN f.crm_prepared ELSE leads.crm_prepared END,
        channels = CASE WHEN f.has_result THEN f.channels ELSE leads.channels END,
        owner = CASE WHEN leads.owner_decided OR NOT f.has_result THEN leads.owner ELSE f.owner END,
        owner_decided = leads.owner_decided OR (f.has_result AND f.owner_decided),
        finished_at = CASE WHEN f.status IS NOT NULL THEN now() END,
        waiting_for = NULL, waiting_since = NULL, booked_for = NULL, booked_at = NULL,
        updated_at = now()
    FROM f JOIN k ON k.lead_id = f.lead_id
    WHERE leads.id = f.lead_id
)
SELECT k.lead_id, k.final,
       (SELECT al.job_id
        FROM idempotency_keys ak JOIN leads al ON al.id = ak.lead_id
        WHERE ak.client_id = k.client_id AND ak.key = k.superseded_by AND ak.state = 'processing' AND k.final)
FROM k`

// finishing is what the finishes of one transaction leave to do once it
// committed: announce the keys that took a final response.
type finishing struct {
	finals []uuid.UUID
}

// finishTx finishes fs in tx, in one statement, and there too starts what
// every finish starts: the delivery of each final response to its client's
// callback (the callbacks outbox row and its job), and the wake-up of the
// amendment that waits for the key. durable makes tx durable before its
// commit returns, whatever the session's synchronous_commit (the worker's
// is off). It returns what each finish did, in the order of fs; fin
// collects what to announce once tx committed (s.announce).
func (s *Store) finishTx(ctx context.Context, tx pgx.Tx, durable bool, fs []*Finish, fin *finishing) ([]Finished, error) {
	if s.jobs == nil {
		return nil, errNoJobs
	}
	rows := make([]finishRow, len(fs))
	for i, f := range fs {
		rows[i] = rowOf(f)
	}
	var calls []Call
	for _, f := range fs {
		calls = append(calls, f.Calls...)
	}
	b := &pgx.Batch{}
	if durable {
		b.Queue(durably)
	}
	if len(calls) > 0 {
		b.Queue(insertCallsSQL, rowArgs(callRows(calls), nil))
	}
	b.Queue(finishSQL, rowArgs(rows, nil))
	br := tx.SendBatch(ctx, b)
	type applied struct {
		final bool
		wake  *int64
	}
	got := map[uuid.UUID]applied{}
	err := func() error {
		defer br.Close()
		for range b.Len() - 1 {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		res, err := br.Query()
		if err != nil {
			return err
		}
		for res.Next() {
			var (
				id uuid.UUID
				a  applied
			)
			if err := res.Scan(&id, &a.final, &a.wake); err != nil {
				res.Close()
				return err
			}
			got[id] = a
		}
		res.Close()
		if err := res.Err(); err != nil {
			return err
		}
		return br.Close()
	}()
	if err != nil {
		return nil, fmt.Errorf("finish: %w", err)
	}

	done := make([]Finished, len(fs))
	var (
		callbacks []callbackRow
		wake      []int64
	)
	for i, f := range fs {
		a, ok := got[f.LeadID]
		if !ok {
			continue
		}
		done[i].Applied = true
		if a.wake != nil {
			wake = append(wake, *a.wake)
		}
		if !a.final {
			continue
		}
		fin.finals = append(fin.finals, f.LeadID)
		if s.jobs.Callback(f.ClientID) {
			cb, err := callbackOf(f)
			if err != nil {
				return nil, err
			}
			callbacks = append(callbacks, cb)
		}
	}
	if len(callbacks) > 0 {
		if _, err := tx.Exec(ctx, insertCallbacksSQL, rowArgs(callbacks, nil)); err != nil {
			return nil, fmt.Errorf("finish: write callbacks: %w", err)
		}
		ids := make([]uuid.UUID, len(callbacks))
		for i := range callbacks {
			ids[i] = callbacks[i].ID
		}
		if err := s.jobs.DeliverCallbacks(ctx, tx, ids); err != nil {
			return nil, fmt.Errorf("finish: enqueue callbacks: %w", err)
		}
	}
	if len(wake) > 0 {
		if err := s.jobs.Wake(ctx, tx, wake); err != nil {
			return nil, fmt.Errorf("finish: wake amendments: %w", err)
		}
	}
	return done, nil
}

// Finish ends one lead as f says, in one transaction that is on disk before
// Finish returns (see finishTx), and announces the finish once it
// committed. With GroupRuns, that transaction may finish concurrent leads
// too.
func (s *Store) Finish(ctx context.Context, f *Finish) (*Finished, error) {
	done, err := s.finishes.do(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("finish lead %s: %w", f.LeadID, err)
	}
	return done, nil
}

// Callback payload types.
const (
	CallbackCompleted   = "lead.completed"
	CallbackFailed      = "lead.failed"
	CallbackQuarantined = "lead.quarantined"
)

// callbackRow is one delivery owed to a client's callback, as the
// finishing transaction writes it (see rows.go).
type callbackRow struct {
	ID       uuid.UUID `db:"id" pg:"uuid"`
	ClientID string    `db:"client_id" pg:"text"`
	LeadID   uuid.UUID `db:"lead_id" pg:"uuid"`
	Payload  []byte    `db:"payload" pg:"json"`
}

var insertCallbacksSQL = `
INSERT INTO callbacks (` + columnList[callbackRow]("") + `)
SELECT ` + columnList[callbackRow]("r.") + ` FROM ` + unnestRows[callbackRow]("r")

// callbackPayload is the body of every delivery of one finish.
type callbackPayload struct {
	Type      string       `json:"type"`
	Timestamp time.Time    `json:"timestamp"`
	Data      callbackData `json:"data"`
}

type callbackData struct {
	IdempotencyKey string           `json:"idempotency_key"`
	LeadID         string           `json:"lead_id"`
	Response       callbackResponse `json:"response"`
}

type callbackResponse struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
}

// callbackOf is the delivery of the finish f; its id is the webhook-id of
// every attempt.
func callbackOf(f *Finish) (callbackRow, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return callbackRow{}, err
	}
	typ := CallbackCompleted
	switch f.To {
	case lead.KeyFailed:
		typ = CallbackFailed
	case lead.KeyQuarantined:
		typ = CallbackQuarantined
	}
	payload, err := json.Marshal(callbackPayload{
		Type: typ, Timestamp: time.Now().UTC(),
		Data: callbackData{
			IdempotencyKey: f.Key, LeadID: f.LeadID.String(),
			Response: callbackResponse{Status: f.Response.Status, Body: f.Response.Body},
		},
	})
	if err != nil {
		return callbackRow{}, err
	}
	return callbackRow{ID: id, ClientID: f.ClientID, LeadID: f.LeadID, Payload: payload}, nil
}
