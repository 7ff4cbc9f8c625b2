// Command bench measures leadintake against PostgreSQL's own limit on the
// same machine, in one run (`make bench`, see docs/performance.md):
//
//  1. the limit: pgbench, -M prepared, on a scratch database migrated with
//     `api migrate`: the claim's writes in one transaction (claim.pgbench:
//     the claim statement, River's job insert), a select of one key row by
//     (client, key) (select.pgbench), and, for reference, the service's
//     replay transaction itself (replay.pgbench);
//  2. the service: the real api and worker binaries on a fresh database,
//     the fake downstream in this process, driven over HTTP: new claims per
//     second (worker stopped), the time from POST to notification at a paced
//     rate, the time from POST to the final answer of a request that asks to
//     wait (Prefer: wait), completed leads per second for a burst, the whole
//     system (new leads closed-loop, worker running: leads finished per
//     second, and the backlog left), replays per second of finished keys;
//  3. the ratios to the limit, the peak RSS of api and worker, the targets,
//     and n8n's figures for the same template beside ours, printed and
//     written as JSON (-out).
//
// `bench scale` (`make bench-scale`) measures how the cost grows with the
// rows already in the tables, and the clean-up of expired keys; `bench
// plot` draws its results as a PNG.
//
// Figures are meaningless while other heavy work runs on the machine: use
// -max-load to wait for a quiet one.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/scratchdb"
	"github.com/leadintake/leadintake/internal/system"
	"github.com/leadintake/leadintake/lead"
)

// benchClient is the client id the api is configured with.
const benchClient = "bench"

// benchBody is the lead every request submits: about 400 bytes of canonical
// JSON, every field of the contract set.
const benchBody = `{"email":"ada.lovelace@analytical-engines.example","source":"referral",` +
	`"name":"Ada Lovelace","company":"Analytical Engines Ltd","phone":"+44 20 7946 0958",` +
	`"website":"https://analytical-engines.example/contact",` +
	`"message":"We would like a demonstration for a team of about forty engineers, ideally next week, and a quote for a yearly plan.",` +
	`"utm":{"source":"newsletter","medium":"email","campaign":"spring-launch"},"consent":true}`

var selfPID = os.Getpid()

type options struct {
	duration, warmup, paced, maxWait, system time.Duration
	clients, threads, burst, prefill, wait   int
	rate, maxLoad                            float64
	// tracing is the sampling ratio of the traces the api and the worker
	// export to an in-process receiver; 0 for none.
	tracing                 float64
	out, serverURL, pgbench string
	phases, features        map[string]bool
}

// allFeatures are what -features may switch on: what a user of the service
// would switch on (see stack.features).
var allFeatures = []string{"spam", "bucket", "assign", "hubspot", "channels"}

var allPhases = []string{"pgbench", "claims", "spam", "paced", "wait", "callbacks", "burst", "system", "replays"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	switch args := os.Args[1:]; {
	case len(args) > 0 && args[0] == "scale":
		err = runScale(ctx, args[1:])
	case len(args) > 0 && args[0] == "plot":
		err = runPlot(args[1:])
	default:
		err = run(ctx, args)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of each closed-loop phase: pgbench runs, claims, replays")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load before the claims and replays phases")
	fs.IntVar(&o.clients, "clients", 32, "concurrent clients of pgbench and of the load generator")
	fs.IntVar(&o.threads, "threads", 0, "pgbench threads (-j); 0 means the number of CPUs")
	fs.Float64Var(&o.rate, "rate", 100, "leads per second of the paced, the Prefer: wait and the callbacks phases")
	fs.DurationVar(&o.paced, "paced", 25*time.Second, "length of the paced, the Prefer: wait and the callbacks phases")
	fs.IntVar(&o.wait, "prefer-wait", 5, "seconds of Prefer: wait in the wait phase")
	fs.DurationVar(&o.system, "system", 30*time.Second, "length of the whole-system phase (new leads closed-loop, worker running)")
	fs.IntVar(&o.burst, "burst", 3000, "leads of the burst phase")
	fs.IntVar(&o.prefill, "prefill", 10000, "finished keys in the table pgbench's select reads")
	fs.StringVar(&o.out, "out", "bench-results.json", "where to write the results as JSON")
	fs.StringVar(&o.serverURL, "db", "", "PostgreSQL server URL (default TEST_DATABASE_URL, else DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres)")
	fs.StringVar(&o.pgbench, "pgbench", "", "pgbench binary (default: pg_config --bindir, /usr/lib/postgresql/*/bin, PATH)")
	fs.Float64Var(&o.tracing, "tracing", 0.1, "run the api and the worker with traces exported at this sampling ratio (0 to 1) to an in-process OTLP receiver that discards them, as a user would run them; 0: no tracing")
	fs.Float64Var(&o.maxLoad, "max-load", 0, "wait until the 1-minute load average is below this and no test runs (0: do not wait, only warn)")
	fs.DurationVar(&o.maxWait, "max-wait", 20*time.Minute, "longest wait for -max-load")
	phases := fs.String("phases", strings.Join(allPhases, ","), "phases to run, among "+strings.Join(allPhases, ","))
	fs.Func("api-env", "NAME=value added to the api's environment (repeatable), e.g. GOMAXPROCS=1", envFlag(&apiEnv))
	fs.Func("worker-env", "NAME=value added to the worker's environment (repeatable), e.g. GOMAXPROCS=1", envFlag(&workerEnv))
	features := fs.String("features", strings.Join(allFeatures, ","), "what a user would switch on, among "+strings.Join(allFeatures, ",")+`, or "none"`)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.features = map[string]bool{}
	for _, f := range strings.Split(*features, ",") {
		if f = strings.TrimSpace(f); f == "" || f == "none" {
			continue
		}
		if !slices.Contains(allFeatures, f) {
			return nil, fmt.Errorf("-features: unknown feature %q", f)
		}
		o.features[f] = true
	}
	o.phases = map[string]bool{}
	for _, p := range strings.Split(*phases, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !slices.Contains(allPhases, p) {
			return nil, fmt.Errorf("-phases: unknown phase %q", p)
		}
		o.phases[p] = true
	}
	if o.tracing < 0 || o.tracing > 1 {
		return nil, errors.New("-tracing: a ratio from 0 to 1")
	}
	if o.clients < 1 || o.burst < 1 || o.rate <= 0 || o.duration <= 0 || o.prefill < 1 || o.system <= 0 || o.wait < 1 || o.paced <= 0 {
		return nil, errors.New("-clients, -burst, -rate, -duration, -paced, -system, -prefer-wait and -prefill must be positive")
	}
	if o.threads <= 0 {
		o.threads = min(o.clients, max(1, numCPU()))
	}
	if o.serverURL == "" {
		o.serverURL = scratchdb.ServerURL(os.Getenv)
	}
	return o, nil
}

