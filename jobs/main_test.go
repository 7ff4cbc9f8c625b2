package jobs_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/generic"
	"github.com/leadintake/leadintake/downstream"
	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/jobs"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
	"github.com/leadintake/leadintake/webhook"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// clientID is the API client every test submits as.
const clientID = "client-a"

// Tokens the worker sends and the fake requires.
const (
	enrichmentToken = "enrichment-token"
	crmToken        = "crm-token"
	notifyToken     = "notify-token"
)

// Leads the tests submit, with the score and tier the contract gives them
// (40, +15 company, +10 phone, +20 referral / +15 linkedin / +5 ads, +10
// enrichment data; hot from 80, warm from 55). The fake has data for every
// domain but those ending in ".nodata".
const (
	// adaBody scores 40+15+20 = 75 (warm) without enrichment, 85 (hot)
	// with it.
	adaBody = `{"email":"ada@example.com","source":"referral","name":"Ada Lovelace","company":"Analytical Engines"}`
	// noDataBody scores 40+10+15 = 65 (warm): its domain has no data.
	noDataBody = `{"email":"grace@navy.nodata","source":"linkedin","name":"Grace Hopper","phone":"+1 555 0100"}`
)

// setupOpts configure setup; zero fields take defaults.
type setupOpts struct {
	// CRMMode is the worker's; default upsert.
	CRMMode lead.Mode
	// MaxAttempts of a lead job; default 5.
	MaxAttempts int
	// Timeout is the downstream client's per-call timeout; default
	// testkit.Patience.
	Timeout time.Duration
	// Fake configures the fake downstream; setup adds the tokens.
	Fake fake.Options
	// Simulate makes every downstream the Simulator (SIMULATE_DOWNSTREAM).
	Simulate bool
	// Gate, when set, holds the requests it matches before the fake sees
	// them.
	Gate *gate
	// AwaitRecheck is the worker's; default a second.
	AwaitRecheck time.Duration
	// CallbackMaxAge is the worker's; default an hour.
	CallbackMaxAge time.Duration
	// Outages are the worker's; ProbeInterval defaults to a second, and the
	// periodic wake-up of waiting leads runs at that interval.
	Outages jobs.Outages
	// CallbackTimeout bounds one callback delivery; default Timeout.
	CallbackTimeout time.Duration
	// CallbacksPerClient is the worker's; default jobs' own.
	CallbacksPerClient int
	// Second, when set, serves a second fake (Bundle.second) for a
	// destination "second" of kind http: a CRM at /crm, a channel at
	// /notify.
	Second bool
	// Client is added to client-a's entry in the clients file (crm,
	// notify, owners, assign), and Destinations under the file's
	// destinations.
	Client, Destinations string
}

// hashKey keys the email's hash that finds a person's leads
// (PII_HASH_KEY).
var hashKey = lead.HashKey("jobs-test-pii-hash-key-0123456789abcdef")

// callbackSecret signs client-a's callbacks, which the fake receives at
// /callbacks/client-a.
const callbackSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// testBundle is a worker as cmd/worker runs it: a started River client with
// every worker, on a database of its own, calling the fake downstream
// over real HTTP; and the key store the API claims with.
type testBundle struct {
	pool  *pgxpool.Pool
	river *river.Client[pgx.Tx]
	store *store.Store
	// callers are the worker's clients: client-a, with a callback to the
	// fake.
	callers *callers.Holder
	fake    *fake.Server
	// crm reaches the fake's CRM directly, for records made behind the
	// worker's back.
	crm  *generic.CRM
	hits *hitLog
	// riverConfig returns a new River configuration with new workers.
	riverConfig func() *river.Config
	// secrets must never show in the log: the keys and personal data
	// submitted, the tokens.
	secrets *secretList
	// cfg is the workers' configuration.
	cfg jobs.Config
	// dests are the worker's destinations: the fake's CRM and notification.
	dests *jobs.Destinations
	// second is the fake of the destination "second" (setupOpts.Second).
	second *fake.Server
	// queue is the store's Jobs: River's, with the worker's client.
	queue *jobs.Queue
}

