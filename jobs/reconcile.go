package jobs

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// oneRoundAtATime keeps a periodic job from overlapping itself: while one is
// waiting, running or waiting for a retry, another is not inserted, whatever
// the number of workers or a change of leader.
var oneRoundAtATime = river.UniqueOpts{ByState: []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
	rivertype.JobStateRetryable, rivertype.JobStateScheduled,
}}

// ReconcileArgs are the arguments of the periodic job that looks up the keys
// awaiting reconciliation.
type ReconcileArgs struct{}

// Kind is the job's kind in River.
func (ReconcileArgs) Kind() string { return "reconcile_keys" }

// InsertOpts puts the job on the maintenance queue, one round at a time.
func (ReconcileArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: 3, UniqueOpts: oneRoundAtATime}
}

// Bounds of a reconciliation round: the keys it takes, and how many are
// looked up at once. Each key is settled on its own: a look-up that hangs
// holds one of the places until the downstream time-out, and no other key.
const (
	reconcileBatch    = 100
	reconcileParallel = 8
)

// ReconcileWorker looks up, in the CRM, the keys awaiting reconciliation (a
// post in create mode may have been applied and no attempt could settle
// it). A record found is the CRM's acceptance: the lead resumes at its
// notification and completes. A definite 404 lets the lead be posted again.
// Anything else (a failed look-up, a lead that cannot be read) moves the
// key to the back of the line, for the next round and for an operator.
type ReconcileWorker struct {
	river.WorkerDefaults[ReconcileArgs]
	cfg Config
}

// NewReconcileWorker returns the worker.
func NewReconcileWorker(cfg Config) *ReconcileWorker {
	return &ReconcileWorker{cfg: cfg.withDefaults()}
}

// Work runs one round. The keys a round does not reach in its time wait for
// the next; a failure of one key never fails the round.
func (w *ReconcileWorker) Work(ctx context.Context, _ *river.Job[ReconcileArgs]) error {
	refs, err := w.cfg.Store.AwaitingReconciliation(ctx, reconcileBatch)
	if err != nil {
		return err
	}
	var g errgroup.Group
	g.SetLimit(reconcileParallel)
	for _, ref := range refs {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			w.settle(ctx, ref)
			return nil
		})
	}
	return g.Wait()
}

// settle looks one key up and acts on the answer.
func (w *ReconcileWorker) settle(ctx context.Context, ref store.KeyRef) {
	attrs := []any{slog.String("lead_id", ref.LeadID.String())}
	postpone := func(msg string, err error) {
		w.cfg.Metrics.reconciled("unresolved")
		w.cfg.Logger.WarnContext(ctx, msg, append(attrs, slog.String("error", errString(err)))...)
		dctx, cancel := dbContext(ctx)
		defer cancel()
		if err := w.cfg.Store.PostponeReconciliation(dctx, ref); err != nil {
			w.cfg.Logger.ErrorContext(ctx, "reconciliation: could not postpone the key", append(attrs, slog.String("error", err.Error()))...)
		}
	}

	// The look-up and the resumed job continue the lead's trace.
	dctx, cancel := dbContext(ctx)
	tp, err := w.cfg.Store.LeadTraceParent(dctx, ref.LeadID)
	cancel()
	if err == nil {
		var span trace.Span
		ctx, span = leadSpan(ctx, tp, "reconcile lead",
			attribute.String("lead_id", ref.LeadID.String()), attribute.String("client_id", ref.ClientID))
		defer span.End()
	}
	dctx, cancel = dbContext(ctx)
	l, err := w.cfg.Store.Lead(dctx, ref.LeadID)
	cancel()
	if err != nil {
		postpone("reconciliation: the lead cannot be read; left for a later round", err)
		return
	}
	attrs = append(attrs, slog.String("ref", l.ExternalRef))
	if l.KeyState.State != lead.KeyNeedsReconciliation {
		return // settled meanwhile
	}
	crm, _, err := w.cfg.Destinations.CRM(cmp.Or(l.State.CRMDestination, w.cfg.Destinations.Set().CRMOf(l.ClientID)))
	if err != nil {
		postpone("reconciliation: the lead's CRM is not configured; left for a later round", err)
		return
	}
	rec := &destination.Record{LeadID: l.ID.String(), ExternalRef: l.ExternalRef, Lead: &l.Lead, Prepared: l.State.CRMPrepared}
	crmID, found, err := crm.Lookup(ctx, rec)
	if err == nil && !found && !crm.Capabilities().ConsistentLookup {
		err = errors.New("not found by a look-up that may lag behind the write")
	}
	if err != nil {
		postpone("reconciliation look-up failed; left for a later round", err)
		return
	}
	action := "reposted"
	if found {
		action = "found"
	}
	dctx, cancel = dbContext(ctx)
	defer cancel()
	resumed, err := w.cfg.Store.Resume(dctx, l, lead.Settle(l.State, found, crmID))
	if err != nil {
		postpone("reconciliation: the lead could not be resumed", err)
		return
	}
	if resumed {
		w.cfg.Metrics.reconciled(action)
		w.cfg.Logger.InfoContext(ctx, "lead reconciled", append(attrs, slog.String("action", action))...)
	}
}

