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

// Clean-up bounds, by default: rows per statement, and statements of each
// kind per round, so that one round never holds locks or runs for long. A
// round that leaves work goes on at once (Config.CleanupBatch,
// CleanupBatches).
const (
	defaultCleanupBatch   = 1000
	defaultCleanupBatches = 100
)

// CleanupWorker deletes keys whose retention has passed, erases the
// personal data of leads whose retention has passed, deletes callback
// deliveries that ended long ago, and keys the hashes of keys kept before
// hashes were keyed, in bounded batches. A round that finds more left than
// its bound goes on at once (a snooze of zero: the same job, available
// again, so that rounds never overlap), so the clean-up keeps up with any
// rate of expiry rather than at most one bound per CLEANUP_INTERVAL. A
// retry after a key's retention is a new submission (with the same
// external reference, so the CRM record is updated, not duplicated).
type CleanupWorker struct {
	river.WorkerDefaults[CleanupArgs]
	cfg Config
}

// NewCleanupWorker returns the worker.
func NewCleanupWorker(cfg Config) *CleanupWorker {
	return &CleanupWorker{cfg: cfg.withDefaults()}
}

// Work runs one round: each kind of clean-up, oldest first, up to its
// bound; and goes on at once when any kind was left with more.
func (w *CleanupWorker) Work(ctx context.Context, _ *river.Job[CleanupArgs]) error {
	more := false
	batches := func(what string, step func() (int64, error), done func(int64)) error {
		var total int64
		for i := range w.cfg.CleanupBatches {
			n, err := step()
			if err != nil {
				return err
			}
			total += n
			done(n)
			if n < int64(w.cfg.CleanupBatch) {
				break
			}
			if i == w.cfg.CleanupBatches-1 {
				more = true
			}
		}
		if total > 0 && what != "" {
			w.cfg.Logger.InfoContext(ctx, what, slog.Int64("count", total))
		}
		return nil
	}
	if err := batches("expired keys deleted", func() (int64, error) {
		return w.cfg.Store.DeleteExpiredKeys(ctx, w.cfg.CleanupBatch)
	}, w.cfg.Metrics.keysDeleted); err != nil {
		return err
	}
	// Personal data: the leads finished LEAD_RETENTION ago are erased.
	if err := batches("personal data of finished leads erased (LEAD_RETENTION)", func() (int64, error) {
		return w.cfg.Store.EraseFinishedBefore(ctx, time.Now().Add(-w.cfg.LeadRetention), w.cfg.CleanupBatch)
	}, func(n int64) { w.cfg.Metrics.leadsErased("retention", n) }); err != nil {
		return err
	}
	// Callback deliveries that ended are kept as long as a finished key.
	if err := batches("", func() (int64, error) {
		return w.cfg.Store.DeleteOldCallbacks(ctx, time.Now().Add(-w.cfg.KeyRetention), w.cfg.CleanupBatch)
	}, func(int64) {}); err != nil {
		return err
	}
	// Keys kept before their hashes were keyed get keyed ones.
	if len(w.cfg.HashKey) > 0 {
		if err := batches("plain request hashes keyed", func() (int64, error) {
			return w.cfg.Store.KeyPlainHashes(ctx, w.cfg.HashKey.Digest, w.cfg.CleanupBatch)
		}, func(int64) {}); err != nil {
			return err
		}
	}
	if more {
		return river.JobSnooze(0)
	}
	return nil
}