// results is the JSON document -out receives.
type results struct {
	Date    time.Time `json:"date"`
	Command string    `json:"command"`
	Machine machine   `json:"machine"`
	Flags   struct {
		Duration string  `json:"duration"`
		Clients  int     `json:"clients"`
		Rate     float64 `json:"rate"`
		Paced    string  `json:"paced"`
		Wait     int     `json:"prefer_wait_s"`
		Burst    int     `json:"burst"`
		System   string  `json:"system"`
		Phases   string  `json:"phases"`
		// Tracing is the sampling ratio of the processes' traces; 0 for
		// none.
		Tracing  float64 `json:"tracing,omitempty"`
		Features string  `json:"features"`
	} `json:"flags"`
	// TracedSpans counts the spans the processes exported (-tracing).
	TracedSpans int `json:"traced_spans,omitempty"`
	Pgbench     struct {
		Claim  *pgbenchResult `json:"claim,omitempty"`
		Select *pgbenchResult `json:"select,omitempty"`
		Replay *pgbenchResult `json:"replay_tx,omitempty"`
	} `json:"pgbench"`
	Service struct {
		// Claims: every request a new key, answered 202 and not replayed.
		Claims *loadResult `json:"claims,omitempty"`
		// Spam: new keys of a bearer token and of a page's publishable
		// keys, unjudged and judged, in turn at a paced rate.
		Spam  *spamResult  `json:"spam,omitempty"`
		Paced *pacedResult `json:"paced,omitempty"`
		Wait  *waitResult  `json:"prefer_wait,omitempty"`
		// Callbacks: the delivery of each finish to a client's callback.
		Callbacks *callbackResult `json:"callbacks,omitempty"`
		Burst     *burstResult    `json:"burst,omitempty"`
		// System: new leads closed-loop with the worker running; the
		// leads finished per second.
		System *systemResult `json:"system,omitempty"`
		// Replays: POSTs of finished keys, answered 201, replayed, with
		// the stored body byte for byte.
		Replays *loadResult   `json:"replays,omitempty"`
		Fake    *fakeTotals   `json:"fake_downstream,omitempty"`
		Config  serviceConfig `json:"config"`
	} `json:"service"`
	Ratios struct {
		SystemToPgbenchClaim   float64 `json:"system_to_pgbench_claim,omitempty"`
		ClaimsToPgbenchClaim   float64 `json:"claims_to_pgbench_claim,omitempty"`
		ReplaysToPgbenchSelect float64 `json:"replays_to_pgbench_select,omitempty"`
		ReplaysToPgbenchReplay float64 `json:"replays_to_pgbench_replay_tx,omitempty"`
	} `json:"ratios"`
	RSS struct {
		APIPeakMiB    float64 `json:"api_peak_mib,omitempty"`
		WorkerPeakMiB float64 `json:"worker_peak_mib,omitempty"`
	} `json:"rss"`
	Targets []target `json:"targets"`
	// N8n compares with n8n's figures for the same template on this
	// machine, measured separately (constants, not measured by this bench).
	N8n      []comparison `json:"n8n_comparison,omitempty"`
	LoadEnd  [3]float64   `json:"load_at_end"`
	Warnings []string     `json:"warnings,omitempty"`
}

type serviceConfig struct {
	ClaimsPhaseWorker  string `json:"claims_phase_worker"`
	ReplaysPhaseWorker string `json:"replays_phase_worker"`
	NotifyMeasuredAt   string `json:"notify_measured_at"`
	WaitMeasured       string `json:"prefer_wait_measured"`
	SystemMeasured     string `json:"system_measured"`
}