// enqueueFunc inserts the job of a lead in its claim's transaction, as a
// test wants it (one scheduled far ahead, or none); nil inserts it as the
// api does.
type enqueueFunc func(ctx context.Context, tx pgx.Tx, leadID uuid.UUID) (int64, error)

// leadJobs is the bundle's Jobs with lead jobs inserted by insert.
type leadJobs struct {
	*jobs.Queue
	insert enqueueFunc
}

func (j leadJobs) ProcessLeads(ctx context.Context, tx pgx.Tx, leads []uuid.UUID, _ []string) ([]int64, error) {
	ids := make([]int64, len(leads))
	for i, id := range leads {
		var err error
		if ids[i], err = j.insert(ctx, tx, id); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

func setup(t *testing.T, opts *setupOpts) *testBundle {
	t.Helper()
	if opts == nil {
		opts = &setupOpts{}
	}
	dbURL, _ := dbtest.New(t)
	pool := openPool(t, dbURL)

	var logs testkit.LockedBuffer
	secrets := &secretList{}
	secrets.add(enrichmentToken, crmToken, notifyToken)
	t.Cleanup(func() {
		// Runs after the River client stopped (cleanups run last first):
		// the log is complete.
		secrets.requireAbsent(t, logs.String())
		if t.Failed() {
			t.Logf("worker log:\n%s", logs.String())
		}
	})
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))

	fakeOpts := opts.Fake
	fakeOpts.EnrichmentToken, fakeOpts.CRMToken, fakeOpts.NotifyToken = enrichmentToken, crmToken, notifyToken
	secret, err := webhook.ParseSecret(callbackSecret)
	if err != nil {
		t.Fatal(err)
	}
	fakeOpts.CallbackSecret = secret
	fakeOpts.Logger = logger.With(slog.String("component", "fake"))
	fk := fake.New(&fakeOpts)
	hits := &hitLog{}
	var handler http.Handler = fk
	if opts.Gate != nil {
		handler = opts.Gate.wrap(fk)
		t.Cleanup(opts.Gate.Open) // before ts.Close, which waits for held requests
	}
	ts := httptest.NewServer(hits.wrap(handler))
	t.Cleanup(ts.Close)
	t.Cleanup(fk.Close) // first: ends hung requests, which ts.Close waits for

	timeout := cmp.Or(opts.Timeout, testkit.Patience)
	client, err := downstream.NewClient(downstream.Config{
		EnrichmentURL: ts.URL + "/enrichment", EnrichmentToken: enrichmentToken, Timeout: timeout,
	})
	if err != nil {
		t.Fatalf("downstream client: %v", err)
	}
	var enricher jobs.Enricher = client
	env := []*destination.Config{
		{Name: "crm", Kind: generic.Kind, Values: map[string]string{"url": ts.URL + "/crm", "token": crmToken, "mode": string(cmp.Or(opts.CRMMode, lead.ModeUpsert))}},
		{Name: "notification", Kind: generic.Kind, Values: map[string]string{"url": ts.URL + "/notify", "token": notifyToken}},
	}

	b := &testBundle{pool: pool, fake: fk, crm: generic.NewCRM(&destination.Config{Values: map[string]string{"url": ts.URL + "/crm", "token": crmToken}}), hits: hits, secrets: secrets}
	b.store = store.New(pool)
	// As the worker runs them: the saves and finishes of concurrent leads
	// together.
	if err := b.store.GroupRuns(store.GroupOpts{}); err != nil {
		t.Fatal(err)
	}
	file := "clients:\n  - id: " + clientID + "\n    callback:\n      url: " + ts.URL + "/callbacks/" + clientID + "\n      secret: " + callbackSecret + "\n" + opts.Client
	if opts.Second {
		b.second = fake.New(&fake.Options{NotifyToken: notifyToken, CRMToken: crmToken})
		ts2 := httptest.NewServer(b.second)
		t.Cleanup(ts2.Close)
		t.Cleanup(b.second.Close)
		opts.Destinations += "  - {name: second, kind: http, url: " + ts2.URL + "/notify, token: " + notifyToken + "}\n" +
			"  - {name: second-crm, kind: http, url: " + ts2.URL + "/crm, token: " + crmToken + "}\n"
	}
	if opts.Destinations != "" {
		file += "destinations:\n" + opts.Destinations
	}
	set, err := callers.ParseFile([]byte(file))
	if err != nil {
		t.Fatalf("clients file: %v\n%s", err, file)
	}
	b.callers = callers.NewHolder(set)
	dopts := jobs.DestinationsOpts{Env: env, Callers: b.callers, Timeout: timeout}
	if opts.Simulate {
		enricher, dopts.Simulate = downstream.Simulator{}, downstream.Simulator{}.Destination
	}
	dests, err := jobs.NewDestinations(dopts)
	if err != nil {
		t.Fatal(err)
	}
	if err := dests.Refresh(t.Context(), b.store); err != nil {
		t.Fatal(err)
	}
	b.dests = dests
	cfg := jobs.Config{
		Callers: b.callers, Callbacks: downstream.NewCallbacks(cmp.Or(opts.CallbackTimeout, opts.Timeout, testkit.Patience), nil),
		CallbacksPerClient: opts.CallbacksPerClient,
		CallbackMaxAge:     cmp.Or(opts.CallbackMaxAge, time.Hour),
		Store:              b.store, Enrichment: enricher, Destinations: dests, KeyRetention: time.Hour,
		AwaitRecheck: cmp.Or(opts.AwaitRecheck, time.Second),
		Logger:       logger.With(slog.String("component", "jobs")),
		Outages:      opts.Outages,
	}
	cfg.Outages.ProbeInterval = cmp.Or(cfg.Outages.ProbeInterval, time.Second)
	b.cfg = cfg
	b.riverConfig = func() *river.Config {
		workers := river.NewWorkers()
		river.AddWorker(workers, jobs.NewProcessLeadWorker(cfg))
		river.AddWorker(workers, jobs.NewCleanupWorker(cfg))
		river.AddWorker(workers, jobs.NewReconcileWorker(cfg))
		river.AddWorker(workers, jobs.NewFinishOrphansWorker(cfg))
		river.AddWorker(workers, jobs.NewDeliverCallbackWorker(cfg))
		river.AddWorker(workers, jobs.NewWakeWaitingWorker(cfg))
		return &river.Config{
			PeriodicJobs: []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(cfg.Outages.ProbeInterval),
				func() (river.JobArgs, *river.InsertOpts) { return jobs.WakeWaitingArgs{}, nil }, nil)},
			Logger: logger.With(slog.String("component", "river")),
			Queues: map[string]river.QueueConfig{
				river.QueueDefault:    {MaxWorkers: 4},
				jobs.QueueMaintenance: {MaxWorkers: 3},
				jobs.QueueCallbacks:   {MaxWorkers: 4},
			},
			Workers:     workers,
			Middleware:  []rivertype.Middleware{&jobs.Traced{}},
			MaxAttempts: cmp.Or(opts.MaxAttempts, 5),
			// Short, so that retries are fast; a Retry-After must win
			// over Max.
			RetryPolicy:       &jobs.RetryPolicy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond},
			FetchCooldown:     10 * time.Millisecond,
			FetchPollInterval: 50 * time.Millisecond,
			TestOnly:          true,
		}
	}
	b.river = b.startWorker(t)
	b.queue = jobs.NewQueue(b.river, b.callers)
	b.store.UseJobs(b.queue)
	return b
}

