package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leadintake/leadintake/internal/scratchdb"
	"github.com/leadintake/leadintake/internal/system"
)

// scaleOptions are the flags of `bench scale`.
type scaleOptions struct {
	rows                                        []int
	expired, clients, chunk, replaySample       int
	duration, warmup, system, baseline, maxWait time.Duration
	rate, maxLoad                               float64
	out, serverURL                              string
}

func parseScaleFlags(args []string) (*scaleOptions, error) {
	o := &scaleOptions{}
	fs := flag.NewFlagSet("bench scale", flag.ContinueOnError)
	rows := fs.String("rows", "10000,1000000,10000000", "finished keys (each with its lead) in the tables at each step, ascending")
	fs.IntVar(&o.expired, "expired", 1000000, "expired keys the clean-up deletes, seeded after the last step (0: no clean-up phase)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of the claims and replays phases of each step")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load before each closed-loop phase")
	fs.DurationVar(&o.system, "system", 30*time.Second, "length of the whole-system phase of each step")
	fs.IntVar(&o.clients, "clients", 32, "concurrent clients of the closed-loop phases")
	fs.Float64Var(&o.rate, "rate", 100, "new claims per second sent during the clean-up, and without it")
	fs.DurationVar(&o.baseline, "cleanup-baseline", 15*time.Second, "length of the paced claims without the clean-up")
	fs.IntVar(&o.chunk, "seed-chunk", 250000, "rows per seeding statement")
	fs.IntVar(&o.replaySample, "replay-sample", 200000, "seeded keys drawn at random for the replays phase (all of them when fewer)")
	fs.StringVar(&o.out, "out", "bench-scale.json", "where to write the results as JSON")
	fs.StringVar(&o.serverURL, "db", "", "PostgreSQL server URL (default TEST_DATABASE_URL, else DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres)")
	fs.Float64Var(&o.maxLoad, "max-load", 0, "wait until the 1-minute load average is below this and no test runs (0: do not wait, only warn)")
	fs.DurationVar(&o.maxWait, "max-wait", 20*time.Minute, "longest wait for -max-load")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("bench scale: unexpected argument %q", fs.Arg(0))
	}
	for _, f := range strings.Split(*rows, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-rows: %q is not a positive number", f)
		}
		if len(o.rows) > 0 && n <= o.rows[len(o.rows)-1] {
			return nil, errors.New("-rows must ascend: each step adds rows to the last")
		}
		o.rows = append(o.rows, n)
	}
	if len(o.rows) == 0 {
		return nil, errors.New("-rows: no step")
	}
	if o.expired < 0 || o.clients < 1 || o.chunk < 1 || o.replaySample < 1 || o.rate <= 0 ||
		o.duration <= 0 || o.system <= 0 || o.baseline <= 0 {
		return nil, errors.New("-clients, -seed-chunk, -replay-sample, -rate, -duration, -system and -cleanup-baseline must be positive, -expired at least 0")
	}
	if o.serverURL == "" {
		o.serverURL = scratchdb.ServerURL(os.Getenv)
	}
	return o, nil
}

// scaleResults is the JSON document of `bench scale`.
type scaleResults struct {
	Date    time.Time `json:"date"`
	Command string    `json:"command"`
	Machine machine   `json:"machine"`
	Flags   struct {
		Rows            []int   `json:"rows"`
		Expired         int     `json:"expired"`
		Duration        string  `json:"duration"`
		System          string  `json:"system"`
		Clients         int     `json:"clients"`
		Rate            float64 `json:"rate"`
		CleanupBaseline string  `json:"cleanup_baseline"`
	} `json:"flags"`
	// Seeding says what the seeded rows are.
	Seeding string         `json:"seeding"`
	Steps   []scaleStep    `json:"steps"`
	Cleanup *cleanupResult `json:"cleanup,omitempty"`
	RSS     struct {
		APIPeakMiB    float64 `json:"api_peak_mib"`
		WorkerPeakMiB float64 `json:"worker_peak_mib"`
	} `json:"rss"`
	LoadEnd  [3]float64 `json:"load_at_end"`
	Warnings []string   `json:"warnings,omitempty"`
}

const seedingDescription = "copies of a key and lead finished by the real worker (the bench body, completed, " +
	"stored 201 response): random UUID keys, UUIDv7 lead ids, their own CRM ids, external references, " +
	"email HMACs, finished_at spread at random over the last 160 h (expired keys: 169 to 669 h ago); " +
	"inserted in chunks by INSERT ... SELECT generate_series, then VACUUM ANALYZE and CHECKPOINT. " +
	"River's table holds only the bench's own jobs (no completed jobs of the seeded leads)"

