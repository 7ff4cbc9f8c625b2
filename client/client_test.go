package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leadintake/leadintake/client"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const token = "test-token"

var leadJSON = json.RawMessage(`{"email":"ada@example.com","source":"referral","name":"Ada"}`)

// seen is one request as the test server received it.
type seen struct {
	method, path        string
	key, supersedes     string
	prefer, auth, ctype string
	body                []byte
}

// server is a stand-in for the leadintake service that answers each request
// with the test's handler, given the request's number (from 0) among those
// to the same method, and records every request.
type server struct {
	t  *testing.T
	ts *httptest.Server

	mu     sync.Mutex
	seen   []seen
	counts map[string]int
}

type handler func(w http.ResponseWriter, r *http.Request, n int)

func newServer(t *testing.T, h handler) *server {
	t.Helper()
	s := &server{t: t, counts: map[string]int{}}
	s.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		s.mu.Lock()
		n := s.counts[r.Method]
		s.counts[r.Method]++
		s.seen = append(s.seen, seen{
			method: r.Method, path: r.URL.EscapedPath(),
			key: r.Header.Get("Idempotency-Key"), supersedes: r.Header.Get("Supersedes"),
			prefer: r.Header.Get("Prefer"), auth: r.Header.Get("Authorization"), ctype: r.Header.Get("Content-Type"),
			body: body,
		})
		s.mu.Unlock()
		h(w, r, n)
	}))
	t.Cleanup(s.ts.Close)
	return s
}

// requests returns the requests of method received so far.
func (s *server) requests(method string) []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []seen
	for _, r := range s.seen {
		if r.method == method {
			out = append(out, r)
		}
	}
	return out
}

// requireSameRequest checks that every POST carried one key and the very
// same bytes, and returns the key.
func (s *server) requireSameRequest(want []byte) string {
	s.t.Helper()
	posts := s.requests(http.MethodPost)
	if len(posts) == 0 {
		s.t.Fatal("no POST reached the server")
	}
	key := posts[0].key
	for i, p := range posts {
		if p.key != key || !bytes.Equal(p.body, want) || p.path != "/v1/leads" ||
			p.auth != "Bearer "+token || !strings.HasPrefix(p.ctype, "application/json") {
			s.t.Fatalf("POST %d: key %q path %s auth %q type %q body %s; want key %q and body %s",
				i, p.key, p.path, p.auth, p.ctype, p.body, key, want)
		}
	}
	return key
}

// clock records the waits a Client asks for and skips them.
type clock struct {
	mu     sync.Mutex
	sleeps []time.Duration
	// onSleep, when set, runs at each wait (to cancel a context, say).
	onSleep func(n int)
}

func (c *clock) sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	n := len(c.sleeps)
	f := c.onSleep
	c.mu.Unlock()
	if f != nil {
		f(n)
	}
	return ctx.Err()
}