type target struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Op    string  `json:"op"`
	Limit float64 `json:"limit"`
	OK    bool    `json:"ok"`
}

type fakeTotals struct {
	Notifications int `json:"notifications"`
	Deliveries    int `json:"deliveries"`
	CRMRecords    int `json:"crm_records"`
	DuplicateRefs int `json:"duplicate_refs"`
}

func run(ctx context.Context, args []string) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	var res results
	res.Date = time.Now().UTC().Truncate(time.Second)
	res.Command = strings.TrimSpace("go run ./cmd/bench " + strings.Join(args, " "))
	res.Flags.Duration, res.Flags.Clients, res.Flags.Rate = o.duration.String(), o.clients, o.rate
	res.Flags.Paced, res.Flags.Burst = o.paced.String(), o.burst
	res.Flags.Wait, res.Flags.System = o.wait, o.system.String()
	var phases []string
	for _, p := range allPhases {
		if o.phases[p] {
			phases = append(phases, p)
		}
	}
	res.Flags.Phases = strings.Join(phases, ",")
	res.Flags.Tracing = o.tracing
	var features []string
	for _, f := range allFeatures {
		if o.features[f] {
			features = append(features, f)
		}
	}
	res.Flags.Features = strings.Join(features, ",")

	stopTracing, err := setTracing(o.tracing)
	if err != nil {
		return err
	}
	defer stopTracing()

	warn := warner(&res.Warnings)
	checkQuiet := func(when string) {
		if tests := busyTests(); len(tests) > 0 {
			warn("%s: tests running %v: the figures are not reliable", when, tests)
		}
	}

	sub, err := lead.Decode([]byte(benchBody), &lead.DecodeOpts{})
	if err != nil {
		return fmt.Errorf("bench body: %w", err)
	}

	machine, bins, removeBins, err := prepare(ctx, o.serverURL, o.maxLoad, o.maxWait, warn)
	if err != nil {
		return err
	}
	defer removeBins()
	res.Machine = machine

	if o.phases["pgbench"] {
		if err := runPgbenchPhases(ctx, o, bins, sub, &res); err != nil {
			return err
		}
		checkQuiet("after pgbench")
	}
	if o.phases["claims"] || o.phases["spam"] || o.phases["paced"] || o.phases["wait"] || o.phases["callbacks"] || o.phases["burst"] || o.phases["system"] || o.phases["replays"] {
		if err := runServicePhases(ctx, o, bins, &res, warn); err != nil {
			return err
		}
	}
	checkQuiet("at end")
	res.LoadEnd = loadAvg()

	res.TracedSpans = stopTracing()
	setTargets(&res)
	res.N8n = compareN8n(&res)
	printSummary(&res)

	return writeResults(o.out, &res)
}

// The targets, on this machine, against PostgreSQL's own limit on it.
const (
	targetSystemToClaim = 0.3  // whole system ÷ pgbench claim
	targetClaimsToClaim = 0.8  // new claims (worker stopped) ÷ pgbench claim
	targetReplaysToSel  = 0.25 // replays ÷ pgbench select
	targetNotifyP99Ms   = 20   // POST to notification at -rate, p99
	targetWaitP50Ms     = 10   // Prefer: wait, POST to 201, p50
	targetWaitP99Ms     = 40   // and p99
	targetAPIRSSMiB     = 60   // peak RSS over every phase
	targetWorkerRSSMiB  = 80
)

// setTargets computes the ratios and lists the targets of the phases that
// ran.
func setTargets(res *results) {
	if c, s := res.Service.System, res.Pgbench.Claim; c != nil && s != nil {
		res.Ratios.SystemToPgbenchClaim = c.CompletedPerS / s.TPS
		res.Targets = append(res.Targets, newTarget("whole system / pgbench claim tx", res.Ratios.SystemToPgbenchClaim, ">=", targetSystemToClaim))
	}
	if c, s := res.Service.Claims, res.Pgbench.Claim; c != nil && s != nil {
		res.Ratios.ClaimsToPgbenchClaim = c.PerS / s.TPS
		res.Targets = append(res.Targets, newTarget("new claims / pgbench claim tx", res.Ratios.ClaimsToPgbenchClaim, ">=", targetClaimsToClaim))
	}
	if r, s := res.Service.Replays, res.Pgbench.Select; r != nil && s != nil {
		res.Ratios.ReplaysToPgbenchSelect = r.PerS / s.TPS
		res.Targets = append(res.Targets, newTarget("replays / pgbench select", res.Ratios.ReplaysToPgbenchSelect, ">=", targetReplaysToSel))
	}
	if r, s := res.Service.Replays, res.Pgbench.Replay; r != nil && s != nil {
		res.Ratios.ReplaysToPgbenchReplay = r.PerS / s.TPS
	}
	if p := res.Service.Paced; p != nil {
		res.Targets = append(res.Targets, newTarget(fmt.Sprintf("POST-to-notification p99 at %.0f/s (ms)", p.Rate), p.PostToNotify.P99Ms, "<=", targetNotifyP99Ms))
	}
	if w := res.Service.Wait; w != nil {
		res.Targets = append(res.Targets,
			newTarget(fmt.Sprintf("Prefer: wait, POST to 201 p50 at %.0f/s (ms)", w.Rate), w.Final.P50Ms, "<=", targetWaitP50Ms),
			newTarget(fmt.Sprintf("Prefer: wait, POST to 201 p99 at %.0f/s (ms)", w.Rate), w.Final.P99Ms, "<=", targetWaitP99Ms))
	}
	if res.RSS.APIPeakMiB > 0 {
		res.Targets = append(res.Targets, newTarget("api peak RSS (MiB)", res.RSS.APIPeakMiB, "<=", targetAPIRSSMiB))
	}
	if res.RSS.WorkerPeakMiB > 0 {
		res.Targets = append(res.Targets, newTarget("worker peak RSS (MiB)", res.RSS.WorkerPeakMiB, "<=", targetWorkerRSSMiB))
	}
}