// FinishOrphansArgs are the arguments of the periodic job that finishes the
// keys whose job ended without a final response.
type FinishOrphansArgs struct{}

// Kind is the job's kind in River.
func (FinishOrphansArgs) Kind() string { return "finish_orphans" }

// InsertOpts puts the job on the maintenance queue, one round at a time.
func (FinishOrphansArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: 3, UniqueOpts: oneRoundAtATime}
}

// orphanPage is how many processing keys are checked against River at once.
const orphanPage = 500

// liveJobStates are the states of a job that will still run.
var liveJobStates = []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
	rivertype.JobStateRetryable, rivertype.JobStateScheduled,
}

// FinishOrphansWorker finishes the keys still processing whose job ended
// without a final response (the rescuer discarded it after a crash on its
// last attempt, an operator cancelled or deleted it, River's retention
// removed it), as that last attempt would have (lead.Abandoned), so that no
// key stays processing forever. It asks River about each lead's job, by the
// id recorded at its claim.
type FinishOrphansWorker struct {
	river.WorkerDefaults[FinishOrphansArgs]
	cfg Config
}

// NewFinishOrphansWorker returns the worker.
func NewFinishOrphansWorker(cfg Config) *FinishOrphansWorker {
	return &FinishOrphansWorker{cfg: cfg.withDefaults()}
}

// Work walks through every processing key, a page at a time.
func (w *FinishOrphansWorker) Work(ctx context.Context, _ *river.Job[FinishOrphansArgs]) error {
	client := river.ClientFromContext[pgx.Tx](ctx)
	var cursor store.UnfinishedCursor
	now := time.Now()
	for ctx.Err() == nil {
		page, next, err := w.cfg.Store.Processing(ctx, now, cursor, orphanPage)
		if err != nil || len(page) == 0 {
			return err
		}
		cursor = next
		var ids []int64
		for _, u := range page {
			if u.JobID != nil {
				ids = append(ids, *u.JobID)
			}
		}
		live := map[int64]bool{}
		if len(ids) > 0 {
			res, err := client.JobList(ctx, river.NewJobListParams().IDs(ids...).States(liveJobStates...).First(len(ids)))
			if err != nil {
				return err
			}
			for _, j := range res.Jobs {
				live[j.ID] = true
			}
		}
		for _, u := range page {
			if u.JobID == nil || !live[*u.JobID] {
				w.finish(ctx, u)
			}
		}
	}
	return nil
}

// finish ends one orphan, unless it changed since it was read.
func (w *FinishOrphansWorker) finish(ctx context.Context, u store.Unfinished) {
	dctx, cancel := dbContext(ctx)
	defer cancel()
	attrs := []any{slog.String("lead_id", u.Run.LeadID.String())}
	l, err := w.cfg.Store.Lead(dctx, u.Run.LeadID)
	if err != nil {
		w.cfg.Logger.WarnContext(ctx, "orphan: the lead cannot be read", append(attrs, slog.String("error", err.Error()))...)
		return
	}
	if l.KeyState.State != lead.KeyProcessing || l.Run != u.Run {
		return // a run started, or the key changed, since the page was read
	}
	act, s := lead.Abandoned(l.State)
	f := finishOf(l, s, act, "the lead's processing ended without delivering it; retry with the same Idempotency-Key to try again", w.cfg.KeyRetention)
	done, err := w.cfg.Store.Finish(dctx, f)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			w.cfg.Logger.ErrorContext(ctx, "orphan: could not finish the lead", append(attrs, slog.String("error", err.Error()))...)
		}
		return
	}
	if done.Applied {
		w.cfg.Metrics.reconciled("orphan_finished")
		w.cfg.Metrics.leadFinished(outcomeOf(act))
		w.cfg.Logger.WarnContext(ctx, "lead finished by the reconciler: its job ended without a final response",
			append(attrs, slog.String("ref", l.ExternalRef), slog.String("outcome", outcomeOf(act)))...)
	}
}
