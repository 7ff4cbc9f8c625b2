package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leadintake/leadintake/destination/hubspot/hubspotfake"
	"github.com/leadintake/leadintake/destination/slack/slackfake"
	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/scratchdb"
	"github.com/leadintake/leadintake/internal/system"
	"github.com/leadintake/leadintake/webhook"
)

// apiPID and workerPID are the running processes, for the CPU figures (0
// when not running).
var apiPID, workerPID int

func benchPIDs() []int {
	return []int{apiPID, workerPID, selfPID}
}

// stack is the system under test: api and worker processes on a database
// of their own, the fake downstream in this process.
type stack struct {
	bins  *system.Binaries
	dbURL string
	pool  *pgxpool.Pool
	token string
	// cbToken is the token of benchCallbackClient.
	cbToken string
	// clientsFile is the CLIENTS_FILE of both processes, in dir.
	clientsFile, dir string
	apiURL           string
	api              *system.Process
	worker           *system.Process
	fake             *fake.Server
	fakeSrv          *httptest.Server
	// verify is the stand-in for a captcha's siteverify service the spam
	// phase's captcha key verifies its tokens with: every token is good.
	verify *httptest.Server
	notify *notifyLog
	// stopAnalyze ends the stand-in for autovacuum's ANALYZE.
	stopAnalyze func()
	// features are what a user would switch on (-features): "spam" makes
	// the whole-system phase post through a page's judged publishable
	// key, "bucket" gives the worker a shared rate limit per downstream,
	// too high to bind; "assign" gives the bench's client owners and a
	// rule that assigns every lead; "hubspot" makes its CRM a HubSpot
	// destination (the stand-in, in this process); "channels" gives it
	// two notification channels, the generic one and a Slack bot (the
	// stand-in).
	features map[string]bool
	// hubspot and slack serve the stand-ins of the "hubspot" and
	// "channels" features.
	hubspot, slack *httptest.Server
	// stamps are when each lead's CRM write and its channels' messages
	// were answered, by reference.
	stamps *stamps
}

// stamps are the times the stand-ins answered, per reference: the CRM's
// write (the first that succeeded) and each channel's message.
type stamps struct {
	mu       sync.Mutex
	crm      map[string]time.Time
	channels map[string]map[string]time.Time
}

func (st *stamps) stamp(what, ref string, at time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if what == "crm" {
		if _, ok := st.crm[ref]; !ok {
			st.crm[ref] = at
		}
		return
	}
	m := st.channels[ref]
	if m == nil {
		m = map[string]time.Time{}
		st.channels[ref] = m
	}
	if _, ok := m[what]; !ok {
		m[what] = at
	}
}

// delivered returns when the CRM accepted ref and when its last channel
// did, and whether all of want's channels did.
func (st *stamps) delivered(ref string, want []string) (crm, last time.Time, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	crm, ok = st.crm[ref]
	for _, c := range want {
		at, got := st.channels[ref][c]
		if !got {
			return crm, last, false
		}
		if at.After(last) {
			last = at
		}
	}
	return crm, last, ok
}

// stamped wraps h so that each request that matches is stamped, by the
// reference refOf finds in its body, once h answered it with a 2xx.
func (st *stamps) stamped(h http.Handler, what string, matches func(*http.Request) bool, refOf func([]byte) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !matches(r) {
			h.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		if rec.status < 300 {
			if ref := refOf(body); ref != "" {
				st.stamp(what, ref, time.Now())
			}
		}
	})
}

// statusRecorder remembers the status a handler answered with.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

// jsonRef finds a reference at path (member names) in a JSON body; "[0]"
// takes an array's first element.
func jsonRef(path ...string) func([]byte) string {
	return func(body []byte) string {
		var v any
		if json.Unmarshal(body, &v) != nil {
			return ""
		}
		for _, p := range path {
			switch x := v.(type) {
			case map[string]any:
				v = x[p]
			case []any:
				if p != "[0]" || len(x) == 0 {
					return ""
				}
				v = x[0]
			default:
				return ""
			}
		}
		ref, _ := v.(string)
		return ref
	}
}

// unbindingLimit is the rate limit of each downstream under the "bucket"
// feature: far above what this machine reaches, so that it never binds.
const unbindingLimit = "1000000/s"

// notifyLog timestamps each notification as the fake receives it, by lead.
type notifyLog struct {
	mu sync.Mutex
	at map[string]time.Time
}