func newTarget(name string, v float64, op string, limit float64) target {
	ok := v >= limit
	if op == "<=" {
		ok = v <= limit
	}
	return target{Name: name, Value: v, Op: op, Limit: limit, OK: ok}
}

func serverVersion(ctx context.Context, serverURL string) (string, error) {
	pool, err := pgxpool.New(ctx, serverURL)
	if err != nil {
		return "", err
	}
	defer pool.Close()
	var v string
	if err := pool.QueryRow(ctx, "SELECT 'PostgreSQL ' || current_setting('server_version')").Scan(&v); err != nil {
		return "", fmt.Errorf("PostgreSQL at %s: %w (make bench runs it against a private server: scripts/postgres.sh)", scratchdb.Redacted(serverURL), err)
	}
	return v, nil
}

func runPgbenchPhases(ctx context.Context, o *options, bins *system.Binaries, sub *lead.Payload, res *results) error {
	bin, err := findPgbench(o.pgbench)
	if err != nil {
		return err
	}
	dbURL, drop, err := migratedDatabase(ctx, o.serverURL, "leadintake_bench_pgbench_", bins)
	if err != nil {
		return err
	}
	defer drop()
	vars := submissionVars(sub.Fingerprint, sub.Canonical)
	checkpoint(ctx, dbURL)
	fmt.Printf("pgbench claim: %d clients, %s...\n", o.clients, o.duration)
	if res.Pgbench.Claim, err = runPgbench(ctx, bin, dbURL, "claim", claimScript, o.clients, o.threads, o.duration, vars); err != nil {
		return err
	}
	if err := prefillFinished(ctx, dbURL, o.prefill, sub.Fingerprint); err != nil {
		return err
	}
	vars["nkeys"] = fmt.Sprint(o.prefill)
	fmt.Printf("pgbench select: %d clients, %s...\n", o.clients, o.duration)
	if res.Pgbench.Select, err = runPgbench(ctx, bin, dbURL, "select", selectScript, o.clients, o.threads, o.duration, vars); err != nil {
		return err
	}
	fmt.Printf("pgbench replay transaction: %d clients, %s...\n", o.clients, o.duration)
	if res.Pgbench.Replay, err = runPgbench(ctx, bin, dbURL, "replay_tx", replayScript, o.clients, o.threads, o.duration, vars); err != nil {
		return err
	}
	return nil
}

// checkpoint flushes the server's dirty pages, so that a write phase does
// not pay for an earlier one's checkpoint.
func checkpoint(ctx context.Context, dbURL string) {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return
	}
	defer pool.Close()
	_, _ = pool.Exec(ctx, "CHECKPOINT")
}

// pacedResult is the paced phase: leads at a fixed rate, each timed from
// its POST to its notification at the fake.
type pacedResult struct {
	Rate    float64 `json:"rate"`
	Leads   int     `json:"leads"`
	Seconds float64 `json:"seconds"`
	Errors  int     `json:"errors"`
	// PostToNotify: from sending the POST to the last of its lead's
	// channels answering its message (the generic notification at the
	// fake, and the Slack stand-in's under the "channels" feature).
	PostToNotify latencyStats `json:"post_to_notify"`
	// CRMToLastChannel: from the CRM (the fake, or the HubSpot stand-in)
	// answering the lead's write to the last of its channels answering.
	CRMToLastChannel latencyStats `json:"crm_to_last_channel"`
	// Channels are the channels of each lead.
	Channels []string `json:"channels"`
	// PostToFinished: from sending the POST to the key's finished_at (the
	// start of the worker's finishing transaction, PostgreSQL's clock).
	PostToFinished latencyStats `json:"post_to_finished"`
	// JobWait: the job's created_at (the claim transaction's start) to its
	// attempted_at (River's fetch).
	JobWait latencyStats `json:"job_created_to_fetched"`
	// FetchToNotify: River's fetch to the notification at the fake.
	FetchToNotify latencyStats `json:"fetched_to_notify"`
	// Post: the POSTs themselves (202).
	Post latencyStats `json:"post"`
	CPU  cpuUse       `json:"cpu_cores"`
}

