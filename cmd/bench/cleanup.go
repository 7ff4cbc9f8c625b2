package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/leadintake/leadintake/jobs"
)

const cleanupMethod = "the worker's own clean-up job (jobs.CleanupArgs, kind cleanup_keys) inserted by this " +
	"process with River's client and worked by the running worker, one round after the other until no " +
	"expired key is left (a round deletes a bounded number of keys); seconds runs from the first insert " +
	"to the last round seen finished, work_seconds adds up each round's attempted_at to finalized_at. " +
	"Meanwhile new claims are POSTed at a fixed rate (open loop), as they are before the clean-up " +
	"(claims_without), with the worker processing their leads both times"

// cleanupRound is one run of the clean-up job.
type cleanupRound struct {
	JobID int64 `json:"job_id"`
	// Seconds: the job's attempted_at to its finalized_at.
	Seconds float64 `json:"seconds"`
	// Deleted: the count of the worker's "expired keys deleted" log line
	// for the round (0 when it logged none).
	Deleted int64 `json:"deleted"`
}

// cleanupResult is the clean-up phase of `bench scale`.
type cleanupResult struct {
	// Rows: finished keys not expired in the table beside the expired
	// ones.
	Rows        int     `json:"rows"`
	Expired     int     `json:"expired"`
	SeedSeconds float64 `json:"seed_seconds"`
	// Seconds: from inserting the first round's job to seeing the last
	// round finished.
	Seconds     float64        `json:"seconds"`
	WorkSeconds float64        `json:"work_seconds"`
	Rounds      []cleanupRound `json:"rounds"`
	Deleted     int            `json:"deleted"`
	Left        int            `json:"left"`
	KeysPerS    float64        `json:"keys_per_s"`
	// Rate is the paced new claims' rate; Without and During their POST
	// latency (answered 202) without the clean-up and while it runs.
	Rate          float64      `json:"claims_rate"`
	Without       latencyStats `json:"claims_without"`
	WithoutErrors int          `json:"claims_without_errors"`
	During        latencyStats `json:"claims_during"`
	DuringErrors  int          `json:"claims_during_errors"`
	// P99Factor is During's p99 ÷ Without's.
	P99Factor float64 `json:"claims_p99_factor"`
	CPU       cpuUse  `json:"cpu_cores_during"`
	Method    string  `json:"method"`
}

func runCleanupPhase(ctx context.Context, o *scaleOptions, s *stack, lg *loadGen, sd *seeder, run string, warn func(string, ...any)) (*cleanupResult, error) {
	c := &cleanupResult{Expired: o.expired, Rate: o.rate, Method: cleanupMethod}
	fmt.Printf("clean-up: seeding %d expired keys and their leads...\n", o.expired)
	start := time.Now()
	if err := sd.seed(ctx, seedExpired, 1, o.expired); err != nil {
		return nil, err
	}
	c.SeedSeconds = time.Since(start).Seconds()
	if err := sd.vacuum(ctx); err != nil {
		return nil, err
	}
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE state = 'completed' AND expires_at > now()`).Scan(&c.Rows); err != nil {
		return nil, err
	}

	rc, err := river.NewClient(riverpgxv5.New(s.pool), &river.Config{})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	// The worker ran its clean-up when it started; if a round is still
	// under way (or the hourly one came), the figures wait for its end.
	if err := waitNoCleanup(ctx, rc); err != nil {
		return nil, err
	}

	paced := func(name string, d time.Duration, until <-chan struct{}) (latencyStats, int) {
		var (
			mu   sync.Mutex
			lat  []time.Duration
			errs int
		)
		openLoop(ctx, o.rate, d, until, func(ctx context.Context, i int) {
			a, err := lg.post(ctx, fmt.Sprintf("cleanup-%s-%s-%d", run, name, i), readNothing)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || a.status != 202 || a.replayed != "false" {
				errs++
				return
			}
			lat = append(lat, a.latency)
		})
		return statsOf(lat), errs
	}
	fmt.Printf("clean-up: new claims at %.0f/s for %s without it...\n", o.rate, o.baseline)
	c.Without, c.WithoutErrors = paced("without", o.baseline, nil)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	fmt.Printf("clean-up: running it, with new claims at %.0f/s meanwhile...\n", o.rate)
	done := make(chan struct{})
	var roundsErr error
	before := takeCPU(benchPIDs()...)
	go func() {
		defer close(done)
		roundsErr = cleanupRounds(ctx, s, rc, c)
	}()
	c.During, c.DuringErrors = paced("during", 2*time.Hour, done)
	<-done
	after := takeCPU(benchPIDs()...)
	if roundsErr != nil {
		return nil, roundsErr
	}
	c.CPU = cpuBetween(before, after, apiPID, workerPID)
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE expires_at <= now()`).Scan(&c.Left); err != nil {
		return nil, err
	}
	c.Deleted = c.Expired - c.Left
	if c.Seconds > 0 {
		c.KeysPerS = float64(c.Deleted) / c.Seconds
	}
	if c.Without.P99Ms > 0 {
		c.P99Factor = c.During.P99Ms / c.Without.P99Ms
	}
	if c.Left > 0 {
		warn("clean-up: %d expired keys left", c.Left)
	}
	if c.During.N < 100 {
		warn("clean-up: only %d claims were sent while it ran: too few for a p99 (seed more expired keys)", c.During.N)
	}
	if c.WithoutErrors > 0 || c.DuringErrors > 0 {
		warn("clean-up: %d claims failed without it, %d during it", c.WithoutErrors, c.DuringErrors)
	}
	if _, err := s.waitFinished(ctx, 5*time.Minute); err != nil {
		return nil, fmt.Errorf("clean-up: the claims' leads: %w", err)
	}
	fmt.Printf("clean-up: %d keys in %.1f s, %d rounds; claims p99 %.2f ms without, %.2f ms during\n",
		c.Deleted, c.Seconds, len(c.Rounds), c.Without.P99Ms, c.During.P99Ms)
	return c, nil
}

