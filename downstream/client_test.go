package downstream_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/downstream"
)

func TestClientSendsContractRequests(t *testing.T) {
	t.Parallel()

	rec := &recorder{}
	bundle := setup(t, rec, nil)

	if _, err := bundle.enrich(t); err != nil {
		t.Fatalf("Enrich: %v", err)
	}
	got := rec.last(t)
	if got.Method != http.MethodPost || got.Path != "/enrichment" || got.Query != "" {
		t.Errorf("request %s %s?%s, want POST /enrichment", got.Method, got.Path, got.Query)
	}
	if k, ok := got.Header["Idempotency-Key"]; ok {
		t.Errorf("Idempotency-Key %q, want none", k)
	}
	if a := got.Header.Get("Authorization"); a != "Bearer "+enrichmentToken {
		t.Errorf("Authorization %q, want %q", a, "Bearer "+enrichmentToken)
	}
	if ct := got.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	// Every member the contract names is sent, empty when the lead has no
	// value.
	for name, want := range map[string]any{"lead_id": "l1", "email": leadEmail, "company": "Analytical Engines", "website": ""} {
		if v, ok := got.Body[name]; !ok || v != want {
			t.Errorf("body member %q = %v (present %t), want %v", name, v, ok, want)
		}
	}
}

func TestClientSendsNoAuthorizationWithoutToken(t *testing.T) {
	t.Parallel()

	rec := &recorder{}
	bundle := setup(t, rec, &setupOpts{NoTokens: true})

	if _, err := bundle.enrich(t); err != nil {
		t.Fatalf("Enrich: %v", err)
	}
	if a, ok := rec.last(t).Header["Authorization"]; ok {
		t.Errorf("Authorization %q sent without a token", a)
	}
}

// The enrichment's answers are classified as every destination's
// (destination.StatusError).
func TestClientClassifiesStatuses(t *testing.T) {
	t.Parallel()

	tests := []struct {
		status    int
		class     destination.Class
		uncertain bool
	}{
		{http.StatusMovedPermanently, destination.Transient, true},
		{http.StatusFound, destination.Transient, true},
		{http.StatusTemporaryRedirect, destination.Transient, true},
		{http.StatusBadRequest, destination.Rejected, false},
		{http.StatusUnauthorized, destination.Unauthorized, false},
		{http.StatusForbidden, destination.Unauthorized, false},
		{http.StatusRequestTimeout, destination.Transient, false},
		{http.StatusConflict, destination.Conflict, true},
		{http.StatusGone, destination.Rejected, false},
		{http.StatusUnprocessableEntity, destination.Rejected, false},
		{http.StatusTooManyRequests, destination.Transient, false},
		{http.StatusInternalServerError, destination.Transient, true},
		{http.StatusBadGateway, destination.Transient, true},
		{http.StatusServiceUnavailable, destination.Transient, true},
		{http.StatusGatewayTimeout, destination.Transient, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			t.Parallel()
			var requests atomic.Int32
			bundle := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				// A redirect to a path that would succeed: it must not be
				// followed.
				answer(tt.status, `{"industry":"software"}`, "Location", "/elsewhere")(w, r)
			}), nil)

			_, err := bundle.enrich(t)
			de := requireError(t, err, tt.class, tt.uncertain)
			if de.Status != tt.status {
				t.Errorf("Status %d, want %d", de.Status, tt.status)
			}
			if n := requests.Load(); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}
}

func TestClientAcceptsSuccess(t *testing.T) {
	t.Parallel()

	bundle := setup(t, answer(http.StatusOK, `{"industry":"software"}`), nil)

	found, err := bundle.enrich(t)
	if err != nil {
		t.Fatalf("Enrich: %v", err)
	}
	if !found {
		t.Error("nothing found in a success")
	}
}

// A 404 is "no data": neither data nor an error.
func TestClientNotFound(t *testing.T) {
	t.Parallel()

	bundle := setup(t, answer(http.StatusNotFound, `{"error":"not found"}`), nil)

	found, err := bundle.enrich(t)
	if err != nil || found {
		t.Fatalf("found %t, error %v; want nothing found, no error", found, err)
	}
}

// The enrichment reads Retry-After as every destination does (see
// package destination's tests for the rule itself).
func TestClientRetryAfter(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		status   int
		header   string
		min, max time.Duration
		holdAll  bool
	}{
		{"Seconds", http.StatusServiceUnavailable, "2", 2 * time.Second, 2 * time.Second, true},
		{"SecondsOnRequestTimeout", http.StatusRequestTimeout, "5", 5 * time.Second, 5 * time.Second, false},
		{"HTTPDate", http.StatusTooManyRequests, "date", 80 * time.Second, 90 * time.Second, true},
		{"SecondsCappedAtAnHour", http.StatusServiceUnavailable, "7200", time.Hour, time.Hour, true},
		{"Garbage", http.StatusServiceUnavailable, "soon", 0, 0, false},
		{"IgnoredOnARefusal", http.StatusBadRequest, "30", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				v := tt.header
				if v == "date" {
					// An HTTP date has whole seconds, and the call takes a
					// moment.
					v = time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
				}
				answer(tt.status, `{"error":"later"}`, "Retry-After", v)(w, r)
			}), nil)

			_, err := bundle.enrich(t)
			de, ok := destination.AsError(err)
			if !ok {
				t.Fatalf("error %v, want a *destination.Error", err)
			}
			if de.RetryAfter < tt.min || de.RetryAfter > tt.max || de.HoldAll != tt.holdAll {
				t.Errorf("RetryAfter %v, HoldAll %t; want within [%v, %v], %t", de.RetryAfter, de.HoldAll, tt.min, tt.max, tt.holdAll)
			}
		})
	}
}

