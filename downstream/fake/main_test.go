package fake_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/testkit"
)

// TestMain fails the package when goroutines outlive its tests: hung
// requests must end when the fake is closed.
func TestMain(m *testing.M) { testkit.Main(m) }

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