type latencyStats struct {
	N     int     `json:"n"`
	P50Ms float64 `json:"p50_ms"`
	P90Ms float64 `json:"p90_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

func statsOf(d []time.Duration) latencyStats {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	s := latencyStats{N: len(d), P50Ms: percentileMs(d, 0.5), P90Ms: percentileMs(d, 0.9), P99Ms: percentileMs(d, 0.99)}
	if len(d) > 0 {
		s.MaxMs = ms(d[len(d)-1])
	}
	return s
}

// burstResult is the burst phase.
type burstResult struct {
	Leads          int     `json:"leads"`
	Errors         int     `json:"errors"`
	SubmitSeconds  float64 `json:"submit_seconds"`
	TotalSeconds   float64 `json:"total_seconds"`
	CompletedPerS  float64 `json:"completed_per_s"`
	SubmittedPerS  float64 `json:"submitted_per_s"`
	Completed      int     `json:"completed"`
	CPU            cpuUse  `json:"cpu_cores"`
	CPUAfterSubmit cpuUse  `json:"cpu_cores_after_submit"`
}

func runServicePhases(ctx context.Context, o *options, bins *system.Binaries, res *results, warn func(string, ...any)) error {
	s, closeStack, err := openStack(ctx, o.serverURL, "leadintake_bench_", 2, bins, o.features)
	if err != nil {
		return err
	}
	defer closeStack()
	pool, dbURL := s.pool, s.dbURL
	fmt.Printf("api pid %d on %s\n", apiPID, s.apiURL)
	lg := newLoadGen(s.apiURL, s.token, []byte(benchBody), o.clients)
	run := randomHex(3)
	res.Service.Config = serviceConfig{
		ClaimsPhaseWorker:  "stopped: the phase measures the claim path, as pgbench's claim script does; a running worker would take its share of the 2 cores and of PostgreSQL for the jobs the phase enqueues",
		ReplaysPhaseWorker: "running, idle: every key is finished before the phase (it polls River every 50 ms)",
		NotifyMeasuredAt:   "the in-process fake's handler, when POST /notify arrives, per lead_id; POST time is taken just before the request is sent",
		WaitMeasured:       "from just before the POST is sent to the end of its answer's body; the api holds the request until the lead is finished (201) or the wait runs out (202)",
		SystemMeasured:     systemMethod,
	}

	if o.phases["claims"] {
		checkpoint(ctx, dbURL)
		fmt.Printf("claims: %d clients, %s (worker stopped)...\n", o.clients, o.duration)
		res.Service.Claims = closedLoop(ctx, o.clients, o.warmup, o.duration,
			func(ctx context.Context, w, i int) (answer, error) {
				return lg.post(ctx, fmt.Sprintf("claim-%s-%d-%d", run, w, i), readNothing)
			},
			func(a answer) bool { return a.status == 202 && a.replayed == "false" }, nil)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The claims left their jobs queued: clear them, so that the worker
		// starts on an empty queue rather than a backlog of thousands.
		if _, err := pool.Exec(ctx, "TRUNCATE idempotency_keys, leads, river_job"); err != nil {
			return fmt.Errorf("clear the claims: %w", err)
		}
	}

	if o.phases["spam"] {
		checkpoint(ctx, dbURL)
		fmt.Printf("spam: %.0f new keys/s for %s, a bearer token's and pages' in turn (worker stopped)...\n", o.rate, o.paced)
		res.Service.Spam = runSpamPhase(ctx, lg, s.token, "spam-"+run, o.rate, o.paced)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if _, err := pool.Exec(ctx, "TRUNCATE idempotency_keys, leads, river_job"); err != nil {
			return fmt.Errorf("clear the spam phase's claims: %w", err)
		}
	}

	if !(o.phases["paced"] || o.phases["wait"] || o.phases["callbacks"] || o.phases["burst"] || o.phases["system"] || o.phases["replays"]) {
		res.RSS.APIPeakMiB = peakRSSMiB(apiPID)
		return nil
	}
	if err := s.startWorker(ctx); err != nil {
		return err
	}
	fmt.Printf("worker pid %d\n", workerPID)

	// Warm the worker up (connections, River's producer) with a few leads;
	// their finished keys join the replay set.
	var finishedKeys []string
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
	finishedKeys = append(finishedKeys, warmKeys...)

	if o.phases["paced"] {
		fmt.Printf("paced: %.0f leads/s for %s...\n", o.rate, o.paced)
		p, keys, err := runPaced(ctx, s, lg, run, o.rate, o.paced)
		if err != nil {
			return err
		}
		res.Service.Paced = p
		finishedKeys = append(finishedKeys, keys...)
	}

	if o.phases["wait"] {
		fmt.Printf("Prefer: wait=%d: %.0f leads/s for %s...\n", o.wait, o.rate, o.paced)
		w, err := runWaitPhase(ctx, s, lg, "wait-"+run, o.rate, o.wait, o.paced)
		if err != nil {
			return err
		}
		res.Service.Wait = w
		if w.Expired > 0 || w.Errors > 0 {
			warn("Prefer: wait: %d answers were 202 (the wait ran out), %d errors; the latencies are of the 201s", w.Expired, w.Errors)
		}
	}

	if o.phases["callbacks"] {
		fmt.Printf("callbacks: %.0f leads/s for %s, each finish delivered to the fake's receiver...\n", o.rate, o.paced)
		cb := newLoadGen(s.apiURL, s.cbToken, []byte(benchBody), o.clients)
		c, err := runCallbackPhase(ctx, s, cb, "callback-"+run, o.rate, o.paced)
		if err != nil {
			return err
		}
		res.Service.Callbacks = c
		if c.Missing > 0 || c.Unverified > 0 || c.Errors > 0 {
			warn("callbacks: %d finishes without a delivery, %d deliveries unverified, %d errors", c.Missing, c.Unverified, c.Errors)
		}
	}

	if o.phases["burst"] {
		fmt.Printf("burst: %d leads...\n", o.burst)
		keys := make([]string, o.burst)
		for i := range keys {
			keys[i] = fmt.Sprintf("burst-%s-%d", run, i)
		}
		before := takeCPU(benchPIDs()...)
		start := time.Now()
		_, submitted, errs := submitAll(ctx, lg, keys, o.clients)
		mid := takeCPU(benchPIDs()...)
		done, err := s.waitFinished(ctx, 10*time.Minute)
		if err != nil {
			return fmt.Errorf("burst: %w", err)
		}
		after := takeCPU(benchPIDs()...)
		var completed int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE client_id = $1 AND key = ANY($2) AND state = 'completed'`,
			benchClient, keys).Scan(&completed); err != nil {
			return err
		}
		b := &burstResult{
			Leads: o.burst, Errors: errs, Completed: completed,
			SubmitSeconds: submitted.Sub(start).Seconds(), TotalSeconds: done.Sub(start).Seconds(),
			CPU: cpuBetween(before, after, apiPID, workerPID), CPUAfterSubmit: cpuBetween(mid, after, apiPID, workerPID),
		}
		b.CompletedPerS = float64(completed) / b.TotalSeconds
		b.SubmittedPerS = float64(o.burst-errs) / b.SubmitSeconds
		res.Service.Burst = b
		if completed != o.burst {
			warn("burst: %d of %d keys completed", completed, o.burst)
		}
		finishedKeys = append(finishedKeys, keys...)
	}

	if o.phases["system"] {
		checkpoint(ctx, dbURL)
		fmt.Printf("system: %d clients posting new leads for %s, worker running...\n", o.clients, o.system)
		sys, err := runSystemPhase(ctx, s, lg, "system-"+run, o.clients, o.warmup, o.system)
		if err != nil {
			return err
		}
		res.Service.System = sys
		if sys.Failed > 0 || sys.WindowClaimsCompleted != sys.Claims.Requests {
			warn("system: %d leads failed in the window; %d of the window's %d claims completed", sys.Failed, sys.WindowClaimsCompleted, sys.Claims.Requests)
		}
	}

	if o.phases["replays"] {
		fmt.Printf("replays: %d clients, %s, over %d finished keys (worker running, idle)...\n", o.clients, o.duration, len(finishedKeys))
		// Every replay must be the stored response, byte for byte.
		stored := make(map[string][]byte, len(finishedKeys))
		rows, err := pool.Query(ctx, `SELECT key, response_body FROM idempotency_keys WHERE client_id = $1 AND key = ANY($2) AND response_status = 201`,
			benchClient, finishedKeys)
		if err != nil {
			return err
		}
		for rows.Next() {
			var k string
			var b []byte
			if err := rows.Scan(&k, &b); err != nil {
				rows.Close()
				return err
			}
			stored[k] = b
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(stored) != len(finishedKeys) {
			warn("replays: %d of %d keys finished with 201", len(stored), len(finishedKeys))
		}
		n := len(finishedKeys)
		res.Service.Replays = closedLoop(ctx, o.clients, o.warmup, o.duration,
			func(ctx context.Context, w, i int) (answer, error) {
				return lg.post(ctx, finishedKeys[(i*o.clients+w)%n], readBody)
			},
			func(a answer) bool {
				return a.status == 201 && a.replayed == "true" && bytes.Equal(a.body, stored[a.key])
			}, nil)
	}

	res.RSS.APIPeakMiB = peakRSSMiB(apiPID)
	res.RSS.WorkerPeakMiB = peakRSSMiB(workerPID)
	st := s.fake.State()
	res.Service.Fake = &fakeTotals{
		Notifications: st.Totals.Notifications, Deliveries: st.Totals.Deliveries,
		CRMRecords: st.Totals.CRMRecords, DuplicateRefs: st.Totals.DuplicateRefs,
	}
	if st.Totals.Deliveries != st.Totals.Notifications || st.Totals.DuplicateRefs != 0 {
		warn("the fake saw duplicates: %+v", st.Totals)
	}
	return nil
}