func (c *clock) waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// newClient returns a client of s whose waits clk records; opts may be nil.
func newClient(t *testing.T, s *server, clk *clock, opts *client.Options) *client.Client {
	t.Helper()
	o := client.Options{Timeout: 5 * time.Second, MaxWait: -1}
	if opts != nil {
		o = *opts
	}
	o.HTTPClient = s.ts.Client()
	o.Sleep = clk.sleep
	c, err := client.New(s.ts.URL, token, &o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

func errorJSON(code, message string) string {
	return fmt.Sprintf(`{"error":{"code":%q,"message":%q}}`, code, message)
}

func completedJSON(leadID string) string {
	return `{"status":"completed","lead_id":"` + leadID + `","crm_id":"crm_000001","score":85,"tier":"hot","notified":true,"warnings":["enrichment_unavailable"]}`
}

func accepted(w http.ResponseWriter, r *http.Request, leadID string) {
	key := r.Header.Get("Idempotency-Key")
	w.Header().Set("Location", "/v1/operations/"+key)
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusAccepted, `{"status":"processing","idempotency_key":"`+key+`","lead_id":"`+leadID+`","status_url":"/v1/operations/`+key+`"}`)
}

func operationJSON(key, state string, status int, body string) string {
	resp := "null"
	if body != "" {
		resp = fmt.Sprintf(`{"status":%d,"body":%s}`, status, body)
	}
	return fmt.Sprintf(`{"idempotency_key":%q,"state":%q,"lead_id":"L1","created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:06Z","expires_at":null,"response":%s}`, key, state, resp)
}

// The store is unavailable twice (503 with Retry-After), then the lead is
// stored and finishes at once: three POSTs with one key and one body, the
// waits the server asked for, and the completed result.
func TestSubmit503RetryAfter(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n < 2 {
			w.Header().Set("Retry-After", "2")
			writeJSON(w, http.StatusServiceUnavailable, errorJSON("store_unavailable", "retry"))
			return
		}
		writeJSON(w, http.StatusCreated, completedJSON("L1"))
	})
	clk := &clock{}
	res, err := newClient(t, s, clk, nil).Submit(t.Context(), leadJSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := s.requireSameRequest(leadJSON)
	if got := len(s.requests(http.MethodPost)); got != 3 {
		t.Fatalf("%d POSTs, want 3", got)
	}
	if res.Key != key || res.StatusCode != 201 || res.LeadID != "L1" || res.CRMID != "crm_000001" ||
		res.Score != 85 || res.Tier != "hot" || !res.Notified || len(res.Warnings) != 1 || string(res.Body) != completedJSON("L1") {
		t.Fatalf("result %+v", res)
	}
	waits := clk.waits()
	if len(waits) != 2 {
		t.Fatalf("waits %v, want 2", waits)
	}
	for _, d := range waits {
		if d < 2*time.Second || d > 2200*time.Millisecond {
			t.Fatalf("waits %v, want Retry-After's 2s plus at most a tenth", waits)
		}
	}
}

// A 429 with Retry-After is retried after it; then the lead is accepted
// (202) and polled until its final answer. The server does not hold
// requests: the client polls at the pace of the 202's Retry-After.
func TestSubmit429Then202ThenFinal(t *testing.T) {
	t.Parallel()
	var key string
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch {
		case r.Method == http.MethodPost && n == 0:
			w.Header().Set("Retry-After", "3")
			writeJSON(w, http.StatusTooManyRequests, errorJSON("rate_limited", "slow down"))
		case r.Method == http.MethodPost:
			key = r.Header.Get("Idempotency-Key")
			accepted(w, r, "L1")
		case n < 2:
			writeJSON(w, http.StatusOK, operationJSON(key, "processing", 0, ""))
		default:
			writeJSON(w, http.StatusOK, operationJSON(key, "completed", 201, completedJSON("L1")))
		}
	})
	clk := &clock{}
	var events []client.Event
	c := newClient(t, s, clk, &client.Options{Timeout: 5 * time.Second, Events: func(e client.Event) { events = append(events, e) }})
	res, err := c.Submit(t.Context(), leadJSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.requireSameRequest(leadJSON)
	gets := s.requests(http.MethodGet)
	if len(gets) != 3 || gets[0].path != "/v1/operations/"+key || gets[0].auth != "Bearer "+token {
		t.Fatalf("GETs %+v", gets)
	}
	for _, r := range append(s.requests(http.MethodPost), gets...) {
		if !strings.HasPrefix(r.prefer, "wait=") {
			t.Fatalf("%s without Prefer: wait", r.method)
		}
	}
	if res.LeadID != "L1" || res.Key != key || string(res.Body) != completedJSON("L1") {
		t.Fatalf("result %+v", res)
	}
	waits := clk.waits()
	if len(waits) != 4 || waits[0] < 3*time.Second {
		t.Fatalf("waits %v, want 3s (the 429's Retry-After), then the pace of three polls", waits)
	}
	for _, d := range waits[1:] {
		if d <= 500*time.Millisecond || d > time.Second {
			t.Fatalf("waits %v: polls not at the 202's Retry-After (1s)", waits)
		}
	}
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, e.Kind.String())
	}
	if want := "send retry send accepted send send send final"; strings.Join(kinds, " ") != want {
		t.Fatalf("events %v, want %s", kinds, want)
	}
}