// startWorker starts a River client with the bundle's workers, as one more
// worker process would (or the same one after a restart). It is stopped
// when the test ends.
func (b *testBundle) startWorker(t *testing.T) *river.Client[pgx.Tx] {
	t.Helper()
	riverClient, err := river.NewClient(riverpgxv5.New(b.pool), b.riverConfig())
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	if err := riverClient.Start(context.Background()); err != nil {
		t.Fatalf("river start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience)
		defer cancel()
		if err := riverClient.StopAndCancel(ctx); err != nil {
			t.Errorf("river stop: %v", err)
		}
	})
	return riverClient
}

// openPool opens a pool on the test database large enough for River's
// listener, producer and completer, four workers and the test's own
// queries.
func openPool(t *testing.T, dbURL string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// submission is one claimed enquiry.
type submission struct {
	Key    string
	Ref    string
	LeadID uuid.UUID
	Body   string
}

// submit claims a new key for body exactly as the API does, enqueuing the
// lead's job with the worker's River client.
func (b *testBundle) submit(t *testing.T, body string) *submission {
	t.Helper()
	return b.submitWith(t, nil, testkit.NewKey(), body)
}

// submitWith claims key for body, enqueuing with enqueue; the key must be
// new.
func (b *testBundle) submitWith(t *testing.T, enqueue enqueueFunc, key, body string) *submission {
	t.Helper()
	res := b.claimWith(t, enqueue, key, body)
	var lead map[string]any
	_ = json.Unmarshal([]byte(body), &lead)
	for _, field := range []string{"email", "name", "phone", "message"} {
		if v, ok := lead[field].(string); ok {
			b.secrets.add(v)
		}
	}
	b.secrets.add(key)
	if res.Outcome != store.OutcomeClaimed {
		t.Fatalf("claim: outcome %s, want claimed", res.Outcome)
	}
	return &submission{Key: key, Ref: intake.ExternalRef(clientID, key), LeadID: res.LeadID, Body: body}
}

// claim claims key for body as the API does, whatever the key holds.
func (b *testBundle) claim(t *testing.T, key, body string) *store.ClaimResult {
	t.Helper()
	return b.claimWith(t, nil, key, body)
}

func (b *testBundle) claimWith(t *testing.T, enqueue enqueueFunc, key, body string) *store.ClaimResult {
	t.Helper()
	return b.claimIn(t, context.Background(), enqueue, key, body)
}

// claimIn claims key for body in ctx (the request's, with its trace).
func (b *testBundle) claimIn(t *testing.T, ctx context.Context, enqueue enqueueFunc, key, body string) *store.ClaimResult {
	t.Helper()
	payload, err := lead.Decode([]byte(body), &lead.DecodeOpts{})
	if err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	ctx, cancel := context.WithTimeout(ctx, testkit.Patience)
	defer cancel()
	st := b.store
	if enqueue != nil {
		st = store.New(b.pool)
		st.UseJobs(leadJobs{Queue: b.queue, insert: enqueue})
	}
	res, err := st.Claim(ctx, &store.ClaimParams{
		ClientID: clientID, Key: key, ExternalRef: intake.ExternalRef(clientID, key), Payload: payload,
		EmailHMAC: hashKey.Email(payload.Lead.Email), ContentHMAC: hashKey.Content(payload),
		Fingerprint: hashKey.Request(payload.Fingerprint[:]),
	})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return res
}

// clientsWithCallback is a set of one client, clientID, whose callback is
// url, signed with secret.
func clientsWithCallback(t *testing.T, url, secret string) *callers.Set {
	t.Helper()
	set, err := callers.ParseFile([]byte("clients:\n  - id: " + clientID + "\n    callback:\n      url: " + url + "\n      secret: " + secret + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// noJob is an enqueue that inserts nothing: a claim whose job is gone (the
// id it records names no job).
func noJob(context.Context, pgx.Tx, uuid.UUID) (int64, error) { return 0, nil }

// keyRow is an idempotency_keys row.
type keyRow struct {
	State lead.KeyState
	// Status and Body are the final response; 0 and nil while unfinished.
	Status int
	Body   map[string]any
	// Raw is the body as stored.
	Raw []byte
}

// key reads the key's row; ok is false when there is none.
func (b *testBundle) key(t *testing.T, key string) (row keyRow, ok bool) {
	t.Helper()
	var status *int16
	var raw *string
	err := b.pool.QueryRow(context.Background(),
		`SELECT state, response_status, response_body::text FROM idempotency_keys WHERE client_id = $1 AND key = $2`,
		clientID, key).Scan(&row.State, &status, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return row, false
	}
	if err != nil {
		t.Fatalf("read key: %v", err)
	}
	if status != nil {
		row.Status = int(*status)
	}
	if raw != nil {
		row.Raw = []byte(*raw)
		if err := json.Unmarshal(row.Raw, &row.Body); err != nil {
			t.Fatalf("stored body %s: %v", *raw, err)
		}
	}
	return row, true
}

// waitKey polls the key until it is in one of states, and returns it.
func (b *testBundle) waitKey(t *testing.T, key string, states ...lead.KeyState) keyRow {
	t.Helper()
	var row keyRow
	testkit.Eventually(t, "key in state "+fmt.Sprint(states), func() bool {
		var ok bool
		row, ok = b.key(t, key)
		for _, s := range states {
			if ok && row.State == s {
				return true
			}
		}
		return false
	})
	return row
}

// waitFinished polls the key until it is completed or failed.
func (b *testBundle) waitFinished(t *testing.T, key string) keyRow {
	t.Helper()
	return b.waitKey(t, key, lead.KeyCompleted, lead.KeyFailed)
}

// leadRow is what the worker recorded of a lead.
type leadRow struct {
	Score             *int
	Tier              *string
	CRMState          string
	CRMID             *string
	EnrichmentOutcome *string
	Warnings          []string
	Finished          bool
}

func (b *testBundle) lead(t *testing.T, id uuid.UUID) leadRow {
	t.Helper()
	var l leadRow
	var score *int16
	err := b.pool.QueryRow(context.Background(), `
SELECT score, tier, crm_state, crm_id, enrichment_outcome, warnings, finished_at IS NOT NULL
FROM leads WHERE id = $1`, id).Scan(&score, &l.Tier, &l.CRMState, &l.CRMID, &l.EnrichmentOutcome, &l.Warnings, &l.Finished)
	if err != nil {
		t.Fatalf("read lead: %v", err)
	}
	if score != nil {
		s := int(*score)
		l.Score = &s
	}
	return l
}

// jobRow is a river_job row.
type jobRow struct {
	ID      int64
	State   string
	Attempt int
	Errors  int
}

// leadJobs returns the process_lead jobs of a lead, oldest first.
func (b *testBundle) leadJobs(t *testing.T, id uuid.UUID) []jobRow {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `
SELECT id, state, attempt, coalesce(array_length(errors, 1), 0)
FROM river_job WHERE kind = 'process_lead' AND args->>'lead_id' = $1 ORDER BY id`, id.String())
	if err != nil {
		t.Fatalf("read jobs: %v", err)
	}
	runs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[jobRow])
	if err != nil {
		t.Fatalf("read jobs: %v", err)
	}
	return runs
}

// requireJobs checks the states of a lead's jobs, oldest first.
//
// A job's completion follows its lead's finish (River's completer marks it
// once Work returned), so the states are waited for: the jobs must reach
// them, and stay in them (a completed job is never worked again).
func (b *testBundle) requireJobs(t *testing.T, id uuid.UUID, states ...string) []jobRow {
	t.Helper()
	var (
		runs []jobRow
		got  []string
	)
	ok := testkit.Within(testkit.Patience, func() bool {
		runs, got = b.leadJobs(t, id), nil
		for _, j := range runs {
			got = append(got, j.State)
		}
		return reflect.DeepEqual(got, states)
	})
	if !ok {
		t.Fatalf("jobs of the lead in states %v, want %v", got, states)
	}
	return runs
}

// waitJob polls the job until it is in state.
func (b *testBundle) waitJob(t *testing.T, id int64, state string) {
	t.Helper()
	testkit.Eventually(t, "job in state "+state, func() bool {
		var got string
		if err := b.pool.QueryRow(context.Background(), `SELECT state FROM river_job WHERE id = $1`, id).Scan(&got); err != nil {
			t.Fatalf("read job: %v", err)
		}
		return got == state
	})
}

// insertJob inserts args with the worker's client and returns the job's id.
func (b *testBundle) insertJob(t *testing.T, args river.JobArgs) int64 {
	t.Helper()
	res, err := b.river.Insert(context.Background(), args, nil)
	if err != nil {
		t.Fatalf("insert %s: %v", args.Kind(), err)
	}
	return res.Job.ID
}

// cleanUp works one round of the clean-up alone, with River's rivertest
// (the job inserted and completed in a transaction that is rolled back;
// the worker's own statements commit as they do in production), and
// requires it to complete.
func (b *testBundle) cleanUp(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	w := rivertest.NewWorker(t, riverpgxv5.New(b.pool), &river.Config{}, jobs.NewCleanupWorker(b.cfg))
	res, err := w.Work(ctx, t, tx, jobs.CleanupArgs{}, nil)
	if err != nil {
		t.Fatalf("clean-up: %v", err)
	}
	if res.EventKind != river.EventKindJobCompleted {
		t.Fatalf("clean-up ended with %s, want %s", res.EventKind, river.EventKindJobCompleted)
	}
}

// cleanUpRound works one round of the clean-up as cleanUp does, and
// returns how it ended: completed, or snoozed to go on at once.
func (b *testBundle) cleanUpRound(t *testing.T) river.EventKind {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	w := rivertest.NewWorker(t, riverpgxv5.New(b.pool), &river.Config{}, jobs.NewCleanupWorker(b.cfg))
	res, err := w.Work(ctx, t, tx, jobs.CleanupArgs{}, nil)
	var snooze *river.JobSnoozeError
	switch {
	case errors.As(err, &snooze):
		if snooze.Duration != 0 {
			t.Fatalf("clean-up snoozed for %s, want to go on at once", snooze.Duration)
		}
		return river.EventKindJobSnoozed
	case err != nil:
		t.Fatalf("clean-up: %v", err)
	}
	return res.EventKind
}

// reconcile runs one round of the reconciler and one of the orphan
// finisher, as the periodic jobs do, and waits for their end.
func (b *testBundle) reconcile(t *testing.T) {
	t.Helper()
	// One after the other: run at once, the orphan finisher may leave a
	// key awaiting reconciliation before the reconciler's round reads the
	// keys, and the round would then settle it too.
	b.waitJob(t, b.insertJob(t, jobs.ReconcileArgs{}), "completed")
	b.waitJob(t, b.insertJob(t, jobs.FinishOrphansArgs{}), "completed")
}

// exec runs SQL on the test database.
func (b *testBundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// requireNoCalls checks that the fake received no request of a lead's
// processing (enrichment, CRM, notification): the callback announcing a
// finish is not one.
func (b *testBundle) requireNoCalls(t *testing.T) {
	t.Helper()
	for _, target := range fake.Targets() {
		if target == fake.Callback {
			continue
		}
		if n := b.fake.Requests(target); n != 0 {
			t.Errorf("%d %s requests, want none", n, target)
		}
	}
}

// crmRecord returns the CRM's one record for ref, failing the test unless
// there is exactly one.
func (b *testBundle) crmRecord(t *testing.T, ref string) fake.CRMRef {
	t.Helper()
	rec, ok := b.fake.CRM(ref)
	if !ok || rec.Records != 1 {
		t.Fatalf("CRM holds %d records for the lead, want 1 (%+v)", rec.Records, rec)
	}
	return rec
}

// completedBody is the contract's 201 body.
func completedBody(leadID uuid.UUID, crmID string, score int, tier string, notified bool, warnings ...string) map[string]any {
	w := []any{}
	for _, s := range warnings {
		w = append(w, s)
	}
	return map[string]any{
		"status": "completed", "lead_id": leadID.String(), "crm_id": crmID,
		"score": float64(score), "tier": tier, "notified": notified, "warnings": w,
	}
}

// requireCompleted checks a key completed with the contract's 201 body.
func requireCompleted(t *testing.T, got keyRow, want map[string]any) {
	t.Helper()
	if got.State != lead.KeyCompleted || got.Status != http.StatusCreated {
		t.Fatalf("key %s with status %d (%s), want completed with 201", got.State, got.Status, got.Raw)
	}
	if !reflect.DeepEqual(got.Body, want) {
		t.Fatalf("body %s,\nwant %v", got.Raw, want)
	}
}

// requireFailed checks a key failed with the contract's body: status
// "failed", the lead, and an error with code and a message.
func requireFailed(t *testing.T, got keyRow, leadID uuid.UUID, status int, code string) {
	t.Helper()
	if got.State != lead.KeyFailed || got.Status != status {
		t.Fatalf("key %s with status %d (%s), want failed with %d", got.State, got.Status, got.Raw, status)
	}
	e, _ := got.Body["error"].(map[string]any)
	msg, _ := e["message"].(string)
	if len(got.Body) != 3 || got.Body["status"] != "failed" || got.Body["lead_id"] != leadID.String() ||
		len(e) != 2 || e["code"] != code || msg == "" {
		t.Fatalf("body %s, want {status: failed, lead_id: %s, error: {code: %s, message}}", got.Raw, leadID, code)
	}
}

// gate holds the first Hold requests whose method is Method, whose path
// starts with Prefix and whose query holds Query, until Open is called or
// the request is abandoned.
type gate struct {
	Method, Prefix, Query string
	Hold                  int

	mu      sync.Mutex
	held    int
	arrived chan struct{}
	open    chan struct{}
	opened  bool
}

func newGate(method, prefix string, hold int) *gate {
	return &gate{Method: method, Prefix: prefix, Hold: hold, arrived: make(chan struct{}, hold), open: make(chan struct{})}
}

func (g *gate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		hold := r.Method == g.Method && strings.HasPrefix(r.URL.Path, g.Prefix) &&
			strings.Contains(r.URL.RawQuery, g.Query) && g.held < g.Hold
		if hold {
			g.held++
		}
		g.mu.Unlock()
		if hold {
			g.arrived <- struct{}{}
			select {
			case <-g.open:
			case <-r.Context().Done():
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// Arrived waits until n more requests are held.
func (g *gate) Arrived(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-g.arrived:
		case <-time.After(testkit.Patience):
			t.Fatalf("no %s %s request reached the gate within %s", g.Method, g.Prefix, testkit.Patience)
		}
	}
}

// holdNext holds the next n matching requests too.
func (g *gate) holdNext(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.Hold = g.held + n
}

// Open lets every held request and every later one through.
func (g *gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.opened {
		g.opened = true
		close(g.open)
	}
}

// hitLog records when each request reached the fake.
type hitLog struct {
	mu   sync.Mutex
	hits []hit
}

type hit struct {
	method, path string
	at           time.Time
}

func (h *hitLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.hits = append(h.hits, hit{r.Method, r.URL.Path, time.Now()})
		h.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// times returns when the requests with method and a path starting with
// prefix arrived.
func (h *hitLog) times(method, prefix string) []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var at []time.Time
	for _, x := range h.hits {
		if x.method == method && strings.HasPrefix(x.path, prefix) {
			at = append(at, x.at)
		}
	}
	return at
}

// secretList lists what the log must never hold (the contract's rule on
// logs: no email, phone, name or message of a lead, no token, no key in
// clear).
type secretList struct {
	mu   sync.Mutex
	list []string
}

func (s *secretList) add(secrets ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, secrets...)
}

// requireAbsent fails the test for each line of log that holds a secret.
func (s *secretList) requireAbsent(t *testing.T, log string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for line := range strings.Lines(log) {
		for _, secret := range s.list {
			if strings.Contains(line, secret) {
				t.Errorf("the log holds %q: %s", secret, line)
			}
		}
	}
}

// jsonOf decodes raw into a generic value, failing the test on bad JSON.
func jsonOf(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("JSON %s: %v", raw, err)
	}
	return m
}

// enrichmentOf is the enrichment the fake gives for domain, as it appears
// in a JSON body; nil when it has none.
func enrichmentOf(t *testing.T, domain string) any {
	t.Helper()
	answer, ok := fake.EnrichmentFor(domain)
	if !ok {
		return nil
	}
	raw, err := json.Marshal(answer)
	if err != nil {
		t.Fatal(err)
	}
	return jsonOf(t, raw)
}