// scaleStep is the phases run with rows finished keys in the tables.
type scaleStep struct {
	// Rows: finished keys, each with its lead, in the tables when the
	// step's phases began (Seeded of them seeded for this step, the rest
	// left by earlier steps).
	Rows        int     `json:"rows"`
	Seeded      int     `json:"seeded"`
	SeedSeconds float64 `json:"seed_seconds"`
	// VacuumSeconds: VACUUM ANALYZE and CHECKPOINT after seeding.
	VacuumSeconds float64 `json:"vacuum_seconds"`
	// The tables' total size (indexes and TOAST included) after seeding.
	KeysMiB  float64 `json:"keys_table_mib"`
	LeadsMiB float64 `json:"leads_table_mib"`
	// Claims: new keys, worker stopped, answered 202.
	Claims *loadResult `json:"claims"`
	// Replays: seeded keys drawn at random over the whole table, answered
	// 201, replayed, with the stored body byte for byte.
	Replays       *loadResult   `json:"replays"`
	ReplayKeys    int           `json:"replay_keys"`
	System        *systemResult `json:"system"`
	WorkerPeakMiB float64       `json:"worker_peak_mib"`
}

func runScale(ctx context.Context, args []string) error {
	o, err := parseScaleFlags(args)
	if err != nil {
		return err
	}
	var res scaleResults
	res.Date = time.Now().UTC().Truncate(time.Second)
	res.Command = strings.TrimSpace("go run ./cmd/bench scale " + strings.Join(args, " "))
	res.Flags.Rows, res.Flags.Expired, res.Flags.Clients, res.Flags.Rate = o.rows, o.expired, o.clients, o.rate
	res.Flags.Duration, res.Flags.System, res.Flags.CleanupBaseline = o.duration.String(), o.system.String(), o.baseline.String()
	res.Seeding = seedingDescription

	warn := warner(&res.Warnings)
	machine, bins, removeBins, err := prepare(ctx, o.serverURL, o.maxLoad, o.maxWait, warn)
	if err != nil {
		return err
	}
	defer removeBins()
	res.Machine = machine
	if err := runScaleSteps(ctx, o, bins, &res, warn); err != nil {
		return err
	}
	if tests := busyTests(); len(tests) > 0 {
		warn("at end: tests running %v: the figures are not reliable", tests)
	}
	res.LoadEnd = loadAvg()
	printScaleSummary(&res)
	return writeResults(o.out, &res)
}

