package fake_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
)

// TestMain fails the package when goroutines outlive its tests: hung
// requests must end when the fake is closed. go.uber.org/goleak is not a
// dependency of the module, so the check is done by hand on the stacks.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := checkGoroutines(10 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// checkGoroutines waits up to timeout for every goroutine but the test
// runtime's own to end, and reports those left.
func checkGoroutines(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		left := strayGoroutines()
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d goroutines outlived the tests:\n\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func strayGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var left []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		switch {
		case strings.Contains(g, "strayGoroutines"), // this one
			strings.Contains(g, "testing.(*M)."),
			strings.Contains(g, "testing.runTests"),
			strings.Contains(g, "os/signal.signal_recv"),
			strings.Contains(g, "runtime.ensureSigM"):
			continue
		}
		left = append(left, g)
	}
	return left
}

// bundle is one fake served over HTTP/1.1 with a client of its own.
type bundle struct {
	fake   *fake.Server
	url    string
	client *http.Client
}

// setup serves a fake with opts. Its client opens a connection per request,
// so that a dropped connection is never retried by the transport (see
// TestTransportReplaysDroppedIdempotentRequest).
func setup(t *testing.T, opts *fake.Options) *bundle {
	t.Helper()
	s := fake.New(opts)
	ts := httptest.NewServer(s)
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	t.Cleanup(ts.Close)
	t.Cleanup(s.Close) // first: ends hung requests, which ts.Close waits for
	return &bundle{fake: s, url: ts.URL, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// response is an answer read in full.
type response struct {
	status int
	header http.Header
	body   []byte
}

// decode decodes the body into a map, failing the test on bad JSON.
func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return m
}

// do sends a request; body is JSON-encoded unless it is a string; headers
// are name, value pairs.
func (b *bundle) do(method, path string, body any, headers ...string) (response, error) {
	return doWith(b.client, method, b.url+path, body, headers...)
}

func doWith(client *http.Client, method, url string, body any, headers ...string) (response, error) {
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{resp.StatusCode, resp.Header, b}, nil
}

// mustDo is do, failing the test on a transport error.
func (b *bundle) mustDo(t *testing.T, method, path string, body any, headers ...string) response {
	t.Helper()
	r, err := b.do(method, path, body, headers...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// lead is a CRM body for ref.
func lead(ref string) map[string]any {
	return map[string]any{
		"lead_id":      "7f1d2c3e-0000-4000-8000-000000000001",
		"external_ref": ref,
		"email":        "ada@example.com",
		"name":         "Ada",
		"company":      "Analytical Engines",
		"source":       "referral",
		"score":        85,
		"tier":         "hot",
		"enrichment":   map[string]any{"company_size": 35, "industry": "software"},
	}
}

// upsert PUTs lead(ref) with its Idempotency-Key.
func (b *bundle) upsert(ref string) (response, error) {
	return b.do(http.MethodPut, "/crm/leads/"+ref, lead(ref), "Idempotency-Key", ref)
}

// create POSTs lead(ref) with its Idempotency-Key.
func (b *bundle) create(ref string) (response, error) {
	return b.do(http.MethodPost, "/crm/leads", lead(ref), "Idempotency-Key", ref)
}

// notify POSTs a notification for ref.
func (b *bundle) notify(ref string) (response, error) {
	return b.do(http.MethodPost, "/notify", map[string]any{
		"lead_id": "7f1d2c3e-0000-4000-8000-000000000001", "external_ref": ref,
		"score": 85, "tier": "hot", "email": "ada@example.com", "name": "Ada", "company": "Analytical Engines",
	}, "Idempotency-Key", ref+":notify")
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