// The server reads the request, commits, and drops the connection without
// an answer; the retry carries the same key and bytes and gets the stored
// answer.
func TestSubmitDroppedConnection(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, http.StatusCreated, completedJSON("L1"))
	})
	clk := &clock{}
	res, err := newClient(t, s, clk, nil).Submit(t.Context(), leadJSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.requireSameRequest(leadJSON)
	if len(s.requests(http.MethodPost)) != 2 || res.LeadID != "L1" {
		t.Fatalf("%d POSTs, result %+v", len(s.requests(http.MethodPost)), res)
	}
	if len(clk.waits()) != 1 {
		t.Fatalf("waits %v, want one back-off", clk.waits())
	}
}

// The first answer never comes: the attempt is abandoned after Timeout and
// the retry, same key and bytes, is answered.
func TestSubmitHungResponse(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			<-r.Context().Done() // until the client gives up
			return
		}
		writeJSON(w, http.StatusCreated, completedJSON("L1"))
	})
	clk := &clock{}
	var retries []client.Event
	c := newClient(t, s, clk, &client.Options{Timeout: 200 * time.Millisecond, MaxWait: -1, Events: func(e client.Event) {
		if e.Kind == client.EventRetry {
			retries = append(retries, e)
		}
	}})
	start := time.Now()
	res, err := c.Submit(t.Context(), leadJSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.requireSameRequest(leadJSON)
	if res.LeadID != "L1" || len(s.requests(http.MethodPost)) != 2 {
		t.Fatalf("result %+v after %d POSTs", res, len(s.requests(http.MethodPost)))
	}
	if len(retries) != 1 || !errors.Is(retries[0].Err, context.DeadlineExceeded) || !strings.Contains(retries[0].Err.Error(), "no answer within 200ms") {
		t.Fatalf("retries %+v", retries)
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Fatalf("gave up on the first attempt after %s", el)
	}
}

// Final refusals are returned at once, typed, without a retry.
func TestSubmitRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		body   string
		code   string
	}{
		{"Validation", 422, `{"error":{"code":"validation_failed","message":"the lead breaks rules","details":[{"field":"email","problem":"not an address"}]}}`, client.CodeValidationFailed},
		{"KeyReused", 422, errorJSON("idempotency_key_reused", "this key was used with another body"), client.CodeKeyReused},
		{"Unauthorized", 401, errorJSON("unauthorized", "the bearer token is not valid"), client.CodeUnauthorized},
		{"AlreadySuperseded", 409, errorJSON("already_superseded", "superseded by another key"), client.CodeAlreadySuperseded},
		{"NotTheService", 404, `<html>not here</html>`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
				w.Header().Set("X-Request-Id", "req-1")
				writeJSON(w, tc.status, tc.body)
			})
			clk := &clock{}
			res, err := newClient(t, s, clk, nil).Submit(t.Context(), leadJSON, &client.SubmitOptions{Key: "caller-key-0001"})
			var apiErr *client.APIError
			if res != nil || !errors.As(err, &apiErr) || !client.IsFinal(err) {
				t.Fatalf("Submit: %v, %v; want an *APIError", res, err)
			}
			if apiErr.StatusCode != tc.status || apiErr.Code != tc.code || apiErr.Key != "caller-key-0001" ||
				apiErr.RequestID != "req-1" || string(apiErr.Body) != tc.body {
				t.Fatalf("APIError %+v", apiErr)
			}
			if tc.code == client.CodeValidationFailed && (len(apiErr.Details) != 1 || apiErr.Details[0].Field != "email" ||
				!strings.Contains(err.Error(), "email: not an address")) {
				t.Fatalf("details %+v, error %q", apiErr.Details, err)
			}
			var unknown *client.OutcomeUnknownError
			if errors.As(err, &unknown) {
				t.Fatal("a refusal is also an OutcomeUnknownError")
			}
			if n := len(s.requests(http.MethodPost)); n != 1 || len(clk.waits()) != 0 {
				t.Fatalf("%d POSTs, waits %v; want one POST and no retry", n, clk.waits())
			}
			if k := s.requests(http.MethodPost)[0].key; k != "caller-key-0001" {
				t.Fatalf("sent key %q, want the caller's", k)
			}
		})
	}
}