func runScaleSteps(ctx context.Context, o *scaleOptions, bins *system.Binaries, res *scaleResults, warn func(string, ...any)) error {
	s, closeStack, err := openStack(ctx, o.serverURL, "leadintake_bench_scale_", 4, bins, nil)
	if err != nil {
		return err
	}
	defer closeStack()
	pool, dbURL := s.pool, s.dbURL
	if err := s.startWorker(ctx); err != nil {
		return err
	}
	fmt.Printf("api pid %d on %s, worker pid %d\n", apiPID, s.apiURL, workerPID)
	lg := newLoadGen(s.apiURL, s.token, []byte(benchBody), o.clients)
	run := randomHex(3)

	// A few leads through the real worker: they warm it up, and the first
	// completed one is the template of every seeded row.
	warmKeys := make([]string, 2*o.clients)
	for i := range warmKeys {
		warmKeys[i] = fmt.Sprintf("warm-%s-%d", run, i)
	}
	if _, _, errs := submitAll(ctx, lg, warmKeys, o.clients); errs > 0 {
		return fmt.Errorf("warm-up: %d submissions failed", errs)
	}
	if _, err := s.waitFinished(ctx, time.Minute); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	var tmpl seedTemplate
	if err := pool.QueryRow(ctx, `
SELECT key FROM idempotency_keys WHERE client_id = $1 AND key = ANY($2) AND state = 'completed' AND response_status = 201
ORDER BY key LIMIT 1`, benchClient, warmKeys).Scan(&tmpl.Key); err != nil {
		return fmt.Errorf("the seeding template: no completed warm-up key: %w", err)
	}
	sd, err := newSeeder(ctx, dbURL, tmpl, o.chunk)
	if err != nil {
		return err
	}
	defer sd.close(ctx)

	workerRSS, err := s.stopWorker()
	if err != nil {
		return err
	}
	seeded := 0 // live seeded keys, numbered 1..seeded
	for i, rows := range o.rows {
		step := scaleStep{}
		var have int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE state = 'completed'`).Scan(&have); err != nil {
			return err
		}
		if need := rows - have; need > 0 {
			fmt.Printf("step %d: seeding %d finished keys and leads (to %d)...\n", i+1, need, rows)
			start := time.Now()
			if err := sd.seed(ctx, seedLive, seeded+1, need); err != nil {
				return err
			}
			step.SeedSeconds = time.Since(start).Seconds()
			seeded += need
			step.Seeded = need
		}
		start := time.Now()
		if err := sd.vacuum(ctx); err != nil {
			return err
		}
		step.VacuumSeconds = time.Since(start).Seconds()
		if err := pool.QueryRow(ctx, `
SELECT count(*), pg_total_relation_size('idempotency_keys') / 1048576.0, pg_total_relation_size('leads') / 1048576.0
FROM idempotency_keys WHERE state = 'completed'`).Scan(&step.Rows, &step.KeysMiB, &step.LeadsMiB); err != nil {
			return err
		}
		fmt.Printf("step %d: %d finished keys (keys table %.0f MiB, leads table %.0f MiB)\n", i+1, step.Rows, step.KeysMiB, step.LeadsMiB)

		fmt.Printf("  claims: %d clients, %s (worker stopped)...\n", o.clients, o.duration)
		step.Claims = closedLoop(ctx, o.clients, o.warmup, o.duration,
			func(ctx context.Context, w, i int) (answer, error) {
				return lg.post(ctx, fmt.Sprintf("claim-%s-%d-%d-%d", run, rows, w, i), readNothing)
			},
			func(a answer) bool { return a.status == 202 && a.replayed == "false" }, nil)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The claims' keys, leads and jobs go, so that the worker starts on
		// an empty queue and the step's tables hold finished keys only.
		if err := deleteUnfinished(ctx, pool); err != nil {
			return err
		}
		if err := sd.vacuum(ctx); err != nil {
			return err
		}

		if err := s.restartWorker(ctx); err != nil {
			return err
		}
		keys := drawKeys(seeded, o.replaySample)
		stored, err := storedBodies(ctx, pool, keys)
		if err != nil {
			return err
		}
		if len(stored) != len(keys) {
			return fmt.Errorf("replays: %d of %d drawn keys found finished with 201", len(stored), len(keys))
		}
		step.ReplayKeys = len(keys)
		fmt.Printf("  replays: %d clients, %s, over %d seeded keys drawn at random (worker running, idle)...\n", o.clients, o.duration, len(keys))
		step.Replays = closedLoop(ctx, o.clients, o.warmup, o.duration,
			func(ctx context.Context, w, i int) (answer, error) {
				return lg.post(ctx, keys[(i*o.clients+w)%len(keys)], readBody)
			},
			func(a answer) bool {
				return a.status == 201 && a.replayed == "true" && bytes.Equal(a.body, stored[a.key])
			}, nil)
		if ctx.Err() != nil {
			return ctx.Err()
		}

		fmt.Printf("  system: %d clients posting new leads for %s, worker running...\n", o.clients, o.system)
		if step.System, err = runSystemPhase(ctx, s, lg, fmt.Sprintf("system-%s-%d", run, rows), o.clients, o.warmup, o.system); err != nil {
			return err
		}
		if sys := step.System; sys.Failed > 0 || sys.WindowClaimsCompleted != sys.Claims.Requests {
			warn("step %d system: %d leads failed in the window; %d of the window's %d claims completed", i+1, sys.Failed, sys.WindowClaimsCompleted, sys.Claims.Requests)
		}
		printScaleStep(&step)
		last := i == len(o.rows)-1
		if !last || o.expired == 0 {
			rss, err := s.stopWorker()
			if err != nil {
				return err
			}
			step.WorkerPeakMiB = rss
			workerRSS = max(workerRSS, rss)
		}
		res.Steps = append(res.Steps, step)
	}

	if o.expired > 0 {
		c, err := runCleanupPhase(ctx, o, s, lg, sd, run, warn)
		if err != nil {
			return err
		}
		res.Cleanup = c
		rss, err := s.stopWorker()
		if err != nil {
			return err
		}
		res.Steps[len(res.Steps)-1].WorkerPeakMiB = max(res.Steps[len(res.Steps)-1].WorkerPeakMiB, rss)
		workerRSS = max(workerRSS, rss)
	}
	res.RSS.APIPeakMiB = peakRSSMiB(apiPID)
	res.RSS.WorkerPeakMiB = workerRSS
	return nil
}

// deleteUnfinished deletes the keys not finished, with their leads, and
// River's jobs (the worker is stopped: only the claims' jobs wait there).
func deleteUnfinished(ctx context.Context, pool *pgxpool.Pool) error {
	rows, err := pool.Query(ctx, `DELETE FROM idempotency_keys WHERE state IN ('processing', 'needs_reconciliation') RETURNING lead_id`)
	if err != nil {
		return fmt.Errorf("delete the claims: %w", err)
	}
	var ids [][16]byte
	for rows.Next() {
		var id [16]byte
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("delete the claims: %w", err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM leads WHERE id = ANY($1::uuid[])`, ids); err != nil {
		return fmt.Errorf("delete the claims' leads: %w", err)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		return fmt.Errorf("delete the claims' jobs: %w", err)
	}
	return nil
}