// openStack creates a migrated scratch database (its name starting with
// prefix), a pool of maxConns connections on it for the bench's own
// queries, and a stack with the api started. close drops all of it; it is
// set whenever the error is nil.
func openStack(ctx context.Context, serverURL, prefix string, maxConns int, bins *system.Binaries, features map[string]bool) (s *stack, close func(), err error) {
	dbURL, drop, err := migratedDatabase(ctx, serverURL, prefix, bins)
	if err != nil {
		return nil, nil, err
	}
	poolURL, err := scratchdb.WithDatabase(dbURL, "", map[string]string{"pool_max_conns": strconv.Itoa(maxConns), "application_name": "leadintake-bench"})
	if err != nil {
		drop()
		return nil, nil, err
	}
	pool, err := pgxpool.New(ctx, poolURL)
	if err != nil {
		drop()
		return nil, nil, err
	}
	s, err = newStack(bins, dbURL, pool)
	if err != nil {
		pool.Close()
		drop()
		return nil, nil, err
	}
	close = func() {
		s.close()
		pool.Close()
		drop()
	}
	s.features = features
	if err := s.writeClients(); err != nil {
		close()
		return nil, nil, err
	}
	if err := s.startAPI(ctx); err != nil {
		close()
		return nil, nil, err
	}
	return s, close, nil
}

func newStack(bins *system.Binaries, dbURL string, pool *pgxpool.Pool) (*stack, error) {
	secret, err := webhook.ParseSecret(benchCallbackSecret)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "leadintake-bench-clients-")
	if err != nil {
		return nil, err
	}
	s := &stack{bins: bins, dbURL: dbURL, pool: pool, token: "bench-" + randomHex(16), cbToken: "bench-cb-" + randomHex(16), dir: dir}
	s.fake = fake.New(&fake.Options{CallbackSecret: secret})
	s.notify = &notifyLog{at: map[string]time.Time{}}
	s.stamps = &stamps{crm: map[string]time.Time{}, channels: map[string]map[string]time.Time{}}
	post := func(suffix string) func(*http.Request) bool {
		return func(r *http.Request) bool { return r.Method != http.MethodGet && strings.HasSuffix(r.URL.Path, suffix) }
	}
	s.hubspot = httptest.NewServer(s.stamps.stamped(hubspotfake.New(nil), "crm", post("/batch/upsert"), jsonRef("inputs", "[0]", "objectWriteTraceId")))
	s.slack = httptest.NewServer(s.stamps.stamped(slackfake.New(nil), "slack", post("/chat.postMessage"), jsonRef("metadata", "event_payload", "external_ref")))
	fakeHandler := s.stamps.stamped(s.stamps.stamped(s.fake, "notification", post("/notify"), jsonRef("external_ref")),
		"crm", func(r *http.Request) bool {
			return strings.HasPrefix(r.URL.Path, "/crm/leads") && r.Method != http.MethodGet
		}, jsonRef("external_ref"))
	s.fakeSrv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/notify" {
			at := time.Now()
			body, _ := io.ReadAll(r.Body)
			var n struct {
				LeadID string `json:"lead_id"`
			}
			if json.Unmarshal(body, &n) == nil && n.LeadID != "" {
				s.notify.mu.Lock()
				if _, seen := s.notify.at[n.LeadID]; !seen {
					s.notify.at[n.LeadID] = at
				}
				s.notify.mu.Unlock()
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		fakeHandler.ServeHTTP(w, r)
	}))
	s.verify = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"success": true}`)
	}))
	s.clientsFile = filepath.Join(dir, "clients.yaml")
	s.stopAnalyze = keepAnalyzed(pool, analyzeEvery)
	return s, nil
}

// writeClients writes the clients file of both processes (clientsYAML),
// with the destinations and owners of the features on.
func (s *stack) writeClients() error {
	return os.WriteFile(s.clientsFile, s.clientsYAML(), 0o600)
}

// channelsOf are the channels a lead of the bench's client is announced on.
func (s *stack) channelsOf() []string {
	if s.features["channels"] {
		return []string{"notification", "slack"}
	}
	return []string{"notification"}
}

// clientsYAML is the clients file of both processes: the bench's client,
// with the publishable keys of the spam phase (and the destinations and
// owners of the features on), and benchCallbackClient with its callback to
// the fake's receiver.
func (s *stack) clientsYAML() []byte {
	hash := func(token string) string {
		sum := sha256.Sum256([]byte(token))
		return hex.EncodeToString(sum[:])
	}
	var extra, dests string
	if s.features["hubspot"] {
		extra += "    crm: bench-hubspot\n"
		dests += fmt.Sprintf("  - {name: bench-hubspot, kind: hubspot, token: %s, base_url: %s}\n", hubspotfake.DefaultToken, s.hubspot.URL)
	}
	if s.features["channels"] {
		extra += "    notify: [notification, bench-slack]\n"
		dests += fmt.Sprintf("  - {name: bench-slack, kind: slack, token: %s, channel: %s, base_url: %s}\n", slackfake.DefaultToken, slackfake.DefaultChannel, s.slack.URL)
	}
	if s.features["assign"] {
		extra += "    owners: [{name: ann, crm_owner: \"101\"}, {name: bo, crm_owner: \"102\"}, {name: cy, crm_owner: \"103\"}, {name: di, crm_owner: \"104\"}]\n" +
			"    assign: [{when: {tier: [hot]}, pool: [ann, bo]}, {pool: [cy, di]}]\n"
	}
	if dests != "" {
		dests = "destinations:\n" + dests
	}
	return fmt.Appendf(nil, `clients:
  - id: %s
    tokens_sha256: [%s]
    publishable_keys:
      - key: %s
        origins: [%s]
      - key: %s
        origins: [%s]
        spam: {}
      - key: %s
        origins: [%s]
        spam: {captcha: {verify_url: %s, secret: bench-captcha-secret}}
