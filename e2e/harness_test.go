package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/apicheck"
	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/scratchdb"
	"github.com/leadintake/leadintake/internal/system"
	"github.com/leadintake/leadintake/openapi"
)

// stack is one running leadintake: a database of its own, the fake
// downstream in this process, and api and worker processes.
type stack struct {
	t       *testing.T
	dbURL   string
	pool    *pgxpool.Pool
	fake    *fake.Server
	fakeURL string
	token   string
	apiURL  string
	// client sends every request to the public API (s.do): each exchange
	// is checked against openapi.json, and a mismatch fails the test.
	client  *http.Client
	api     *system.Process
	workers []*system.Process
	// workerEnv is added to every worker's environment.
	workerEnv []string
}

type stackOpts struct {
	fake      *fake.Options
	workerEnv []string
}

func newStack(t *testing.T, opts *stackOpts) *stack {
	t.Helper()
	if opts == nil {
		opts = &stackOpts{}
	}
	dbURL, pool := dbtest.New(t)
	f := fake.New(opts.fake)
	ts := httptest.NewServer(f)
	t.Cleanup(f.Close) // runs before ts.Close: hung requests end first
	t.Cleanup(ts.Close)
	// Several stacks run at once on one server: keep each process's pool
	// small.
	dbURL, err := scratchdb.WithDatabase(dbURL, "", map[string]string{"pool_max_conns": "8"})
	if err != nil {
		t.Fatal(err)
	}
	return &stack{
		t: t, dbURL: dbURL, pool: pool, fake: f, fakeURL: ts.URL,
		token:     "e2e-token-" + t.Name(),
		workerEnv: opts.workerEnv,
		client:    checkedClient(t),
	}
}

// apiChecker holds traffic to openapi.json; one serves every test.
var apiChecker = sync.OnceValues(func() (*apicheck.Checker, error) {
	return apicheck.New(openapi.Document())
})

// checkedClient returns a client of its own for t's requests to the public
// API, which fails t on any exchange the API description does not allow.
// A client per test, not one shared, so that a mismatch fails the test
// that caused it, whatever runs in parallel.
func checkedClient(t *testing.T) *http.Client {
	t.Helper()
	c, err := apiChecker()
	if err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: c.Transport(tr, func(err error) {
			t.Errorf("API description: %v", err)
		}),
	}
}

// startAPI starts an api process and waits until it listens.
func (s *stack) startAPI(env ...string) *system.Process {
	s.t.Helper()
	sum := sha256.Sum256([]byte(s.token))
	base := []string{
		"DATABASE_URL=" + s.dbURL,
		"API_ADDR=127.0.0.1:0",
		"ADMIN_ADDR=127.0.0.1:0",
		"API_CLIENTS=e2e=" + hex.EncodeToString(sum[:]),
		piiHashKey,
		"SHUTDOWN_TIMEOUT=10s",
	}
	p := s.start("api", append(base, env...))
	addr, err := p.Addr(context.Background(), "addr")
	if err != nil {
		s.t.Fatal(err)
	}
	s.api, s.apiURL = p, "http://"+addr
	return p
}

// startWorker starts a worker process and waits until it runs.
func (s *stack) startWorker(env ...string) *system.Process {
	s.t.Helper()
	base := []string{
		"DATABASE_URL=" + s.dbURL,
		"ADMIN_ADDR=127.0.0.1:0",
		"ENRICHMENT_URL=" + s.fakeURL + "/enrichment",
		"CRM_URL=" + s.fakeURL + "/crm",
		"NOTIFY_URL=" + s.fakeURL + "/notify",
		piiHashKey,
		"RETRY_BASE_DELAY=50ms",
		"RETRY_MAX_DELAY=500ms",
		"SHUTDOWN_TIMEOUT=10s",
	}
	p := s.start("worker", append(append(base, s.workerEnv...), env...))
	if _, err := p.Addr(context.Background(), "admin_addr"); err != nil {
		s.t.Fatal(err)
	}
	s.workers = append(s.workers, p)
	return p
}