// drawKeys draws up to k of the live seeded keys 1..n at random, without
// repeats, in random order.
func drawKeys(n, k int) []string {
	var nums []int
	if k >= n {
		nums = rand.Perm(n)
		for i := range nums {
			nums[i]++
		}
	} else {
		seen := make(map[int]bool, k)
		for len(nums) < k {
			x := 1 + rand.IntN(n)
			if !seen[x] {
				seen[x] = true
				nums = append(nums, x)
			}
		}
	}
	keys := make([]string, len(nums))
	for i, x := range nums {
		keys[i] = seedKey(seedLive.prefix, x)
	}
	return keys
}

// storedBodies reads the stored 201 bodies of keys.
func storedBodies(ctx context.Context, pool *pgxpool.Pool, keys []string) (map[string][]byte, error) {
	stored := make(map[string][]byte, len(keys))
	rows, err := pool.Query(ctx, `SELECT key, response_body FROM idempotency_keys WHERE client_id = $1 AND key = ANY($2) AND response_status = 201`,
		benchClient, keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var b []byte
		if err := rows.Scan(&k, &b); err != nil {
			return nil, err
		}
		stored[k] = b
	}
	return stored, rows.Err()
}

func printScaleStep(st *scaleStep) {
	fmt.Printf("  %d rows: claims %.0f/s (p99 %.2f ms), replays %.0f/s (p99 %.2f ms), whole system %.0f completed/s (backlog at the end %d, drained in %.1f s)\n",
		st.Rows, st.Claims.PerS, st.Claims.P99Ms, st.Replays.PerS, st.Replays.P99Ms,
		st.System.CompletedPerS, st.System.BacklogEnd, st.System.DrainSeconds)
}

func printScaleSummary(r *scaleResults) {
	fmt.Println()
	fmt.Printf("leadintake bench scale, %s, %d CPUs (%s), %s, %s\n", r.Date.Format(time.RFC3339), r.Machine.NProc,
		r.Machine.CPUModel, r.Machine.Postgres, r.Machine.Go)
	fmt.Printf("load average at start %.2f, at end %.2f\n", r.Machine.LoadAtStart[0], r.LoadEnd[0])
	fmt.Printf("  %10s  %9s  %9s  %20s  %20s  %22s  %s\n", "rows", "keys MiB", "leads MiB", "new claims /s (p99)", "replays /s (p99)", "whole system /s", "backlog at end, drain")
	for _, st := range r.Steps {
		fmt.Printf("  %10d  %9.0f  %9.0f  %10.0f (%6.2f ms)  %10.0f (%6.2f ms)  %22.0f  %d, %.1f s\n",
			st.Rows, st.KeysMiB, st.LeadsMiB, st.Claims.PerS, st.Claims.P99Ms, st.Replays.PerS, st.Replays.P99Ms,
			st.System.CompletedPerS, st.System.BacklogEnd, st.System.DrainSeconds)
		for _, l := range []*loadResult{st.Claims, st.Replays, st.System.Claims} {
			if l.FirstError != "" {
				fmt.Printf("  %10s  first error: %s\n", "", l.FirstError)
			}
		}
	}
	if c := r.Cleanup; c != nil {
		fmt.Printf("clean-up of %d expired keys (beside %d finished ones): %.1f s in %d rounds (%.1f s working), %.0f keys/s; %d deleted, %d left\n",
			c.Expired, c.Rows, c.Seconds, len(c.Rounds), c.WorkSeconds, c.KeysPerS, c.Deleted, c.Left)
		fmt.Printf("  new claims at %.0f/s without the clean-up: p50 %6.2f ms  p99 %6.2f ms  max %6.2f ms  (%d claims, %d errors)\n",
			c.Rate, c.Without.P50Ms, c.Without.P99Ms, c.Without.MaxMs, c.Without.N, c.WithoutErrors)
		fmt.Printf("  new claims at %.0f/s during the clean-up:   p50 %6.2f ms  p99 %6.2f ms  max %6.2f ms  (%d claims, %d errors); p99 × %.2f\n",
			c.Rate, c.During.P50Ms, c.During.P99Ms, c.During.MaxMs, c.During.N, c.DuringErrors, c.P99Factor)
	}
	fmt.Printf("peak RSS: api %.1f MiB, worker %.1f MiB\n", r.RSS.APIPeakMiB, r.RSS.WorkerPeakMiB)
	for _, w := range r.Warnings {
		fmt.Println("WARNING:", w)
	}
}