// A lead that failed for good is a *Failed with its stored body, whether
// the final response comes from a poll or from the POST; a 502 that is not
// a final response (a gateway's) is retried.
func TestSubmitFailed(t *testing.T) {
	t.Parallel()
	crmRejected := `{"status":"failed","lead_id":"L1","error":{"code":"crm_rejected","message":"the CRM refused the lead"}}`
	unavailable := `{"status":"failed","lead_id":"L1","error":{"code":"downstream_unavailable","message":"gave up"}}`

	t.Run("FromPoll", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if r.Method == http.MethodPost {
				accepted(w, r, "L1")
				return
			}
			writeJSON(w, http.StatusOK, operationJSON("k", "failed", 422, crmRejected))
		})
		_, err := newClient(t, s, &clock{}, nil).Submit(t.Context(), leadJSON, nil)
		var failed *client.Failed
		if !errors.As(err, &failed) || failed.Code != client.CodeCRMRejected || failed.StatusCode != 422 ||
			failed.LeadID != "L1" || string(failed.Body) != crmRejected || failed.Reopenable() || !client.IsFinal(err) {
			t.Fatalf("Submit: %v (%+v)", err, failed)
		}
	})

	t.Run("FromPOST", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 0 {
				writeJSON(w, http.StatusBadGateway, `<html>bad gateway</html>`)
				return
			}
			w.Header().Set("Idempotent-Replayed", "true")
			writeJSON(w, http.StatusBadGateway, unavailable)
		})
		clk := &clock{}
		_, err := newClient(t, s, clk, nil).Submit(t.Context(), leadJSON, nil)
		var failed *client.Failed
		if !errors.As(err, &failed) || failed.Code != client.CodeDownstreamUnavailable || !failed.Reopenable() {
			t.Fatalf("Submit: %v", err)
		}
		s.requireSameRequest(leadJSON)
		if len(s.requests(http.MethodPost)) != 2 || len(clk.waits()) != 1 {
			t.Fatalf("%d POSTs, waits %v", len(s.requests(http.MethodPost)), clk.waits())
		}
	})
}

// The context ends while the service keeps failing: an
// *OutcomeUnknownError with the key, and resuming with that key sends the
// same request and gets the answer.
func TestSubmitOutcomeUnknownAndResume(t *testing.T) {
	t.Parallel()
	var down sync.Mutex
	healthy := false
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		down.Lock()
		ok := healthy
		down.Unlock()
		if !ok {
			writeJSON(w, http.StatusServiceUnavailable, errorJSON("store_unavailable", "retry"))
			return
		}
		writeJSON(w, http.StatusCreated, completedJSON("L1"))
	})
	ctx, cancel := context.WithCancel(t.Context())
	clk := &clock{onSleep: func(n int) {
		if n == 3 {
			cancel()
		}
	}}
	c := newClient(t, s, clk, nil)
	_, err := c.Submit(ctx, leadJSON, nil)
	var unknown *client.OutcomeUnknownError
	if !errors.As(err, &unknown) || client.IsFinal(err) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Submit: %v, want an *OutcomeUnknownError", err)
	}
	key := s.requireSameRequest(leadJSON)
	if unknown.Key != key || unknown.Accepted || unknown.Attempts != 3 || !strings.Contains(err.Error(), "503") {
		t.Fatalf("OutcomeUnknownError %+v: %v", unknown, err)
	}

	down.Lock()
	healthy = true
	down.Unlock()
	res, err := c.Submit(t.Context(), leadJSON, &client.SubmitOptions{Key: unknown.Key})
	if err != nil || res.Key != key {
		t.Fatalf("resume: %v, %v", res, err)
	}
	s.requireSameRequest(leadJSON)
}

// Accepted, then the context ends while the lead is processed: the
// *OutcomeUnknownError says the lead was accepted, and Wait with its key
// gets the final answer.
func TestSubmitAcceptedThenGaveUpThenWait(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	done := false
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.Method == http.MethodPost {
			accepted(w, r, "L1")
			return
		}
		mu.Lock()
		d := done
		mu.Unlock()
		key := strings.TrimPrefix(r.URL.Path, "/v1/operations/")
		if !d {
			writeJSON(w, http.StatusOK, operationJSON(key, "needs_reconciliation", 0, ""))
			return
		}
		writeJSON(w, http.StatusOK, operationJSON(key, "completed", 201, completedJSON("L1")))
	})
	ctx, cancel := context.WithCancel(t.Context())
	clk := &clock{onSleep: func(n int) {
		if n == 2 {
			cancel()
		}
	}}
	c := newClient(t, s, clk, nil)
	_, err := c.Submit(ctx, leadJSON, nil)
	var unknown *client.OutcomeUnknownError
	if !errors.As(err, &unknown) || !unknown.Accepted || unknown.LeadID != "L1" || unknown.State != "needs_reconciliation" {
		t.Fatalf("Submit: %v (%+v)", err, unknown)
	}

	mu.Lock()
	done = true
	mu.Unlock()
	res, err := c.Wait(t.Context(), unknown.Key)
	if err != nil || res.LeadID != "L1" || res.Key != unknown.Key {
		t.Fatalf("Wait: %+v, %v", res, err)
	}
	if got := len(s.requests(http.MethodPost)); got != 1 {
		t.Fatalf("%d POSTs, want 1: waiting does not submit again", got)
	}
}