func TestClientTransportFailures(t *testing.T) {
	t.Parallel()

	t.Run("ConnectionRefusedIsTransientAndNotUncertain", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, answer(http.StatusOK, `{}`), nil)
		// Nothing listens there any more.
		bundle.server.Close()

		_, err := bundle.enrich(t)
		requireError(t, err, destination.Transient, false)
	})

	t.Run("DroppedAfterRequestIsTransientAndUncertain", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			dropConnection(w)
		}), nil)

		_, err := bundle.enrich(t)
		requireError(t, err, destination.Transient, true)
	})

	t.Run("HangPastTimeoutIsTransientAndUncertain", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}), &setupOpts{Timeout: 200 * time.Millisecond})

		start := time.Now()
		_, err := bundle.enrich(t)
		requireError(t, err, destination.Transient, true)
		if elapsed := time.Since(start); elapsed > patience/2 {
			t.Errorf("Enrich returned after %v: the client's Timeout did not end it", elapsed)
		}
	})
}

// dropConnection closes the request's connection without an answer.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

// A body left unread costs the connection; every answer is read to its end.
func TestClientDrainsBodies(t *testing.T) {
	t.Parallel()

	big := strings.Repeat("x", 256<<10)
	tests := []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"ErrorAnswer", answer(http.StatusServiceUnavailable, `{"error":"`+big+`"}`)},
		{"RefusalAnswer", answer(http.StatusBadRequest, big)},
		{"SuccessWithTrailingData", answer(http.StatusOK, `{"industry":"software"}`+strings.Repeat(" ", 256<<10))},
		{"NotFound", answer(http.StatusNotFound, big)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, tt.handler, nil)

			for range 3 {
				_, _ = bundle.enrich(t)
			}
			if n := bundle.conns.Load(); n != 1 {
				t.Errorf("3 calls used %d connections, want 1", n)
			}
		})
	}
}

func TestClientEnrichmentAnswer(t *testing.T) {
	t.Parallel()

	t.Run("IgnoresUnknownMembers", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, answer(http.StatusOK,
			`{"company_size":35,"industry":"software","seniority":"director","country":"GB","confidence":0.7,"meta":{"source":"x","sections":["a"]}}`), nil)

		got, err := bundle.client.Enrich(context.Background(), &downstream.EnrichmentRequest{LeadID: "l1", Email: leadEmail})
		if err != nil {
			t.Fatalf("Enrich: %v", err)
		}
		if got == nil || got.CompanySize == nil || *got.CompanySize != 35 || got.Industry == nil || *got.Industry != "software" ||
			got.Seniority == nil || *got.Seniority != "director" || got.Country == nil || *got.Country != "GB" {
			t.Errorf("Enrich = %+v, want the four known members", got)
		}
	})

	t.Run("TakesPartialAnswers", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, answer(http.StatusOK, `{"industry":"retail"}`), nil)

		got, err := bundle.client.Enrich(context.Background(), &downstream.EnrichmentRequest{LeadID: "l1", Email: leadEmail})
		if err != nil {
			t.Fatalf("Enrich: %v", err)
		}
		if got == nil || got.Industry == nil || *got.Industry != "retail" || got.CompanySize != nil || got.Country != nil {
			t.Errorf("Enrich = %+v, want industry only", got)
		}
	})

	t.Run("UnreadableAnswerIsTransient", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, answer(http.StatusOK, `<html>`), nil)

		_, err := bundle.enrich(t)
		if de := requireError(t, err, destination.Transient, true); de.Status != http.StatusOK {
			t.Errorf("Status %d, want 200", de.Status)
		}
	})
}

