package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/faultproxy"
	"github.com/leadintake/leadintake/internal/mailpittest"
	"github.com/leadintake/leadintake/internal/scratchdb"
	"github.com/leadintake/leadintake/internal/system"
	"github.com/leadintake/leadintake/internal/vendors"
	"github.com/leadintake/leadintake/webhook"
)

// piiHashKey is the PII_HASH_KEY of the processes of a soak.
const piiHashKey = "PII_HASH_KEY=soak-pii-hash-key-0123456789abcdefghij"

func tokenOf(client string) string { return "soak-token-of-" + client }

// The web page of the soak: soak-a's publishable key, and the one origin
// listed for it.
const (
	pageClient        = "soak-a"
	publishableKey    = "pk_soak_a_0123456789abcdef"
	pageOrigin        = "https://www.soak.example"
	callbackSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	adminUser         = "soak"
	adminPassword     = "soak-admin-password"
	probeInterval     = time.Second
	workerConcurrency = 20 // WORKER_CONCURRENCY of each worker
)

// Worker and api settings: short back-off and time-outs so that faults are
// recovered from within seconds; enough attempts that almost every lead
// completes; a modest pool per process.
var (
	workerEnv = []string{
		"RETRY_BASE_DELAY=100ms", "RETRY_MAX_DELAY=2s",
		"JOB_TIMEOUT=5s", "RESCUE_STUCK_AFTER=15s", "DOWNSTREAM_TIMEOUT=1s",
		"RECONCILE_INTERVAL=2s", fmt.Sprintf("WORKER_CONCURRENCY=%d", workerConcurrency),
		"SHUTDOWN_TIMEOUT=5s",
		// Outages are probed every second; the CRM's shared rate limit
		// bites only on the burst of leads that an outage held back.
		"PROBE_INTERVAL=" + probeInterval.String(), "CRM_RATE_LIMIT=40/s",
	}
	// The page's submissions all come from 127.0.0.1: its limit is set
	// above the soak's rate, so that a 429 stays the exception the clients
	// retry, not the rule.
	apiEnv = []string{"REQUEST_TIMEOUT=3s", "SHUTDOWN_TIMEOUT=10s", "PUBLIC_RATE_LIMIT=1200/m",
		"ADMIN_USER=" + adminUser, "ADMIN_PASSWORD=" + adminPassword}
)

// stack is one running leadintake for a phase: its database, the proxy in
// front of it for the api, the fake downstream, the api and two workers.
type stack struct {
	serverURL string
	db        *scratchdb.DB
	dbURL     string        // direct, for the workers
	pool      *pgxpool.Pool // direct, for the soak's own checks
	proxy     *faultproxy.Proxy
	fake      *fake.Server
	faults    *faultLog
	calls     *callLog
	fakeSrv   *http.Server
	apiURL    string
	adminURL  string
	api       *system.Process
	workers   []*system.Process
	// clientsFile is the clients file of the api, the workers and `api
	// erase`; eraseEnv the environment of `api erase`.
	clientsFile string
	eraseEnv    []string
	bins        *system.Binaries
	// The destinations phase's: the vendors' stand-ins and the server
	// that serves them, and Mailpit (nil where it is not installed).
	vendors   *vendors.Set
	vendorSrv *http.Server
	mail      *mailpittest.Server
}