// submitAll POSTs every key, clients at a time, as fast as possible. It
// returns the lead ids by key, when the last answer came, and the number of
// answers other than 202.
func submitAll(ctx context.Context, lg *loadGen, keys []string, clients int) (map[string]string, time.Time, int) {
	var (
		next atomic.Int64
		errs atomic.Int64
		mu   sync.Mutex
		ids  = make(map[string]string, len(keys))
		wg   sync.WaitGroup
	)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(keys) || ctx.Err() != nil {
					return
				}
				a, err := lg.post(ctx, keys[i], readLeadID)
				if err != nil || a.status != 202 {
					errs.Add(1)
					continue
				}
				mu.Lock()
				ids[keys[i]] = a.leadID
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ids, time.Now(), int(errs.Load())
}

func runPaced(ctx context.Context, s *stack, lg *loadGen, run string, rate float64, d time.Duration) (*pacedResult, []string, error) {
	n := max(1, int(rate*d.Seconds()))
	interval := time.Duration(float64(time.Second) / rate)
	type sent struct {
		key    string
		at     time.Time
		leadID string
		post   time.Duration
		ok     bool
	}
	sents := make([]sent, n)
	var wg sync.WaitGroup
	before := takeCPU(benchPIDs()...)
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("paced-%s-%d", run, i)
			at := time.Now()
			a, err := lg.post(ctx, key, readLeadID)
			sents[i] = sent{key: key, at: at, leadID: a.leadID, post: a.latency, ok: err == nil && a.status == 202 && a.leadID != ""}
		}()
	}
	wg.Wait()
	sendEnd := time.Now()
	after := takeCPU(benchPIDs()...)

	// Wait for every lead's last channel, then for every key to be
	// finished.
	channels := s.channelsOf()
	refOf := func(key string) string { return intake.ExternalRef(benchClient, key) }
	deadline := time.Now().Add(2 * time.Minute)
	for {
		missing := 0
		for _, x := range sents {
			if _, _, ok := s.stamps.delivered(refOf(x.key), channels); x.ok && !ok {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("paced: %d notifications missing after 2 minutes", missing)
		}
		sleepCtx(ctx, 20*time.Millisecond)
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
	}
	if _, err := s.waitFinished(ctx, time.Minute); err != nil {
		return nil, nil, fmt.Errorf("paced: %w", err)
	}

	// The job's and the key's times, from the database.
	type dbTimes struct{ created, attempted, finished time.Time }
	times := map[string]dbTimes{}
	keys := make([]string, 0, n)
	for _, x := range sents {
		if x.ok {
			keys = append(keys, x.key)
		}
	}
	rows, err := s.pool.Query(ctx, `
SELECT k.key, j.created_at, j.attempted_at, k.finished_at
FROM idempotency_keys k JOIN river_job j ON j.kind = 'process_lead' AND (j.args->>'lead_id')::uuid = k.lead_id
WHERE k.client_id = $1 AND k.key = ANY($2)`, benchClient, keys)
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var key string
		var t dbTimes
		if err := rows.Scan(&key, &t.created, &t.attempted, &t.finished); err != nil {
			rows.Close()
			return nil, nil, err
		}
		times[key] = t
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}

	p := &pacedResult{Rate: rate, Leads: n, Seconds: sendEnd.Sub(start).Seconds(), CPU: cpuBetween(before, after, apiPID, workerPID), Channels: channels}
	var toNotify, toFinished, wait, fetchToNotify, post, crmToLast []time.Duration
	for _, x := range sents {
		if !x.ok {
			p.Errors++
			continue
		}
		post = append(post, x.post)
		crm, nt, _ := s.stamps.delivered(refOf(x.key), channels)
		toNotify = append(toNotify, nt.Sub(x.at))
		crmToLast = append(crmToLast, nt.Sub(crm))
		if t, ok := times[x.key]; ok {
			toFinished = append(toFinished, t.finished.Sub(x.at))
			wait = append(wait, t.attempted.Sub(t.created))
			fetchToNotify = append(fetchToNotify, nt.Sub(t.attempted))
		}
	}
	p.PostToNotify, p.PostToFinished, p.CRMToLastChannel = statsOf(toNotify), statsOf(toFinished), statsOf(crmToLast)
	p.JobWait, p.FetchToNotify, p.Post = statsOf(wait), statsOf(fetchToNotify), statsOf(post)
	return p, keys, nil
}