func (s *stack) start(name string, env []string) *system.Process {
	s.t.Helper()
	p, err := system.Start(bins.Path(name), env)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		select {
		case <-p.Done(): // killed or stopped by the test itself
		default:
			if s.t.Failed() {
				// Where was it? Its goroutines' stacks go to its output.
				p.Quit(15 * time.Second)
				break
			}
			if err := p.Stop(15 * time.Second); err != nil {
				s.t.Errorf("%s: %v", name, err)
			}
		}
		if s.t.Failed() {
			s.t.Logf("%s output, last lines:\n%s", name, tail(p.Output(), 60))
			f, err := os.CreateTemp("", "leadintake-e2e-"+name+"-*.log")
			if err == nil {
				_, _ = f.WriteString(p.Output())
				_ = f.Close()
				s.t.Logf("%s output, whole (goroutine stacks included): %s", name, f.Name())
			}
		}
	})
	return p
}

// piiHashKey is the PII_HASH_KEY of every process the tests start.
const piiHashKey = "PII_HASH_KEY=e2e-pii-hash-key-0123456789abcdefghij"

// response is one HTTP answer, read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

// httpClient is for what openapi.json does not describe: the admin
// listeners and the fake downstream. Requests to the public API go through
// the stack's client.
var httpClient = &http.Client{Timeout: 30 * time.Second}

// submit POSTs body under key, keeping the retry contract (see
// keepRetrying).
func (s *stack) submit(key, body string) *response {
	s.t.Helper()
	return s.keepRetrying(func() *http.Request {
		req, err := http.NewRequest(http.MethodPost, s.apiURL+"/v1/leads", bytes.NewBufferString(body))
		if err != nil {
			s.t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+s.token)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		return req
	})
}

// keepRetrying sends the request newRequest makes, and sends it again, the
// same key and body, while the api answers 503 (store_unavailable: on a
// busy machine the database may be slower than REQUEST_TIMEOUT), after its
// Retry-After, for up to two minutes, as the contract tells every caller
// to. A test that wants to see the 503 sends its own requests.
func (s *stack) keepRetrying(newRequest func() *http.Request) *response {
	s.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r := s.do(newRequest())
		if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return r
		}
		wait := time.Second
		if secs, err := strconv.Atoi(r.header.Get("Retry-After")); err == nil && secs > 0 {
			wait = time.Duration(secs) * time.Second
		}
		time.Sleep(wait)
	}
}

// operation GETs the operation of key.
func (s *stack) operation(key string) *response {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.apiURL+"/v1/operations/"+key, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	return s.do(req)
}

// get GETs path of the public API, without credentials.
func (s *stack) get(path string) *response {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.apiURL+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	return s.do(req)
}

// do sends req, a request to the public API, through the stack's checking
// client and reads the answer.
func (s *stack) do(req *http.Request) *response {
	s.t.Helper()
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: body}
}

// operationState is the part of GET /v1/operations/{key} tests look at.
type operationState struct {
	State    string `json:"state"`
	LeadID   string `json:"lead_id"`
	Response *struct {
		Status int             `json:"status"`
		Body   json.RawMessage `json:"body"`
	} `json:"response"`
}

// waitState polls the operation of key until its state is one of states.
func (s *stack) waitState(key string, timeout time.Duration, states ...string) operationState {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	var last operationState
	for time.Now().Before(deadline) {
		r := s.operation(key)
		if r.status == http.StatusOK {
			last = operationState{}
			if err := json.Unmarshal(r.body, &last); err != nil {
				s.t.Fatal(err)
			}
			for _, st := range states {
				if last.State == st {
					return last
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("key %s: state %q after %s, want one of %v", key, last.State, timeout, states)
	return last
}

// count runs a count query.
func (s *stack) count(sql string, args ...any) int {
	s.t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		s.t.Fatal(err)
	}
	return n
}

func leadBody(i int) string {
	return fmt.Sprintf(`{"email":"lead%d@example.com","source":"referral","name":"Lead %d","company":"Company %d","phone":"+44 20 7946 %04d"}`, i, i, i, i%10000)
}

func tail(s string, lines int) string {
	b := []byte(s)
	n := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n++
			if n > lines {
				return string(b[i+1:])
			}
		}
	}
	return s
}
