package jobs

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/leadintake/leadintake/intake"
)

// ReconcileArgs are the arguments of the periodic reconciliation job.
type ReconcileArgs struct{}

// Kind is the job's kind in River.
func (ReconcileArgs) Kind() string { return "reconcile_keys" }

// InsertOpts puts the job on the maintenance queue.
func (ReconcileArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: 3}
}

// reconcileBatch bounds the keys one run looks at, per kind of work.
const reconcileBatch = 100

// ReconcileWorker settles what neither a job nor a retry can:
//
//   - keys in needs_reconciliation: it looks the external reference up in
//     the CRM again. A record found is the CRM's acceptance: the lead
//     resumes at its notification and completes. A definite 404 lets the
//     lead be posted again. Anything else waits for the next round.
//   - keys still processing whose job ended without a final response (the
//     rescuer discarded it after a crash on its last attempt, or an operator
//     cancelled or deleted it): it finishes them as that last attempt would
//     have.
type ReconcileWorker struct {
	river.WorkerDefaults[ReconcileArgs]
	cfg      Config
	leads    *leadStore
	finisher *finisher
}

// NewReconcileWorker returns the worker.
func NewReconcileWorker(cfg Config) *ReconcileWorker {
	cfg = cfg.withDefaults()
	return &ReconcileWorker{
		cfg:      cfg,
		leads:    &leadStore{pool: cfg.Pool},
		finisher: &finisher{pool: cfg.Pool, retention: cfg.KeyRetention},
	}
}

// Work runs one round.
func (w *ReconcileWorker) Work(ctx context.Context, _ *river.Job[ReconcileArgs]) error {
	client := river.ClientFromContext[pgx.Tx](ctx)
	pending, err := w.leadIDs(ctx, `
SELECT lead_id FROM idempotency_keys
WHERE state = 'needs_reconciliation'
ORDER BY updated_at LIMIT $1`)
	if err != nil {
		return err
	}
	for _, id := range pending {
		if err := w.settle(ctx, client, id); err != nil {
			return err
		}
	}

	orphans, err := w.leadIDs(ctx, `
SELECT k.lead_id FROM idempotency_keys k
WHERE k.state = 'processing'
  AND NOT EXISTS (
    SELECT FROM river_job j
    WHERE j.kind = 'process_lead'
      AND j.args @> jsonb_build_object('lead_id', k.lead_id)
      AND j.state IN ('available', 'pending', 'running', 'retryable', 'scheduled'))
ORDER BY k.updated_at LIMIT $1`)
	if err != nil {
		return err
	}
	for _, id := range orphans {
		if err := w.finishOrphan(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

func (w *ReconcileWorker) leadIDs(ctx context.Context, sql string) ([]uuid.UUID, error) {
	rows, err := w.cfg.Pool.Query(ctx, sql, reconcileBatch)
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	return ids, nil
}

// settle looks up one lead awaiting reconciliation.
func (w *ReconcileWorker) settle(ctx context.Context, client *river.Client[pgx.Tx], id uuid.UUID) error {
	l, err := w.leads.load(ctx, w.cfg.Pool, id)
	if err != nil {
		return err
	}
	attrs := []any{slog.String("lead_id", l.ID.String()), slog.String("ref", l.ExternalRef)}
	crmID, found, err := w.cfg.Downstream.LookupLead(ctx, l.ExternalRef)
	if err != nil {
		w.cfg.Metrics.reconciled("unresolved")
		w.cfg.Logger.WarnContext(ctx, "reconciliation look-up failed; left for the next round", append(attrs, slog.String("error", err.Error()))...)
		return nil
	}
	state, action := crmPending, "reposted"
	if found {
		state, action = crmAccepted, "found"
	}

	dctx, cancel := dbContext(ctx)
	defer cancel()
	tx, err := w.cfg.Pool.Begin(dctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(dctx) }()
	moved, err := intake.SetKeyStateTx(dctx, tx, l.Key, intake.StateNeedsReconciliation, intake.StateProcessing)
	if err != nil || !moved {
		return err
	}
	if _, err := tx.Exec(dctx, `UPDATE leads SET crm_state = $2, crm_id = coalesce($3, crm_id), updated_at = now() WHERE id = $1`,
		l.ID, state, nilIfEmpty(crmID)); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	if _, err := client.InsertTx(dctx, tx, ProcessLeadArgs{LeadID: l.ID}, nil); err != nil {
		return fmt.Errorf("reconcile: enqueue: %w", err)
	}
	if err := tx.Commit(dctx); err != nil {
		return fmt.Errorf("reconcile: commit: %w", err)
	}
	w.cfg.Metrics.reconciled(action)
	w.cfg.Logger.InfoContext(ctx, "lead reconciled", append(attrs, slog.String("action", action))...)
	return nil
}

// finishOrphan finishes a processing key whose job is gone, as its last
// attempt would have: completed when the CRM accepted the lead (the
// notification counted as failed unless it was recorded as sent),
// needs_reconciliation when a create may have been applied, and
// downstream_unavailable (which a retry re-opens) otherwise.
func (w *ReconcileWorker) finishOrphan(ctx context.Context, id uuid.UUID) error {
	l, err := w.leads.load(ctx, w.cfg.Pool, id)
	if err != nil {
		return err
	}
	var v *verdict
	switch l.CRMState {
	case crmAccepted:
		if l.NotifyOutcome == nil {
			failed := "failed"
			l.NotifyOutcome = &failed
		}
		score, tier := Score(&l.Submission, l.enriched())
		v, err = completedVerdict(l, score, tier)
	case crmUncertain:
		v = reconciliationVerdict()
	default:
		v, err = failedVerdict(l, intake.CodeDownstreamUnavailable,
			"the lead's processing ended without delivering it; retry with the same Idempotency-Key to try again")
	}
	if err != nil {
		return err
	}
	applied, err := w.finisher.finish(ctx, l, v, nil)
	if err != nil {
		return err
	}
	if applied {
		w.cfg.Metrics.reconciled("orphan_finished")
		w.cfg.Metrics.leadFinished(v.outcome)
		w.cfg.Logger.WarnContext(ctx, "lead finished by the reconciler: its job ended without a final response",
			slog.String("lead_id", l.ID.String()), slog.String("ref", l.ExternalRef), slog.String("outcome", v.outcome))
	}
	return nil
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