// A server that honours Prefer: wait holds the poll until the lead
// finishes: the client does not add waits of its own.
func TestWaitPreferHonoured(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		key := strings.TrimPrefix(r.URL.Path, "/v1/operations/")
		wait := strings.TrimPrefix(r.Header.Get("Prefer"), "wait=")
		if _, err := strconv.Atoi(wait); err != nil {
			writeJSON(w, http.StatusOK, operationJSON(key, "processing", 0, ""))
			return
		}
		w.Header().Set("Preference-Applied", "wait="+wait)
		time.Sleep(300 * time.Millisecond) // held until the lead finishes
		if n == 0 {
			writeJSON(w, http.StatusOK, operationJSON(key, "processing", 0, ""))
			return
		}
		writeJSON(w, http.StatusOK, operationJSON(key, "completed", 201, completedJSON("L1")))
	})
	clk := &clock{}
	c := newClient(t, s, clk, &client.Options{Timeout: 5 * time.Second, MaxWait: 7 * time.Second, PollInterval: 200 * time.Millisecond})
	res, err := c.Wait(t.Context(), "waited-key-0001")
	if err != nil || res.LeadID != "L1" {
		t.Fatalf("Wait: %+v, %v", res, err)
	}
	gets := s.requests(http.MethodGet)
	if len(gets) != 2 || gets[0].prefer != "wait=7" || gets[0].path != "/v1/operations/waited-key-0001" {
		t.Fatalf("GETs %+v", gets)
	}
	if len(clk.waits()) != 0 {
		t.Fatalf("waits %v: the held poll was followed by a wait", clk.waits())
	}
}

// Wait and Status of a key the service does not know: a final *APIError.
func TestWaitAndStatusUnknownKey(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, http.StatusNotFound, errorJSON("not_found", "no operation with this key"))
	})
	c := newClient(t, s, &clock{}, nil)
	var apiErr *client.APIError
	if _, err := c.Wait(t.Context(), "no-such-key-01"); !errors.As(err, &apiErr) || apiErr.Code != client.CodeNotFound {
		t.Fatalf("Wait: %v", err)
	}
	if _, err := c.Status(t.Context(), "no-such-key-01"); !errors.As(err, &apiErr) || apiErr.Code != client.CodeNotFound {
		t.Fatalf("Status: %v", err)
	}
}

// Status reports the operation as it stands, retrying a 503, with the key
// percent-encoded in the path.
func TestStatus(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			writeJSON(w, http.StatusServiceUnavailable, errorJSON("store_unavailable", "retry"))
			return
		}
		writeJSON(w, http.StatusOK, operationJSON("a:b~key.1", "completed", 201, completedJSON("L1")))
	})
	clk := &clock{}
	op, err := newClient(t, s, clk, nil).Status(t.Context(), "a:b~key.1")
	if err != nil {
		t.Fatal(err)
	}
	if !op.Finished() || op.State != client.StateCompleted || op.Key != "a:b~key.1" || op.LeadID != "L1" ||
		op.Response.Status != 201 || string(op.Response.Body) != completedJSON("L1") || op.CreatedAt.IsZero() ||
		!bytes.Contains(op.Raw, []byte(`"state":"completed"`)) {
		t.Fatalf("operation %+v", op)
	}
	if gets := s.requests(http.MethodGet); len(gets) != 2 || gets[1].path != "/v1/operations/a:b~key.1" || len(clk.waits()) != 1 {
		t.Fatalf("GETs %+v, waits %v", gets, clk.waits())
	}
}

