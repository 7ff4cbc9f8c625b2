package generic_test

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

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/generic"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/lead"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// patience bounds every call a test expects to return: far longer than any
// takes on a healthy machine.
const patience = 30 * time.Second

// Tokens the test destinations send.
const (
	crmToken    = "crm-token"
	notifyToken = "notify-token"
)

// testBundle is a CRM in each mode and a notification channel, of kind
// http, all served by one test server over real HTTP.
type testBundle struct {
	upsert, create *generic.CRM
	channel        *generic.Channel
	server         *httptest.Server
	// conns counts the TCP connections the server accepted.
	conns atomic.Int32
}

// setupOpts configure setup; zero fields take defaults.
type setupOpts struct {
	// Timeout is the destinations' per-call timeout; default patience.
	Timeout time.Duration
	// NoTokens leaves the destinations' tokens unset.
	NoTokens bool
	// ConnContext, when set, is the server's http.Server.ConnContext.
	ConnContext func(context.Context, net.Conn) context.Context
}

// setup serves h (HTTP/1.1, kept-alive connections) and returns
// destinations pointed at it, as CRM_URL /crm and NOTIFY_URL /notify
// configure them.
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

	timeout := patience
	if opts.Timeout > 0 {
		timeout = opts.Timeout
	}
	config := func(name, url, token, mode string) *destination.Config {
		c := &destination.Config{Name: name, Kind: generic.Kind, Timeout: timeout, Values: map[string]string{"url": url}}
		if !opts.NoTokens {
			c.Values["token"] = token
		}
		if mode != "" {
			c.Values["mode"] = mode
		}
		if err := generic.Spec.Validate(c); err != nil {
			t.Fatalf("Validate: %v", err)
		}
		return c
	}
	b.upsert = generic.NewCRM(config("crm", b.server.URL+"/crm", crmToken, generic.ModeUpsert))
	b.create = generic.NewCRM(config("crm", b.server.URL+"/crm", crmToken, generic.ModeCreate))
	b.channel = generic.NewChannel(config("notification", b.server.URL+"/notify", notifyToken, ""))
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
	leadPhone = "+44 20 7946 0000"
	leadRef   = "li_test-reference_0123456789"
	leadID    = "0190d6a4-0000-7000-8000-000000000001"
)

func record() *destination.Record {
	return &destination.Record{
		ExternalRef: leadRef, LeadID: leadID,
		Lead: &lead.Lead{
			Email: leadEmail, Source: "referral", Name: leadName, Company: "Analytical Engines", Phone: leadPhone,
		},
		Score: 85, Tier: "hot",
	}
}

// call is one of the destinations' calls, reduced to its error and
// whether something was found.
type call struct {
	name string
	// do makes the call with r. found is false when the destination
	// answered that it has nothing (a look-up's 404).
	do func(ctx context.Context, b *testBundle, r *destination.Record) (found bool, err error)
}

var (
	callUpsert = call{"UpsertLead", func(ctx context.Context, b *testBundle, r *destination.Record) (bool, error) {
		id, err := b.upsert.Write(ctx, r)
		return id != "", err
	}}
	callCreate = call{"CreateLead", func(ctx context.Context, b *testBundle, r *destination.Record) (bool, error) {
		id, err := b.create.Write(ctx, r)
		return id != "", err
	}}
	callLookup = call{"LookupLead", func(ctx context.Context, b *testBundle, r *destination.Record) (bool, error) {
		id, found, err := b.create.Lookup(ctx, r)
		if found && id == "" {
			return false, errors.New("found without an id")
		}
		return found, err
	}}
	callNotify = call{"Notify", func(ctx context.Context, b *testBundle, r *destination.Record) (bool, error) {
		_, err := b.channel.Send(ctx, r, "")
		return err == nil, err
	}}
	allCalls = []call{callUpsert, callCreate, callLookup, callNotify}
)

// run makes c with the test's record against b's server with a bounded
// context.
func (b *testBundle) run(t *testing.T, c call) (bool, error) {
	t.Helper()
	return b.runRecord(t, c, record())
}

// runRecord makes c with r.
func (b *testBundle) runRecord(t *testing.T, c call, r *destination.Record) (bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	return c.do(ctx, b, r)
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
	answer(status, `{"id":"crm_000001"}`)(w, r)
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