%s  - id: %s
    tokens_sha256: [%s]
    callback:
      url: %s/callbacks/%s
      secret: %s
%s`, benchClient, hash(s.token), pkPlain, benchOrigin, pkJudged, benchOrigin, pkCaptcha, benchOrigin, s.verify.URL, extra,
		benchCallbackClient, hash(s.cbToken), s.fakeSrv.URL, benchCallbackClient, benchCallbackSecret, dests)
}

// analyzeEvery is how often keepAnalyzed analyzes the tables.
const analyzeEvery = 5 * time.Second

// keepAnalyzed stands in for autovacuum's ANALYZE on tables that grow from
// nothing: every interval, until stopped, it analyzes each table the
// service writes that autovacuum would analyze by its rule (more rows
// changed since the last ANALYZE than 50 and a tenth of the table:
// autovacuum_analyze_threshold and autovacuum_analyze_scale_factor at
// their defaults), without autovacuum's wait. Autovacuum, where it is on,
// looks at a database once a minute (autovacuum_naptime); a database of
// the bench is minutes old, so without this the plans that PostgreSQL
// caches for prepared statements keep the estimates of empty tables
// (sequential scans of leads for every save, of river_job for every
// completion) while the tables grow, and the figures would be those of a
// server no one runs for long.
func keepAnalyzed(pool *pgxpool.Pool, every time.Duration) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if err := analyzeChanged(ctx, pool); err != nil && ctx.Err() == nil {
				fmt.Printf("analyze: %v\n", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// analyzeChanged analyzes the tables the service writes that autovacuum's
// rule says are due.
func analyzeChanged(ctx context.Context, pool *pgxpool.Pool) error {
	rows, err := pool.Query(ctx, `
