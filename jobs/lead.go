package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leadintake/leadintake/downstream"
	"github.com/leadintake/leadintake/intake"
)

// CRM states of a lead, as stored in leads.crm_state.
const (
	crmPending   = "pending"   // nothing sent, or nothing that may have been applied
	crmUncertain = "uncertain" // a create may have been applied: look up before posting again
	crmAccepted  = "accepted"
	crmRejected  = "rejected"
)

// Enrichment outcomes, as stored in leads.enrichment_outcome.
const (
	enrichData        = "data"
	enrichNoData      = "no_data"
	enrichUnavailable = "unavailable"
)

// Warnings of a completed lead.
const (
	warnEnrichmentUnavailable = "enrichment_unavailable"
	warnNotificationFailed    = "notification_failed"
)

// lead is a lead row with its key's state and its recovery points.
type lead struct {
	ID          uuid.UUID
	Key         intake.KeyRef
	ExternalRef string
	Submission  intake.Lead
	// KeyState is nil when the key is gone (expired and deleted, or taken
	// over by a newer lead).
	KeyState           *string
	EnrichmentOutcome  *string
	Enrichment         *downstream.Enrichment
	EnrichmentFailures int
	CRMState           string
	CRMID              *string
	NotifyOutcome      *string
	NotifyFailures     int
	// RefUsedBefore is true when an earlier lead has the same external
	// reference: the key expired and was submitted again, and the CRM may
	// already hold a record under it.
	RefUsedBefore bool
}

func (l *lead) enriched() bool {
	return l.EnrichmentOutcome != nil && *l.EnrichmentOutcome == enrichData
}

func (l *lead) warnings() []string {
	w := []string{}
	if l.EnrichmentOutcome != nil && *l.EnrichmentOutcome == enrichUnavailable {
		w = append(w, warnEnrichmentUnavailable)
	}
	if l.NotifyOutcome != nil && *l.NotifyOutcome == "failed" {
		w = append(w, warnNotificationFailed)
	}
	return w
}

// leadStore reads and writes the leads table for the worker. Every write
// runs on a context detached from the job's, bounded by dbTimeout: a
// recovery point must be saved even when the job's time is up or the worker
// is stopping.
type leadStore struct {
	pool *pgxpool.Pool
}

const dbTimeout = 10 * time.Second

func dbContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), dbTimeout)
}

const loadLeadSQL = `
SELECT l.id, l.client_id, l.idempotency_key, l.external_ref, l.submission,
       k.state, l.enrichment_outcome, l.enrichment, l.enrichment_failures,
       l.crm_state, l.crm_id, l.notify_outcome, l.notify_failures,
       EXISTS (SELECT FROM leads o WHERE o.external_ref = l.external_ref AND o.id <> l.id)
FROM leads l
LEFT JOIN idempotency_keys k
       ON k.client_id = l.client_id AND k.key = l.idempotency_key AND k.lead_id = l.id
WHERE l.id = $1`

// load returns the lead, or an error wrapping pgx.ErrNoRows.
func (s *leadStore) load(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id uuid.UUID) (*lead, error) {
	var (
		l          lead
		submission []byte
		enrichment []byte
	)
	err := q.QueryRow(ctx, loadLeadSQL, id).Scan(&l.ID, &l.Key.ClientID, &l.Key.Key, &l.ExternalRef, &submission,
		&l.KeyState, &l.EnrichmentOutcome, &enrichment, &l.EnrichmentFailures,
		&l.CRMState, &l.CRMID, &l.NotifyOutcome, &l.NotifyFailures, &l.RefUsedBefore)
	if err != nil {
		return nil, fmt.Errorf("load lead %s: %w", id, err)
	}
	l.Key.LeadID = l.ID
	if err := json.Unmarshal(submission, &l.Submission); err != nil {
		return nil, fmt.Errorf("load lead %s: submission: %w", id, err)
	}
	if enrichment != nil {
		l.Enrichment = &downstream.Enrichment{}
		if err := json.Unmarshal(enrichment, l.Enrichment); err != nil {
			return nil, fmt.Errorf("load lead %s: enrichment: %w", id, err)
		}
	}
	return &l, nil
}

func (s *leadStore) exec(ctx context.Context, sql string, args ...any) error {
	ctx, cancel := dbContext(ctx)
	defer cancel()
	_, err := s.pool.Exec(ctx, sql, args...)
	return err
}

// saveEnrichment records the enrichment step's result.
func (s *leadStore) saveEnrichment(ctx context.Context, l *lead, outcome string, data *downstream.Enrichment) error {
	var raw []byte
	if data != nil {
		var err error
		if raw, err = json.Marshal(data); err != nil {
			return err
		}
	}
	if err := s.exec(ctx, `UPDATE leads SET enrichment_outcome = $2, enrichment = $3, updated_at = now() WHERE id = $1`,
		l.ID, outcome, raw); err != nil {
		return fmt.Errorf("save enrichment: %w", err)
	}
	l.EnrichmentOutcome, l.Enrichment = &outcome, data
	return nil
}

// countFailure records one more transient failure of an optional step.
func (s *leadStore) countFailure(ctx context.Context, l *lead, column string) error {
	var sql string
	switch column {
	case "enrichment_failures":
		sql = `UPDATE leads SET enrichment_failures = enrichment_failures + 1, updated_at = now() WHERE id = $1`
		l.EnrichmentFailures++
	case "notify_failures":
		sql = `UPDATE leads SET notify_failures = notify_failures + 1, updated_at = now() WHERE id = $1`
		l.NotifyFailures++
	default:
		return errors.New("count failure: unknown step")
	}
	if err := s.exec(ctx, sql, l.ID); err != nil {
		return fmt.Errorf("count failure: %w", err)
	}
	return nil
}

// setCRM records the CRM step's state (and the CRM's id once accepted).
func (s *leadStore) setCRM(ctx context.Context, l *lead, state string, crmID *string) error {
	if err := s.exec(ctx, `UPDATE leads SET crm_state = $2, crm_id = coalesce($3, crm_id), updated_at = now() WHERE id = $1`,
		l.ID, state, crmID); err != nil {
		return fmt.Errorf("save crm state: %w", err)
	}
	l.CRMState = state
	if crmID != nil {
		l.CRMID = crmID
	}
	return nil
}

// saveResultTx records the lead's result inside the finishing transaction.
func saveResultTx(ctx context.Context, tx pgx.Tx, l *lead, score int, tier string, finished bool) error {
	_, err := tx.Exec(ctx, `
UPDATE leads
SET score = $2, tier = $3, crm_state = $4, crm_id = $5, notify_outcome = $6, warnings = $7,
    updated_at = now(), finished_at = CASE WHEN $8 THEN now() END
WHERE id = $1`,
		l.ID, score, tier, l.CRMState, l.CRMID, l.NotifyOutcome, l.warnings(), finished)
	if err != nil {
		return fmt.Errorf("save lead result: %w", err)
	}
	return nil
}
