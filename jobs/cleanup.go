package jobs

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
)

// CleanupArgs are the arguments of the periodic job that deletes expired
// keys.
type CleanupArgs struct{}

// Kind is the job's kind in River.
func (CleanupArgs) Kind() string { return "cleanup_keys" }

// InsertOpts puts the job on the maintenance queue.
func (CleanupArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: 3}
}

// QueueMaintenance is the queue of the periodic jobs, apart from the leads.
const QueueMaintenance = "maintenance"

// Clean-up bounds: rows per DELETE, and DELETEs per run, so that one run
// never holds locks or runs for long; the next run continues.
const (
	cleanupBatch      = 1000
	cleanupMaxBatches = 100
)

// CleanupWorker deletes keys whose retention has passed, in bounded batches.
// A retry after that is a new submission (with the same external reference,
// so the CRM record is updated, not duplicated).
type CleanupWorker struct {
	river.WorkerDefaults[CleanupArgs]
	pool    *pgxpool.Pool
	logger  *slog.Logger
	metrics *Metrics
}

// NewCleanupWorker returns the worker.
func NewCleanupWorker(cfg Config) *CleanupWorker {
	cfg = cfg.withDefaults()
	return &CleanupWorker{pool: cfg.Pool, logger: cfg.Logger, metrics: cfg.Metrics}
}

// Work deletes expired keys, oldest first.
func (w *CleanupWorker) Work(ctx context.Context, _ *river.Job[CleanupArgs]) error {
	var total int64
	for range cleanupMaxBatches {
		tag, err := w.pool.Exec(ctx, `
DELETE FROM idempotency_keys
WHERE (client_id, key) IN (
    SELECT client_id, key FROM idempotency_keys
    WHERE expires_at <= now()
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED)`, cleanupBatch)
		if err != nil {
			return fmt.Errorf("delete expired keys: %w", err)
		}
		total += tag.RowsAffected()
		w.metrics.keysDeleted(tag.RowsAffected())
		if tag.RowsAffected() < cleanupBatch {
			break
		}
	}
	if total > 0 {
		w.logger.InfoContext(ctx, "expired keys deleted", slog.Int64("count", total))
	}
	return nil
}