// cleanupRounds inserts the clean-up job and waits for it, again and again,
// until no expired key is left, and records each round in c.
func cleanupRounds(ctx context.Context, s *stack, rc *river.Client[pgx.Tx], c *cleanupResult) error {
	start := time.Now()
	for round := 1; ; round++ {
		from := len(s.worker.Lines())
		ins, err := rc.Insert(ctx, jobs.CleanupArgs{}, nil)
		if err != nil {
			return fmt.Errorf("clean-up round %d: insert: %w", round, err)
		}
		job, err := waitJob(ctx, rc, ins.Job.ID, 30*time.Minute)
		if err != nil {
			return fmt.Errorf("clean-up round %d: %w", round, err)
		}
		c.Seconds = time.Since(start).Seconds()
		r := cleanupRound{JobID: job.ID, Deleted: deletedLogged(s.worker.Lines()[from:])}
		if job.AttemptedAt != nil && job.FinalizedAt != nil {
			r.Seconds = job.FinalizedAt.Sub(*job.AttemptedAt).Seconds()
		}
		c.Rounds = append(c.Rounds, r)
		c.WorkSeconds += r.Seconds
		var left bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM idempotency_keys WHERE expires_at <= now())`).Scan(&left); err != nil {
			return err
		}
		if !left {
			return nil
		}
		if r.Deleted == 0 {
			return fmt.Errorf("clean-up round %d deleted nothing, and expired keys are left", round)
		}
	}
}

// waitNoCleanup waits until no clean-up job is waiting or running.
func waitNoCleanup(ctx context.Context, rc *river.Client[pgx.Tx]) error {
	deadline := time.Now().Add(30 * time.Minute)
	for {
		list, err := rc.JobList(ctx, river.NewJobListParams().Kinds(jobs.CleanupArgs{}.Kind()).
			States(rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
				rivertype.JobStateRetryable, rivertype.JobStateScheduled).First(1))
		if err != nil {
			return fmt.Errorf("clean-up jobs: %w", err)
		}
		if len(list.Jobs) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("a clean-up job of the worker's own did not end within 30 minutes")
		}
		sleepCtx(ctx, 100*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// waitJob polls River for the job until it is finalized, and returns it if
// it completed.
func waitJob(ctx context.Context, rc *river.Client[pgx.Tx], id int64, timeout time.Duration) (*rivertype.JobRow, error) {
	deadline := time.Now().Add(timeout)
	for {
		job, err := rc.JobGet(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("job %d: %w", id, err)
		}
		switch job.State {
		case rivertype.JobStateCompleted:
			return job, nil
		case rivertype.JobStateDiscarded, rivertype.JobStateCancelled, rivertype.JobStateRetryable:
			return nil, fmt.Errorf("job %d: %s: %v", id, job.State, job.Errors)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("job %d still %s after %s", id, job.State, timeout)
		}
		sleepCtx(ctx, 20*time.Millisecond)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// deletedLogged adds up the counts of the worker's "expired keys deleted"
// log lines.
func deletedLogged(lines []string) int64 {
	var n int64
	for _, l := range lines {
		var e struct {
			Msg   string `json:"msg"`
			Count int64  `json:"count"`
		}
		if json.Unmarshal([]byte(l), &e) == nil && e.Msg == "expired keys deleted" {
			n += e.Count
		}
	}
	return n
}