func printSummary(r *results) {
	fmt.Println()
	fmt.Printf("leadintake bench, %s, %d CPUs (%s), %s, %s\n", r.Date.Format(time.RFC3339), r.Machine.NProc,
		r.Machine.CPUModel, r.Machine.Postgres, r.Machine.Go)
	fmt.Printf("load average at start %.2f, at end %.2f\n", r.Machine.LoadAtStart[0], r.LoadEnd[0])
	if r.Flags.Tracing > 0 {
		fmt.Printf("tracing at ratio %g: %d spans exported by the api and the worker (received and discarded in process)\n", r.Flags.Tracing, r.TracedSpans)
	}
	pg := func(name string, p *pgbenchResult) {
		if p != nil {
			fmt.Printf("  %-34s %9.0f tx/s   p50 %6.2f ms  p99 %6.2f ms  (%d failed; cores: machine %.2f, postgres %.2f, pgbench client %.2f, other %.2f)\n",
				name, p.TPS, p.P50Ms, p.P99Ms, p.Failed, p.CPU.Machine, p.CPU.Postgres, p.CPU.Pgbench, p.CPU.Other)
		}
	}
	fmt.Println("PostgreSQL's limit (pgbench -M prepared):")
	pg("claim transaction", r.Pgbench.Claim)
	pg("select one key", r.Pgbench.Select)
	pg("replay transaction (reference)", r.Pgbench.Replay)
	fmt.Println("the service:")
	lr := func(name string, l *loadResult) {
		if l != nil {
			fmt.Printf("  %-34s %9.0f /s     p50 %6.2f ms  p99 %6.2f ms  (%d errors; cores: machine %.2f, api %.2f, worker %.2f, postgres %.2f, bench %.2f, other %.2f)\n",
				name, l.PerS, l.P50Ms, l.P99Ms, l.Errors, l.CPU.Machine, l.CPU.API, l.CPU.Worker, l.CPU.Postgres, l.CPU.Bench, l.CPU.Other)
			if l.FirstError != "" {
				fmt.Printf("  %-34s first error: %s\n", "", l.FirstError)
			}
		}
	}
	printSystem("whole system: completed leads", r.Service.System)
	lr("new claims (worker stopped)", r.Service.Claims)
	lr("replays of finished keys", r.Service.Replays)
	printSpam(r.Service.Spam)
	if p := r.Service.Paced; p != nil {
		fmt.Printf("  %-34s p50 %6.2f ms  p90 %6.2f ms  p99 %6.2f ms  max %6.2f ms  (%d leads at %.0f/s, %d errors)\n",
			"POST to notification", p.PostToNotify.P50Ms, p.PostToNotify.P90Ms, p.PostToNotify.P99Ms, p.PostToNotify.MaxMs, p.Leads, p.Rate, p.Errors)
		fmt.Printf("  %-34s p50 %6.2f ms  p90 %6.2f ms  p99 %6.2f ms  (channels: %s)\n", "CRM accepted to last channel", p.CRMToLastChannel.P50Ms, p.CRMToLastChannel.P90Ms, p.CRMToLastChannel.P99Ms, strings.Join(p.Channels, ", "))
		fmt.Printf("  %-34s p50 %6.2f ms  p90 %6.2f ms  p99 %6.2f ms\n", "  of which job created to fetched", p.JobWait.P50Ms, p.JobWait.P90Ms, p.JobWait.P99Ms)
		fmt.Printf("  %-34s p50 %6.2f ms  p90 %6.2f ms  p99 %6.2f ms\n", "  of which fetched to notification", p.FetchToNotify.P50Ms, p.FetchToNotify.P90Ms, p.FetchToNotify.P99Ms)
		fmt.Printf("  %-34s p50 %6.2f ms  p90 %6.2f ms  p99 %6.2f ms\n", "POST to key finished (db clock)", p.PostToFinished.P50Ms, p.PostToFinished.P90Ms, p.PostToFinished.P99Ms)
		fmt.Printf("  %-34s p50 %6.2f ms  p99 %6.2f ms  (cores: machine %.2f, api %.2f, worker %.2f, postgres %.2f, bench %.2f, other %.2f)\n",
			"the paced POSTs", p.Post.P50Ms, p.Post.P99Ms, p.CPU.Machine, p.CPU.API, p.CPU.Worker, p.CPU.Postgres, p.CPU.Bench, p.CPU.Other)
	}
	printWait(r.Service.Wait)
	printCallbacks(r.Service.Callbacks)
	if b := r.Service.Burst; b != nil {
		fmt.Printf("  %-34s %9.0f /s     (%d leads: submitted in %.2f s, all completed after %.2f s; %d errors; cores: machine %.2f, api %.2f, worker %.2f, postgres %.2f, bench %.2f, other %.2f)\n",
			"burst: completed leads", b.CompletedPerS, b.Leads, b.SubmitSeconds, b.TotalSeconds, b.Errors,
			b.CPU.Machine, b.CPU.API, b.CPU.Worker, b.CPU.Postgres, b.CPU.Bench, b.CPU.Other)
	}
	if r.Ratios.SystemToPgbenchClaim > 0 {
		fmt.Printf("ratio whole system / pgbench claim: %.2f\n", r.Ratios.SystemToPgbenchClaim)
	}
	if r.Ratios.ClaimsToPgbenchClaim > 0 {
		fmt.Printf("ratio new claims / pgbench claim:   %.2f\n", r.Ratios.ClaimsToPgbenchClaim)
	}
	if r.Ratios.ReplaysToPgbenchSelect > 0 {
		fmt.Printf("ratio replays / pgbench select:     %.2f   (/ pgbench replay transaction: %.2f)\n",
			r.Ratios.ReplaysToPgbenchSelect, r.Ratios.ReplaysToPgbenchReplay)
	}
	if r.RSS.APIPeakMiB > 0 {
		fmt.Printf("peak RSS: api %.1f MiB, worker %.1f MiB\n", r.RSS.APIPeakMiB, r.RSS.WorkerPeakMiB)
	}
	fmt.Println("targets:")
	for _, t := range r.Targets {
		verdict := "MET"
		if !t.OK {
			verdict = "MISSED"
		}
		fmt.Printf("  %-44s %8.2f %s %-6g %s\n", t.Name, t.Value, t.Op, t.Limit, verdict)
	}
	printN8n(r.N8n)
	for _, w := range r.Warnings {
		fmt.Println("WARNING:", w)
	}
}

// migratedDatabase creates a database of the bench's own, applies every
// migration with the real `api migrate`, and returns its URL and a function
// that drops it.
func migratedDatabase(ctx context.Context, serverURL, prefix string, bins *system.Binaries) (string, func(), error) {
	db, err := scratchdb.Create(ctx, serverURL, prefix, "")
	if err != nil {
		return "", nil, err
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := db.Drop(ctx); err != nil {
			fmt.Println(err)
		}
	}
	if err := bins.Migrate(ctx, db.URL); err != nil {
		drop()
		return "", nil, err
	}
	return db.URL, drop, nil
}