// Bodies may hold personal data: neither the request's nor the answer's
// shows in an error's message, and neither does the token.
func TestClientErrorsHoldNoBodies(t *testing.T) {
	t.Parallel()

	const secret = "ANSWER-SECRET " + leadEmail
	handlers := map[string]http.HandlerFunc{
		"Refusal":        answer(http.StatusBadRequest, `{"error":"`+secret+`","email":"`+leadEmail+`"}`),
		"ServerError":    answer(http.StatusInternalServerError, secret),
		"UnreadableOK":   answer(http.StatusOK, secret),
		"UnreadableJSON": answer(http.StatusOK, `{"industry":"`+secret),
		"Redirect":       answer(http.StatusFound, secret, "Location", "/x"),
		"Dropped": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			dropConnection(w)
		},
		"WrongTypes": answer(http.StatusOK, `{"company_size":["`+secret+`"],"industry":{"x":"`+secret+`"}}`),
	}
	for name, h := range handlers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, h, nil)

			_, err := bundle.enrich(t)
			if err == nil {
				t.Fatal("Enrich accepted the answer")
			}
			msg := err.Error()
			for _, leak := range []string{"SECRET", leadEmail, "Analytical", enrichmentToken} {
				if strings.Contains(msg, leak) {
					t.Errorf("error message %q contains %q", msg, leak)
				}
			}
		})
	}
}

func TestNewClient(t *testing.T) {
	t.Parallel()

	good := downstream.Config{EnrichmentURL: "http://e.example/enrich"}
	tests := []struct {
		name string
		edit func(*downstream.Config)
		ok   bool
	}{
		{"Valid", func(*downstream.Config) {}, true},
		{"ValidHTTPS", func(c *downstream.Config) { c.EnrichmentURL = "https://e.example:8443/" }, true},
		{"MissingEnrichmentURL", func(c *downstream.Config) { c.EnrichmentURL = "" }, false},
		{"RelativeURL", func(c *downstream.Config) { c.EnrichmentURL = "/enrich" }, false},
		{"OtherScheme", func(c *downstream.Config) { c.EnrichmentURL = "ftp://e.example/" }, false},
		{"NoHost", func(c *downstream.Config) { c.EnrichmentURL = "http:///enrich" }, false},
		{"Unparsable", func(c *downstream.Config) { c.EnrichmentURL = "http://[::1" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := good
			tt.edit(&cfg)
			_, err := downstream.NewClient(cfg)
			if (err == nil) != tt.ok {
				t.Errorf("NewClient: error %v, want ok %t", err, tt.ok)
			}
		})
	}
}

// Each enrichment call is reported for the delivery log, as a
// destination's are.
func TestClientReportsEachCall(t *testing.T) {
	t.Parallel()

	var next atomic.Int32
	statuses := []int{http.StatusOK, http.StatusNotFound, http.StatusServiceUnavailable, http.StatusBadRequest}
	bundle := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(statuses[next.Add(1)-1], `{"industry":"software"}`)(w, r)
	}), nil)
	var (
		mu   sync.Mutex
		seen []string
	)
	ctx := destination.WithObserver(context.Background(), func(o destination.Observation) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, o.Step+" "+o.Outcome)
	})
	for range statuses {
		_, _ = bundle.client.Enrich(ctx, enrichmentRequest())
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := strings.Join(seen, ", "), "enrichment 200, enrichment 404, enrichment 503, enrichment 400"; got != want {
		t.Errorf("calls reported %q, want %q", got, want)
	}
}

// Metrics count each call by downstream, target and result, and time it.
func TestMetrics(t *testing.T) {
	t.Parallel()

	reg := prometheus.NewRegistry()
	m := downstream.NewMetrics(reg)
	m.Observe("enrichment", "enrichment", "success", 10*time.Millisecond)
	m.Observe("enrichment", "enrichment", "not_found", 10*time.Millisecond)
	m.Observe("crm", "crm_lookup", "transient", time.Second)
	m.Observe("crm", "crm_lookup", "transient", time.Second)
	m.Observe("acme-hubspot", "crm_upsert", "unauthorized", time.Second)
	m.Observe("notification", "notify", "permanent", time.Second)
	// A nil *Metrics records nothing, and does not fail.
	var none *downstream.Metrics
	none.Observe("crm", "crm_upsert", "success", time.Second)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	observed := map[string]uint64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch f.GetName() {
			case "leadintake_downstream_calls_total":
				got[labels["downstream"]+"/"+labels["target"]+"/"+labels["result"]] = m.GetCounter().GetValue()
			case "leadintake_downstream_call_duration_seconds":
				observed[labels["downstream"]+"/"+labels["target"]] += m.GetHistogram().GetSampleCount()
			}
		}
	}
	want := map[string]float64{
		"enrichment/enrichment/success": 1, "enrichment/enrichment/not_found": 1, "crm/crm_lookup/transient": 2,
		"acme-hubspot/crm_upsert/unauthorized": 1, "notification/notify/permanent": 1,
	}
	if len(got) != len(want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("calls %s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	wantObserved := map[string]uint64{"enrichment/enrichment": 2, "crm/crm_lookup": 2, "acme-hubspot/crm_upsert": 1, "notification/notify": 1}
	if len(observed) != len(wantObserved) {
		t.Errorf("durations %v, want %v", observed, wantObserved)
	}
	for k, v := range wantObserved {
		if observed[k] != v {
			t.Errorf("durations of %s: %d, want %d", k, observed[k], v)
		}
	}
}
