package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
)

// CleanupArgs are the arguments of the periodic job that deletes expired
// keys.
type CleanupArgs struct{}

// Kind is the job's kind in River.
func (CleanupArgs) Kind() string { return "cleanup_keys" }

// InsertOpts puts the job on the maintenance queue, one round at a time.
func (CleanupArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: 3, UniqueOpts: oneRoundAtATime}
}

// Clean-up bounds: rows per DELETE, and DELETEs per run, so that one run
// never holds locks or runs for long; the next run continues.
const (
	cleanupBatch      = 1000
	cleanupMaxBatches = 100
)

// CleanupWorker deletes keys whose retention has passed, and erases the
// personal data of leads whose retention has passed, in bounded batches. A
// retry after a key's retention is a new submission (with the same external
// reference, so the CRM record is updated, not duplicated).
type CleanupWorker struct {
	river.WorkerDefaults[CleanupArgs]
	cfg Config
}

// NewCleanupWorker returns the worker.
func NewCleanupWorker(cfg Config) *CleanupWorker {
	return &CleanupWorker{cfg: cfg.withDefaults()}
}

// Work deletes expired keys, oldest first.
func (w *CleanupWorker) Work(ctx context.Context, _ *river.Job[CleanupArgs]) error {
	var total int64
	for range cleanupMaxBatches {
		n, err := w.cfg.Store.DeleteExpiredKeys(ctx, cleanupBatch)
		if err != nil {
			return err
		}
		total += n
		w.cfg.Metrics.keysDeleted(n)
		if n < cleanupBatch {
			break
		}
	}
	if total > 0 {
		w.cfg.Logger.InfoContext(ctx, "expired keys deleted", slog.Int64("count", total))
	}
	// Personal data: the leads finished LEAD_RETENTION ago are erased.
	var erased int64
	for range cleanupMaxBatches {
		n, err := w.cfg.Store.EraseFinishedBefore(ctx, time.Now().Add(-w.cfg.LeadRetention), cleanupBatch)
		if err != nil {
			return err
		}
		erased += n
		w.cfg.Metrics.leadsErased("retention", n)
		if n < cleanupBatch {
			break
		}
	}
	if erased > 0 {
		w.cfg.Logger.InfoContext(ctx, "personal data of finished leads erased (LEAD_RETENTION)", slog.Int64("count", erased))
	}
	// Callback deliveries that ended are kept as long as a finished key.
	for range cleanupMaxBatches {
		n, err := w.cfg.Store.DeleteOldCallbacks(ctx, time.Now().Add(-w.cfg.KeyRetention), cleanupBatch)
		if err != nil {
			return err
		}
		if n < cleanupBatch {
			break
		}
	}
	return nil
}
