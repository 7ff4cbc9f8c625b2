package intake_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/jobs"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

// The two callers every test API knows: client "a" with tokenA and client
// "b" with tokenB.
const (
	tokenA = "token-of-client-a"
	tokenB = "token-of-client-b"
)

// Client a's page: its publishable key, and the one origin it allows; and
// the secret its signed webhooks are signed with.
const (
	publishableKeyA = "pk_a_test0123456789abcdef"
	shopOrigin      = "https://shop.example"
	webhookSecretA  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// validBody is a lead that breaks no rule.
const validBody = `{"email":"ada@example.com","source":"website","name":"Ada Lovelace"}`

// testAPIOpts configure newTestAPI; zero fields take defaults.
type testAPIOpts struct {
	// Pool is the pool the API's store uses. Default: the test database's
	// own pool.
	Pool *pgxpool.Pool
	// RequestTimeout defaults to testkit.Patience, so that a slow machine never
	// turns a test's request into a 503.
	RequestTimeout time.Duration
	MaxBodyBytes   int64
	// Registry, when set, receives the API's metrics.
	Registry *prometheus.Registry
	// MaxWait bounds Prefer: wait; default intake.DefaultMaxWait.
	MaxWait time.Duration
	// Listen, when set, hears the finishing transactions' notifications
	// (store.Listen) for the waiting requests.
	Listen bool
	// PublicRateLimit and TrustedProxies are the api's.
	PublicRateLimit intake.RateLimit
	TrustedProxies  []netip.Prefix
	// Spam, when set, is the spam policy of client a's publishable key:
	// the YAML of its spam member, such as "{min_seconds: 3}".
	Spam string
	// DuplicateWindow is the api's DUPLICATE_WINDOW; zero for none.
	DuplicateWindow time.Duration
}

// testAPI is the public API served over real HTTP, on a database of its own,
// with a River insert-only client that writes real river_job rows.
type testAPI struct {
	// Pool reaches the test database directly, never through a proxy: for
	// assertions and for writing rows by hand.
	Pool *pgxpool.Pool
	// Store is the API's own store, for what an operator does beside it.
	Store  *store.Store
	URL    string
	client *http.Client
	// Logs holds everything the API logged.
	Logs *testkit.LockedBuffer
}

// newTestAPI starts the API for one test. Its log is shown if the test fails.
func newTestAPI(t testing.TB, opts *testAPIOpts) *testAPI {
	t.Helper()
	_, pool := dbtest.New(t)
	return newTestAPIOn(t, pool, opts)
}

// newTestAPIOn is newTestAPI on an existing database, reached directly by
// pool.
func newTestAPIOn(t testing.TB, pool *pgxpool.Pool, opts *testAPIOpts) *testAPI {
	t.Helper()
	if opts == nil {
		opts = &testAPIOpts{}
	}
	storePool := cmp.Or(opts.Pool, pool)
	riverClient, err := river.NewClient(riverpgxv5.New(storePool), &river.Config{
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	clients := testClientsWith(t, opts.Spam)

	logs := &testkit.LockedBuffer{}
	t.Cleanup(func() {
		// Runs after the server's Close (cleanups run last first), which
		// waits for every request: the log is complete.
		if t.Failed() {
			t.Logf("API log:\n%s", logs.String())
		}
	})
	var metrics *intake.Metrics
	if opts.Registry != nil {
		metrics = intake.NewMetrics(opts.Registry)
	}
	waiters := intake.NewWaiters(0)
	if opts.Listen {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			store.Listen(ctx, storePool.Config().ConnConfig.Copy(), store.ListenOpts{Finished: waiters.Finished, Up: waiters.Listening})
		}()
		t.Cleanup(func() { cancel(); <-done })
	}
	st := store.New(storePool)
	st.UseJobs(jobs.NewQueue(riverClient, callers.NewHolder(clients)))
	st.FlagDuplicates(opts.DuplicateWindow)
	if err := st.GroupClaims(store.GroupOpts{}); err != nil {
		t.Fatal(err)
	}
	handler := intake.NewHandler(&intake.HandlerOpts{
		HashKey:         lead.HashKey("intake-test-pii-hash-key-0123456789"),
		Waiters:         waiters,
		MaxWait:         opts.MaxWait,
		PublicRateLimit: opts.PublicRateLimit,
		TrustedProxies:  opts.TrustedProxies,
		Store:           st,
		Callers:         callers.NewHolder(clients),
		Decode:          lead.DecodeOpts{AllowedSources: []string{"website", "linkedin", "referral", "ads", "event"}},
		MaxBodyBytes:    opts.MaxBodyBytes,
		RequestTimeout:  cmp.Or(opts.RequestTimeout, testkit.Patience),
		Logger:          slog.New(slog.NewTextHandler(logs, nil)),
		Metrics:         metrics,
	})
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)

	client := srv.Client()
	client.Timeout = testkit.Patience
	return &testAPI{Pool: pool, Store: st, URL: srv.URL, client: client, Logs: logs}
}

// testClients are the clients of every test: a, with a token, a
// publishable key for shopOrigin and a webhook secret, and b, with a token.
func testClients(t testing.TB) *callers.Set {
	t.Helper()
	return testClientsWith(t, "")
}

// testClientsWith are testClients, with spam (the YAML of a spam member) as
// the spam policy of a's publishable key; none when empty.
func testClientsWith(t testing.TB, spam string) *callers.Set {
	t.Helper()
	policy := ""
	if spam != "" {
		policy = "\n        spam: " + spam
	}
	clients, err := callers.ParseFile(fmt.Appendf(nil, `
clients:
  - id: a
    tokens_sha256: [%s]
    publishable_keys:
      - key: %s
        origins: [%s]%s
    webhook_secret: %s
  - id: b
    tokens_sha256: [%s]
`, tokenHash(tokenA), publishableKeyA, shopOrigin, policy, webhookSecretA, tokenHash(tokenB)))
	if err != nil {
		t.Fatal(err)
	}
	return clients
}

func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// submission returns POST /v1/leads as client a sends it: with its token, the
// key, and a JSON content type. Edits change it before it is sent.
func (a *testAPI) submission(key, body string, edits ...func(*http.Request)) *http.Request {
	req, err := http.NewRequest(http.MethodPost, a.URL+"/v1/leads", strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", "Bearer "+tokenA)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	for _, edit := range edits {
		edit(req)
	}
	return req
}

// operation returns GET /v1/operations/{key} as the client of token sends it.
func (a *testAPI) operation(token, key string) *http.Request {
	req, err := http.NewRequest(http.MethodGet, a.URL+"/v1/operations/"+key, nil)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

// newRequest returns a request without a body and without credentials.
func newRequest(t *testing.T, api *testAPI, method, path string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, api.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// Request edits.

func withHeader(name, value string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set(name, value) }
}

func withHeaders(name string, values ...string) func(*http.Request) {
	return func(r *http.Request) { r.Header[http.CanonicalHeaderKey(name)] = values }
}

func withoutHeader(name string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Del(name) }
}

// chunked sends the body with Transfer-Encoding: chunked, without a length.
func chunked(r *http.Request) {
	r.Body = io.NopCloser(r.Body)
	r.ContentLength = -1
	r.GetBody = nil
}

// reply is an answer of the API, its body read.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// send sends req and reads the answer. It fails the test if there is none
// within testkit.Patience, and checks what every answer must carry: an
// X-Request-Id.
func (a *testAPI) send(t testing.TB, req *http.Request) *reply {
	t.Helper()
	res, err := a.trySend(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// trySend is send for goroutines other than the test's: it returns what send
// would fail the test with.
func (a *testAPI) trySend(req *http.Request) (*reply, error) {
	res, err := a.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read body: %w", req.Method, req.URL.Path, err)
	}
	if res.Header.Get("X-Request-Id") == "" {
		return nil, fmt.Errorf("%s %s: %d without X-Request-Id", req.Method, req.URL.Path, res.StatusCode)
	}
	return &reply{Status: res.StatusCode, Header: res.Header, Body: body}, nil
}

// processing is the 202 body of a submission in progress.
type processing struct {
	Status         string `json:"status"`
	IdempotencyKey string `json:"idempotency_key"`
	LeadID         string `json:"lead_id"`
	StatusURL      string `json:"status_url"`
}

// requireAccepted checks a 202 for key, with its headers, and returns its
// body.
func (r *reply) requireAccepted(t *testing.T, key string, replayed bool) processing {
	t.Helper()
	body, err := r.accepted(key, replayed)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func (r *reply) accepted(key string, replayed bool) (processing, error) {
	var body processing
	if r.Status != http.StatusAccepted {
		return body, fmt.Errorf("status %d %s, want 202", r.Status, r.Body)
	}
	if err := decodeStrict(r.Body, &body); err != nil {
		return body, fmt.Errorf("202 body %s: %w", r.Body, err)
	}
	statusURL := "/v1/operations/" + key
	want := map[string]string{
		"Idempotency-Key":     key,
		"Idempotent-Replayed": fmt.Sprint(replayed),
		"Location":            statusURL,
		"Retry-After":         "1",
	}
	for name, value := range want {
		if got := r.Header.Get(name); got != value {
			return body, fmt.Errorf("202 header %s: %q, want %q", name, got, value)
		}
	}
	if body.IdempotencyKey != key || body.StatusURL != statusURL || body.LeadID == "" ||
		(body.Status != string(lead.KeyProcessing) && body.Status != string(lead.KeyNeedsReconciliation)) {
		return body, fmt.Errorf("202 body %s does not describe key %q in progress", r.Body, key)
	}
	return body, nil
}

// apiError is the body of every error answer.
type apiError struct {
	Error struct {
		Code    response.Code     `json:"code"`
		Message string            `json:"message"`
		Details []response.Detail `json:"details"`
	} `json:"error"`
}

// requireError checks an error answer: its status, its code, and the shape of
// its body. It returns the body.
func (r *reply) requireError(t *testing.T, status int, code response.Code) apiError {
	t.Helper()
	body, err := r.error(status, code)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func (r *reply) error(status int, code response.Code) (apiError, error) {
	var body apiError
	if r.Status != status {
		return body, fmt.Errorf("status %d %s, want %d %s", r.Status, r.Body, status, code)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		return body, fmt.Errorf("error with Content-Type %q, want application/json", ct)
	}
	if err := decodeStrict(r.Body, &body); err != nil {
		return body, fmt.Errorf("error body %s: %w", r.Body, err)
	}
	if body.Error.Code != code || body.Error.Message == "" {
		return body, fmt.Errorf("error body %s, want code %q and a message", r.Body, code)
	}
	return body, nil
}

// fields returns the sorted field names of the details.
func (e apiError) fields() []string {
	var fields []string
	for _, d := range e.Error.Details {
		fields = append(fields, d.Field)
	}
	slices.Sort(fields)
	return fields
}

// decodeStrict decodes one JSON value that has exactly the members of v.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data")
	}
	return nil
}

// rowCounts are the rows a claim writes.
type rowCounts struct{ Leads, Keys, Jobs int }

func countRows(t *testing.T, pool *pgxpool.Pool) rowCounts {
	t.Helper()
	var c rowCounts
	err := pool.QueryRow(context.Background(), `
SELECT (SELECT count(*) FROM leads), (SELECT count(*) FROM idempotency_keys),
       (SELECT count(*) FROM river_job WHERE kind = 'process_lead')`).Scan(&c.Leads, &c.Keys, &c.Jobs)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func requireRows(t *testing.T, pool *pgxpool.Pool, want rowCounts) {
	t.Helper()
	if got := countRows(t, pool); got != want {
		t.Fatalf("rows: %+v, want %+v", got, want)
	}
}

// keyStored reports whether client has a row for key.
func keyStored(t *testing.T, pool *pgxpool.Pool, clientID, key string) bool {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(),
		"SELECT count(*) FROM idempotency_keys WHERE client_id = $1 AND key = $2", clientID, key).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// together runs f(i) for i in [0, n) in n goroutines released at once, and
// waits for them.
func together(n int, f func(i int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}

// operationBody is the body of GET /v1/operations/{key}.
type operationBody struct {
	IdempotencyKey string  `json:"idempotency_key"`
	State          string  `json:"state"`
	LeadID         string  `json:"lead_id"`
	CreatedAt      string  `json:"created_at"`
	UpdatedAt      string  `json:"updated_at"`
	ExpiresAt      *string `json:"expires_at"`
	Response       *struct {
		Status int             `json:"status"`
		Body   json.RawMessage `json:"body"`
	} `json:"response"`
	Supersedes   *string `json:"supersedes"`
	SupersededBy *string `json:"superseded_by"`
}
