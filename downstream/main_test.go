package downstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leadintake/leadintake/downstream"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/lead"
)

// patience bounds every call a test expects to return: far longer than any
// takes on a healthy machine.
const patience = 30 * time.Second

// Tokens the test clients send.
const (
	enrichmentToken = "enrichment-token"
	crmToken        = "crm-token"
	notifyToken     = "notify-token"
)

// testBundle is one Client whose three services are served by one test
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
	// NoTokens leaves the client's tokens unset.
	NoTokens bool
	// Metrics, when set, receives the client's metrics.
	Metrics *downstream.Metrics
	// ConnContext, when set, is the server's http.Server.ConnContext.
	ConnContext func(context.Context, net.Conn) context.Context
}

// setup serves h (HTTP/1.1, kept-alive connections) and returns a Client
// pointed at it: ENRICHMENT_URL /enrichment, CRM_URL /crm, NOTIFY_URL
// /notify.
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
	b.server.Config.ConnContext = opts.ConnContext
	b.server.Start()
	t.Cleanup(b.server.Close)

	cfg := downstream.Config{
		EnrichmentURL: b.server.URL + "/enrichment",
		CRMURL:        b.server.URL + "/crm",
		NotifyURL:     b.server.URL + "/notify",
		Timeout:       patience,
		Metrics:       opts.Metrics,
	}
	if opts.Timeout > 0 {
		cfg.Timeout = opts.Timeout
	}
	if !opts.NoTokens {
		cfg.EnrichmentToken, cfg.CRMToken, cfg.NotifyToken = enrichmentToken, crmToken, notifyToken
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

func crmLead() *downstream.CRMLead {
	return &downstream.CRMLead{
		ExternalRef: leadRef, LeadID: "0190d6a4-0000-7000-8000-000000000001",
		Lead: lead.Lead{
			Email: leadEmail, Source: "referral", Name: leadName, Company: "Analytical Engines",
			Phone: "+44 20 7946 0000",
		},
		Score: 85, Tier: "hot",
	}
}

// call is one of the Client's calls, reduced to its error (and, for the
// calls that have one, whether something was found).
type call struct {
	name string
	// do makes the call. found is false when the service answered that it
	// has nothing (enrichment without data, a look-up's 404).
	do func(ctx context.Context, c *downstream.Client) (found bool, err error)
}

var (
	callEnrich = call{"Enrich", func(ctx context.Context, c *downstream.Client) (bool, error) {
		e, err := c.Enrich(ctx, &downstream.EnrichmentRequest{LeadID: "l1", Email: leadEmail, Company: "Analytical Engines"})
		return e != nil, err
	}}
	callUpsert = call{"UpsertLead", func(ctx context.Context, c *downstream.Client) (bool, error) {
		id, err := c.UpsertLead(ctx, crmLead())
		return id != "", err
	}}
	callCreate = call{"CreateLead", func(ctx context.Context, c *downstream.Client) (bool, error) {
		id, err := c.CreateLead(ctx, crmLead())
		return id != "", err
	}}
	callLookup = call{"LookupLead", func(ctx context.Context, c *downstream.Client) (bool, error) {
		id, found, err := c.LookupLead(ctx, leadRef)
		if found && id == "" {
			return false, errors.New("found without an id")
		}
		return found, err
	}}
	callNotify = call{"Notify", func(ctx context.Context, c *downstream.Client) (bool, error) {
		err := c.Notify(ctx, &downstream.Notification{
			LeadID: "l1", ExternalRef: leadRef, Score: 85, Tier: "hot", Email: leadEmail, Name: leadName,
		})
		return err == nil, err
	}}
	allCalls = []call{callEnrich, callUpsert, callCreate, callLookup, callNotify}
)

// run makes c against b's server with a bounded context.
func (b *testBundle) run(t *testing.T, c call) (bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	return c.do(ctx, b.client)
}

// requireError returns err as a *downstream.Error with the given
// classification, failing the test otherwise.
func requireError(t *testing.T, err error, transient, uncertain bool) *downstream.Error {
	t.Helper()
	de, ok := downstream.AsError(err)
	if !ok {
		t.Fatalf("error %v (%T), want a *downstream.Error", err, err)
	}
	if de.Transient != transient || de.Uncertain != uncertain {
		t.Fatalf("error %q: transient %t, uncertain %t; want transient %t, uncertain %t",
			de, de.Transient, de.Uncertain, transient, uncertain)
	}
	if downstream.IsTransient(err) != transient {
		t.Fatalf("IsTransient(%q) = %t, want %t", err, !transient, transient)
	}
	return de
}

// recorded is one request a recorder received.
type recorded struct {
	Method, Path, Query string
	Header              http.Header
	Body                map[string]any
}

// recorder records requests and answers them with a success fit for any
// call.
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
	status := http.StatusOK
	if r.Method == http.MethodPost && r.URL.Path == "/crm/leads" {
		status = http.StatusCreated
	}
	answer(status, `{"id":"crm_000001","company_size":35,"industry":"software"}`)(w, r)
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