// startStack starts a phase's stack. The phase's attempts is
// JOB_MAX_ATTEMPTS, for the api (which sets it on the jobs it enqueues) and
// the workers.
func startStack(ctx context.Context, p *phase, faults *faultLog) (_ *stack, err error) {
	bins, dir, serverURL, crmMode, attempts := p.bins, p.dir, p.serverURL, p.crmMode, p.attempts
	s := &stack{serverURL: serverURL, faults: faults, calls: &callLog{}, bins: bins}
	defer func() {
		if err != nil {
			s.stop(false)
		}
	}()

	// A database of its own.
	s.db, err = scratchdb.Create(ctx, serverURL, "leadintake_soak_", "")
	if err != nil {
		return nil, err
	}
	s.dbURL, err = scratchdb.WithDatabase(s.db.URL, "", map[string]string{"pool_max_conns": "8"})
	if err != nil {
		return nil, err
	}
	if err := bins.Migrate(ctx, s.dbURL); err != nil {
		return nil, err
	}
	s.pool, err = pgxpool.New(ctx, strings.Replace(s.dbURL, "pool_max_conns=8", "pool_max_conns=4", 1))
	if err != nil {
		return nil, err
	}

	// The api reaches the database through the proxy.
	u, err := url.Parse(s.dbURL)
	if err != nil {
		return nil, err
	}
	if s.proxy, err = faultproxy.New(u.Host); err != nil {
		return nil, err
	}
	u.Host = s.proxy.Addr()
	proxiedURL := u.String()

	// The fake downstream, in this process, so that its state and its
	// faults can be read directly.
	secret, err := webhook.ParseSecret(callbackSecret)
	if err != nil {
		return nil, err
	}
	s.fake = fake.New(&fake.Options{Logger: faults.logger(), CallbackSecret: secret})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	// Every request is noted with its time on its way in, before any
	// fault: what reached the downstream, and when.
	s.fakeSrv = &http.Server{Handler: s.calls.wrap(s.fake), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.fakeSrv.Serve(ln) }()
	fakeURL := "http://" + ln.Addr().String()

	var dests *soakDestinations
	if p.vendors {
		if dests, err = s.startVendors(dir, p.out); err != nil {
			return nil, err
		}
	}
	s.clientsFile = filepath.Join(dir, "clients.yaml")
	if err := os.WriteFile(s.clientsFile, []byte(clientsYAML(fakeURL, p.tenants, dests)), 0o600); err != nil {
		return nil, err
	}
	s.eraseEnv = []string{"DATABASE_URL=" + s.dbURL, piiHashKey, "CLIENTS_FILE=" + s.clientsFile}
	s.api, err = system.Start(bins.Path("api"), append([]string{
		"DATABASE_URL=" + proxiedURL, "API_ADDR=127.0.0.1:0", "ADMIN_ADDR=127.0.0.1:0", piiHashKey,
		"CLIENTS_FILE=" + s.clientsFile, fmt.Sprintf("JOB_MAX_ATTEMPTS=%d", attempts),
	}, apiEnv...))
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	addr, err := s.api.Addr(actx, "addr")
	if err != nil {
		return nil, err
	}
	s.apiURL = "http://" + addr
	adminAddr, err := s.api.Addr(actx, "admin_addr")
	if err != nil {
		return nil, err
	}
	s.adminURL = "http://" + adminAddr

	for range 2 {
		w, err := system.Start(bins.Path("worker"), append([]string{
			"DATABASE_URL=" + s.dbURL, "ADMIN_ADDR=127.0.0.1:0", "CRM_MODE=" + crmMode, piiHashKey,
			"CLIENTS_FILE=" + s.clientsFile,
			"ENRICHMENT_URL=" + fakeURL + "/enrichment", "CRM_URL=" + fakeURL + "/crm", "NOTIFY_URL=" + fakeURL + "/notify",
			fmt.Sprintf("JOB_MAX_ATTEMPTS=%d", attempts),
		}, workerEnv...))
		if err != nil {
			return nil, err
		}
		s.workers = append(s.workers, w)
		if _, err := w.Addr(actx, "admin_addr"); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// clientsYAML is the clients file: every tenant with a token and a
// callback to the fake's receiver (signed with one secret, which the fake
// verifies), and soak-a with a publishable key for one origin; with dests,
// their destinations, and each tenant's crm and notify.
func clientsYAML(fakeURL string, tenants []string, dests *soakDestinations) string {
	var b strings.Builder
	if dests != nil {
		b.WriteString(dests.yaml)
	}
	b.WriteString("clients:\n")
	for _, c := range tenants {
		sum := sha256.Sum256([]byte(tokenOf(c)))
		fmt.Fprintf(&b, "  - id: %s\n    tokens_sha256: [%s]\n", c, hex.EncodeToString(sum[:]))
		if c == pageClient {
			fmt.Fprintf(&b, "    publishable_keys:\n      - key: %s\n        origins: [%s]\n", publishableKey, pageOrigin)
		}
		fmt.Fprintf(&b, "    callback:\n      url: %s/callbacks/%s\n      secret: %s\n", fakeURL, c, callbackSecret)
		if dests != nil {
			fmt.Fprintf(&b, "    crm: %s\n    notify: [%s]\n", dests.crm[c], strings.Join(dests.notify, ", "))
		}
	}
	return b.String()
}

// stopProcesses stops the api and the workers with SIGTERM and returns what
// went wrong: each must exit 0 within its SHUTDOWN_TIMEOUT and some slack.
func (s *stack) stopProcesses() []string {
	var problems []string
	for i, w := range s.workers {
		if err := w.Stop(30 * time.Second); err != nil {
			problems = append(problems, fmt.Sprintf("worker %d: %v", i+1, err))
		}
	}
	if s.api != nil {
		if err := s.api.Stop(30 * time.Second); err != nil {
			problems = append(problems, fmt.Sprintf("api: %v", err))
		}
	}
	return problems
}

// stop releases everything the stack holds; the database is dropped unless
// keep.
func (s *stack) stop(keep bool) {
	for _, w := range s.workers {
		w.Kill()
	}
	if s.api != nil {
		s.api.Kill()
	}
	if s.fake != nil {
		s.fake.Close() // hung requests end first
	}
	if s.fakeSrv != nil {
		_ = s.fakeSrv.Close()
	}
	if s.proxy != nil {
		_ = s.proxy.Close()
	}
	if s.vendors != nil {
		s.vendors.Close()
	}
	if s.vendorSrv != nil {
		_ = s.vendorSrv.Close()
	}
	if s.mail != nil {
		s.mail.Close()
	}
	if s.pool != nil {
		s.pool.Close()
	}
	if s.db != nil && !keep {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.db.Drop(ctx)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