SELECT s.relname
FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.relname = ANY($1) AND s.n_mod_since_analyze > 50 + 0.1 * greatest(c.reltuples, 0)`,
		[]string{"idempotency_keys", "leads", "lead_calls", "river_job", "callbacks", "owner_turns", "downstreams"})
	if err != nil {
		return err
	}
	due, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(due) == 0 {
		return err
	}
	_, err = pool.Exec(ctx, "ANALYZE "+strings.Join(due, ", "))
	return err
}

func (s *stack) startAPI(ctx context.Context) error {
	p, err := system.Start(s.bins.Path("api"), append([]string{
		"DATABASE_URL=" + s.dbURL,
		"API_ADDR=127.0.0.1:0",
		"ADMIN_ADDR=127.0.0.1:0",
		"PII_HASH_KEY=bench-pii-hash-key-0123456789abcdefghij",
		"CLIENTS_FILE=" + s.clientsFile,
		// Every page request of the spam phase comes from 127.0.0.1.
		"PUBLIC_RATE_LIMIT=1000000/s",
	}, append(traceEnv, apiEnv...)...))
	if err != nil {
		return err
	}
	s.api = p
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	addr, err := p.Addr(actx, "addr")
	if err != nil {
		return err
	}
	s.apiURL = "http://" + addr
	apiPID = p.Pid()
	return nil
}

func (s *stack) startWorker(ctx context.Context) error {
	env := []string{
		"DATABASE_URL=" + s.dbURL,
		"ADMIN_ADDR=127.0.0.1:0",
		"PII_HASH_KEY=bench-pii-hash-key-0123456789abcdefghij",
		"ENRICHMENT_URL=" + s.fakeSrv.URL + "/enrichment",
		"CRM_URL=" + s.fakeSrv.URL + "/crm",
		"NOTIFY_URL=" + s.fakeSrv.URL + "/notify",
		"CLIENTS_FILE=" + s.clientsFile,
	}
	env = append(append(env, traceEnv...), workerEnv...)
	if s.features["bucket"] {
		env = append(env, "ENRICHMENT_RATE_LIMIT="+unbindingLimit, "CRM_RATE_LIMIT="+unbindingLimit, "NOTIFY_RATE_LIMIT="+unbindingLimit)
	}
	p, err := system.Start(s.bins.Path("worker"), env)
	if err != nil {
		return err
	}
	s.worker = p
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := p.Addr(actx, "admin_addr"); err != nil {
		return err
	}
	workerPID = p.Pid()
	return nil
}

// stopWorker stops the worker gracefully and returns its peak RSS.
func (s *stack) stopWorker() (float64, error) {
	rss := peakRSSMiB(workerPID)
	err := s.worker.Stop(30 * time.Second)
	workerPID = 0
	if err != nil {
		return rss, fmt.Errorf("stop the worker: %w", err)
	}
	return rss, nil
}

// restartWorker starts the stopped worker again and waits until it listens.
func (s *stack) restartWorker(ctx context.Context) error {
	if err := s.worker.Restart(); err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := s.worker.Addr(actx, "admin_addr"); err != nil {
		return err
	}
	workerPID = s.worker.Pid()
	return nil
}

func (s *stack) close() {
	if s.stopAnalyze != nil {
		s.stopAnalyze()
	}
	for _, p := range []*system.Process{s.worker, s.api} {
		if p != nil {
			if err := p.Stop(30 * time.Second); err != nil {
				fmt.Printf("stop: %v\n", err)
			}
		}
	}
	apiPID, workerPID = 0, 0
	s.fake.Close()
	s.fakeSrv.Close()
	s.verify.Close()
	s.hubspot.Close()
	s.slack.Close()
	_ = os.RemoveAll(s.dir)
}

// unfinished counts the keys still processing (or awaiting reconciliation).
func (s *stack) unfinished(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE state IN ('processing', 'needs_reconciliation')`).Scan(&n)
	return n, err
}

// anyUnfinished reports whether a key is still processing (or awaiting
// reconciliation): what waitFinished polls, cheaper than counting them.
func (s *stack) anyUnfinished(ctx context.Context) (bool, error) {
	var left bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM idempotency_keys WHERE state IN ('processing', 'needs_reconciliation'))`).Scan(&left)
	return left, err
}

// waitFinished polls until no key is unfinished and returns when that was
// first seen.
func (s *stack) waitFinished(ctx context.Context, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		left, err := s.anyUnfinished(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if !left {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			n, err := s.unfinished(ctx)
			if err != nil {
				return time.Time{}, err
			}
			return time.Time{}, fmt.Errorf("%d keys still unfinished after %s", n, timeout)
		}
		sleepCtx(ctx, 10*time.Millisecond)
		if ctx.Err() != nil {
			return time.Time{}, ctx.Err()
		}
	}
}

func numCPU() int { return runtime.NumCPU() }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// apiEnv and workerEnv are added to the environment of the api and the
// worker (-api-env, -worker-env): settings tried without a rebuild.
var apiEnv, workerEnv []string

// envFlag appends a flag's NAME=value to env.
func envFlag(env *[]string) func(string) error {
	return func(v string) error {
		if name, _, ok := strings.Cut(v, "="); !ok || name == "" {
			return fmt.Errorf("%q: want NAME=value", v)
		}
		*env = append(*env, v)
		return nil
	}
}
