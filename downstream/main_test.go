package downstream_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/downstream"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/lead"
)

// patience bounds every call a test expects to return: far longer than any
// takes on a healthy machine.
const patience = 30 * time.Second

// enrichmentToken is the token the test clients send.
const enrichmentToken = "enrichment-token"

// testBundle is one Client whose enrichment service is served by a test
// server, over real HTTP.
type testBundle struct {
	client *downstream.Client
	server *httptest.Server
	// conns counts the TCP connections the server accepted.
	conns atomic.Int32
}

// setupOpts configure setup; zero fields take defaults.
type setupOpts struct {
	// Timeout is the client's per-call timeout; default patience.
	Timeout time.Duration
	// NoTokens leaves the client's token unset.
	NoTokens bool
}

// setup serves h (HTTP/1.1, kept-alive connections) and returns a Client
// pointed at it: ENRICHMENT_URL /enrichment.
func setup(t *testing.T, h http.Handler, opts *setupOpts) *testBundle {
	t.Helper()
	if opts == nil {
		opts = &setupOpts{}
	}
	b := &testBundle{}
	b.server = httptest.NewUnstartedServer(h)
	b.server.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			b.conns.Add(1)
		}
	}
	b.server.Start()
	t.Cleanup(b.server.Close)

	cfg := downstream.Config{EnrichmentURL: b.server.URL + "/enrichment", Timeout: patience}
	if opts.Timeout > 0 {
		cfg.Timeout = opts.Timeout
	}
	if !opts.NoTokens {
		cfg.EnrichmentToken = enrichmentToken
	}
	client, err := downstream.NewClient(cfg)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	b.client = client
	return b
}

// answer is a handler that answers every request with status, body and
// headers (name, value pairs).
func answer(status int, body string, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// The lead every test sends, with personal data that must never show in an
// error.
const (
	leadEmail = "ada.lovelace@example.com"
	leadName  = "Ada Lovelace"
	leadRef   = "li_test-reference_0123456789"
)

// enrichmentRequest is what every test asks the enrichment service.
func enrichmentRequest() *downstream.EnrichmentRequest {
	return &downstream.EnrichmentRequest{LeadID: "l1", Email: leadEmail, Company: "Analytical Engines"}
}

// record is the lead as a destination is given it (the Simulator's tests).
func record() *destination.Record {
	return &destination.Record{
		ExternalRef: leadRef, LeadID: "0190d6a4-0000-7000-8000-000000000001",
		Lead: &lead.Lead{
			Email: leadEmail, Source: "referral", Name: leadName, Company: "Analytical Engines",
			Phone: "+44 20 7946 0000",
		},
		Score: 85, Tier: "hot",
	}
}

// enrich asks b's server with a bounded context; found is false when the
// service has no data.
func (b *testBundle) enrich(t *testing.T) (found bool, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	e, err := b.client.Enrich(ctx, enrichmentRequest())
	if err == nil && e == nil {
		return false, nil
	}
	if err != nil && e != nil {
		t.Errorf("Enrich returned %+v with the error %v", e, err)
	}
	return e != nil, err
}

// requireError returns err as a *destination.Error of class with the given
// certainty, failing the test otherwise.
func requireError(t *testing.T, err error, class destination.Class, uncertain bool) *destination.Error {
	t.Helper()
	de, ok := destination.AsError(err)
	if !ok {
		t.Fatalf("error %v (%T), want a *destination.Error", err, err)
	}
	if de.Class != class || de.Uncertain != uncertain {
		t.Fatalf("error %q: %s, uncertain %t; want %s, uncertain %t", de, de.Class, de.Uncertain, class, uncertain)
	}
	if de.Op != downstream.TargetEnrichment {
		t.Errorf("error %q: op %q, want %q", de, de.Op, downstream.TargetEnrichment)
	}
	return de
}

// recorded is one request a recorder received.
type recorded struct {
	Method, Path, Query string
	Header              http.Header
	Body                map[string]any
}

// recorder records requests and answers them with enrichment data.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &body)
	}
	rec.mu.Lock()
	rec.reqs = append(rec.reqs, recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body})
	rec.mu.Unlock()
	answer(http.StatusOK, `{"company_size":35,"industry":"software"}`)(w, r)
}

func (rec *recorder) last(t *testing.T) recorded {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.reqs) == 0 {
		t.Fatal("no request arrived")
	}
	return rec.reqs[len(rec.reqs)-1]
}

func TestMain(m *testing.M) { testkit.Main(m) }