// Amend sends a new key with Supersedes naming the earlier one.
func TestAmend(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, http.StatusCreated, `{"status":"completed","lead_id":"L2","crm_id":"crm_1","score":40,"tier":"cold","notified":true,"warnings":[],"amends":"L1"}`)
	})
	edited := json.RawMessage(`{"email":"ada@example.org","source":"referral"}`)
	res, err := newClient(t, s, &clock{}, nil).Amend(t.Context(), "earlier-key-01", edited, nil)
	if err != nil {
		t.Fatal(err)
	}
	post := s.requests(http.MethodPost)[0]
	if post.supersedes != "earlier-key-01" || post.key == "earlier-key-01" || post.key == "" || res.Amends != "L1" {
		t.Fatalf("POST %+v, result %+v", post, res)
	}
}

// A struct is encoded once; a value that is not a JSON object is refused
// before anything is sent.
func TestSubmitEncodesOnce(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			writeJSON(w, http.StatusInternalServerError, errorJSON("internal_error", "internal error"))
			return
		}
		writeJSON(w, http.StatusCreated, completedJSON("L1"))
	})
	c := newClient(t, s, &clock{}, nil)
	lead := struct {
		Email  string `json:"email"`
		Source string `json:"source"`
	}{"ada@example.com", "website"}
	if _, err := c.Submit(t.Context(), lead, nil); err != nil {
		t.Fatal(err)
	}
	s.requireSameRequest([]byte(`{"email":"ada@example.com","source":"website"}`))

	for _, bad := range []any{json.RawMessage(`{"email":`), []byte(`[1]`), 42} {
		if _, err := c.Submit(t.Context(), bad, nil); err == nil || client.IsFinal(err) {
			t.Fatalf("Submit(%v): %v, want a local error", bad, err)
		}
	}
	if n := len(s.requests(http.MethodPost)); n != 2 {
		t.Fatalf("%d POSTs: a bad lead was sent", n)
	}
}

// Go's transport re-sends a POST with an Idempotency-Key by itself when the
// kept-alive connection it reused is closed without an answer. The client
// relies on that being the same request: the server sees two identical
// POSTs, the client counts one attempt.
func TestTransportResendIsTheSameRequest(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.Method == http.MethodGet {
			writeJSON(w, http.StatusOK, operationJSON("warm-up-key-1", "processing", 0, ""))
			return
		}
		if n == 0 {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		writeJSON(w, http.StatusCreated, completedJSON("L1"))
	})
	var sends int
	clk := &clock{}
	c := newClient(t, s, clk, &client.Options{Timeout: 5 * time.Second, MaxWait: -1, Events: func(e client.Event) {
		if e.Kind == client.EventSend && e.Method == http.MethodPost {
			sends++
		}
	}})
	// Warm a kept-alive connection, for the POST to reuse.
	if _, err := c.Status(t.Context(), "warm-up-key-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(t.Context(), leadJSON, nil); err != nil {
		t.Fatal(err)
	}
	s.requireSameRequest(leadJSON)
	if posts := len(s.requests(http.MethodPost)); posts != 2 || sends != 1 || len(clk.waits()) != 0 {
		t.Fatalf("%d POSTs at the server, %d sent by the client, waits %v; want the transport's own re-send", posts, sends, clk.waits())
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, token string }{
		{"ftp://example.com", token}, {"http://", token}, {"http://example.com?x=1", token},
		{"http://example.com", ""}, {"http://example.com", "a\nb"}, {":", token},
	} {
		if _, err := client.New(tc.url, tc.token, nil); err == nil {
			t.Errorf("New(%q, %q): no error", tc.url, tc.token)
		}
	}
	if _, err := client.New("https://leads.example.com/base/", token, nil); err != nil {
		t.Fatal(err)
	}
}

func TestNewKey(t *testing.T) {
	t.Parallel()
	seenKeys := map[string]bool{}
	for range 1000 {
		k := client.NewKey()
		if len(k) != 36 || seenKeys[k] || !strings.ContainsAny(k, "abcdef") || k[14] != '4' {
			t.Fatalf("key %q", k)
		}
		seenKeys[k] = true
	}
}
