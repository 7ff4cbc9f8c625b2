package downstream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leadintake/leadintake/downstream"
)

func TestClientSendsContractRequests(t *testing.T) {
	t.Parallel()

	tests := []struct {
		call        call
		method      string
		path, query string
		idemKey     string
		token       string
		// body lists members the request body must carry, with their
		// values; nil for a request without a body.
		body map[string]any
	}{
		{callEnrich, http.MethodPost, "/enrichment", "", "", enrichmentToken,
			map[string]any{"lead_id": "l1", "email": leadEmail, "company": "Analytical Engines"}},
		{callUpsert, http.MethodPut, "/crm/leads/" + leadRef, "", leadRef, crmToken,
			map[string]any{"external_ref": leadRef, "email": leadEmail, "score": 85.0, "tier": "hot", "source": "referral"}},
		{callCreate, http.MethodPost, "/crm/leads", "", leadRef, crmToken,
			map[string]any{"external_ref": leadRef, "email": leadEmail, "score": 85.0, "tier": "hot"}},
		{callLookup, http.MethodGet, "/crm/leads", "external_ref=" + leadRef, "", crmToken, nil},
		{callNotify, http.MethodPost, "/notify", "", leadRef + ":notify", notifyToken,
			map[string]any{"lead_id": "l1", "external_ref": leadRef, "score": 85.0, "tier": "hot", "email": leadEmail, "name": leadName}},
	}
	for _, tt := range tests {
		t.Run(tt.call.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			bundle := setup(t, rec, nil)

			if _, err := bundle.run(t, tt.call); err != nil {
				t.Fatalf("%s: %v", tt.call.name, err)
			}
			got := rec.last(t)
			if got.Method != tt.method || got.Path != tt.path || got.Query != tt.query {
				t.Errorf("request %s %s?%s, want %s %s?%s", got.Method, got.Path, got.Query, tt.method, tt.path, tt.query)
			}
			if k := got.Header.Get("Idempotency-Key"); k != tt.idemKey {
				t.Errorf("Idempotency-Key %q, want %q", k, tt.idemKey)
			}
			if a := got.Header.Get("Authorization"); a != "Bearer "+tt.token {
				t.Errorf("Authorization %q, want %q", a, "Bearer "+tt.token)
			}
			if tt.body == nil {
				if got.Body != nil {
					t.Errorf("body %v, want none", got.Body)
				}
				return
			}
			if ct := got.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			for name, want := range tt.body {
				if got.Body[name] != want {
					t.Errorf("body member %q = %v, want %v", name, got.Body[name], want)
				}
			}
		})
	}
}

func TestClientSendsNoAuthorizationWithoutToken(t *testing.T) {
	t.Parallel()

	for _, c := range allCalls {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			bundle := setup(t, rec, &setupOpts{NoTokens: true})

			if _, err := bundle.run(t, c); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if a, ok := rec.last(t).Header["Authorization"]; ok {
				t.Errorf("Authorization %q sent without a token", a)
			}
		})
	}
}

// Statuses that mean the same for every call.
func TestClientClassifiesStatuses(t *testing.T) {
	t.Parallel()

	tests := []struct {
		status               int
		transient, uncertain bool
	}{
		{http.StatusMovedPermanently, true, true},
		{http.StatusFound, true, true},
		{http.StatusTemporaryRedirect, true, true},
		{http.StatusBadRequest, false, false},
		{http.StatusUnauthorized, false, false},
		{http.StatusForbidden, false, false},
		{http.StatusRequestTimeout, true, false},
		{http.StatusConflict, true, true},
		{http.StatusGone, false, false},
		{http.StatusUnprocessableEntity, false, false},
		{http.StatusTooManyRequests, true, false},
		{http.StatusInternalServerError, true, true},
		{http.StatusBadGateway, true, true},
		{http.StatusServiceUnavailable, true, true},
		{http.StatusGatewayTimeout, true, true},
	}
	for _, tt := range tests {
		for _, c := range allCalls {
			t.Run(fmt.Sprintf("%d/%s", tt.status, c.name), func(t *testing.T) {
				t.Parallel()
				var requests atomic.Int32
				bundle := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					requests.Add(1)
					// A redirect to a path that would succeed: it must not
					// be followed.
					answer(tt.status, `{"id":"crm_000001"}`, "Location", "/elsewhere")(w, r)
				}), nil)

				_, err := bundle.run(t, c)
				de := requireError(t, err, tt.transient, tt.uncertain)
				if de.StatusCode != tt.status {
					t.Errorf("StatusCode %d, want %d", de.StatusCode, tt.status)
				}
				if n := requests.Load(); n != 1 {
					t.Errorf("%d requests, want 1", n)
				}
			})
		}
	}
}

func TestClientAcceptsSuccess(t *testing.T) {
	t.Parallel()

	tests := []struct {
		call   call
		status int
	}{
		{callEnrich, http.StatusOK},
		{callUpsert, http.StatusOK},
		{callUpsert, http.StatusCreated},
		{callCreate, http.StatusCreated},
		{callLookup, http.StatusOK},
		{callNotify, http.StatusOK},
		{callNotify, http.StatusAccepted},
		{callNotify, http.StatusNoContent},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.call.name, tt.status), func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, answer(tt.status, `{"id":"crm_000001","industry":"software"}`), nil)

			found, err := bundle.run(t, tt.call)
			if err != nil {
				t.Fatalf("%s: %v", tt.call.name, err)
			}
			if !found {
				t.Errorf("%s: nothing found in a success", tt.call.name)
			}
		})
	}
}

// A 404 is "no data" for the enrichment and the look-up, and a final
// refusal for the calls that write.
func TestClientNotFound(t *testing.T) {
	t.Parallel()

	tests := []struct {
		call call
		// refused: a permanent error; otherwise not found, without error.
		refused bool
	}{
		{callEnrich, false},
		{callLookup, false},
		{callUpsert, true},
		{callCreate, true},
		{callNotify, true},
	}
	for _, tt := range tests {
		t.Run(tt.call.name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, answer(http.StatusNotFound, `{"error":"not found"}`), nil)

			found, err := bundle.run(t, tt.call)
			if tt.refused {
				de := requireError(t, err, false, false)
				if de.StatusCode != http.StatusNotFound {
					t.Errorf("StatusCode %d, want 404", de.StatusCode)
				}
				return
			}
			if err != nil || found {
				t.Fatalf("found %t, error %v; want nothing found, no error", found, err)
			}
		})
	}
}

func TestClientRetryAfter(t *testing.T) {
	t.Parallel()

	seconds := func(v string) func(time.Time) string { return func(time.Time) string { return v } }
	date := func(in time.Duration) func(time.Time) string {
		return func(now time.Time) string { return now.Add(in).UTC().Format(http.TimeFormat) }
	}
	tests := []struct {
		name   string
		status int
		// header returns the Retry-After sent at now; "" sends none.
		header func(now time.Time) string
		// min and max bound the delay read.
		min, max time.Duration
	}{
		{"Seconds", http.StatusServiceUnavailable, seconds("2"), 2 * time.Second, 2 * time.Second},
		{"SecondsOnTooManyRequests", http.StatusTooManyRequests, seconds("120"), 2 * time.Minute, 2 * time.Minute},
		{"SecondsOnRequestTimeout", http.StatusRequestTimeout, seconds("5"), 5 * time.Second, 5 * time.Second},
		{"SecondsCappedAtAnHour", http.StatusServiceUnavailable, seconds("7200"), time.Hour, time.Hour},
		{"HugeSecondsCappedAtAnHour", http.StatusServiceUnavailable, seconds("1000000000000"), time.Hour, time.Hour},
		{"OverflowingSecondsCappedAtAnHour", http.StatusServiceUnavailable, seconds("99999999999999999999999"), time.Hour, time.Hour},
		{"OverflowingNegativeSeconds", http.StatusServiceUnavailable, seconds("-99999999999999999999999"), 0, 0},
		// An HTTP date has whole seconds, and the call takes a moment.
		{"HTTPDate", http.StatusServiceUnavailable, date(90 * time.Second), 80 * time.Second, 90 * time.Second},
		{"HTTPDateCappedAtAnHour", http.StatusServiceUnavailable, date(3 * time.Hour), time.Hour, time.Hour},
		{"HTTPDateInThePast", http.StatusServiceUnavailable, date(-time.Hour), 0, 0},
		{"Zero", http.StatusServiceUnavailable, seconds("0"), 0, 0},
		{"Negative", http.StatusServiceUnavailable, seconds("-5"), 0, 0},
		{"Garbage", http.StatusServiceUnavailable, seconds("soon"), 0, 0},
		{"None", http.StatusServiceUnavailable, seconds(""), 0, 0},
		{"IgnoredOnARefusal", http.StatusBadRequest, seconds("30"), 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var headers []string
				if v := tt.header(time.Now()); v != "" {
					headers = []string{"Retry-After", v}
				}
				answer(tt.status, `{"error":"later"}`, headers...)(w, r)
			}), nil)

			_, err := bundle.run(t, callUpsert)
			de, ok := downstream.AsError(err)
			if !ok {
				t.Fatalf("error %v, want a *downstream.Error", err)
			}
			if de.RetryAfter < tt.min || de.RetryAfter > tt.max {
				t.Errorf("RetryAfter %v, want within [%v, %v]", de.RetryAfter, tt.min, tt.max)
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

		for _, c := range allCalls {
			_, err := bundle.run(t, c)
			requireError(t, err, true, false)
		}
	})

	t.Run("DroppedAfterRequestIsTransientAndUncertain", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			dropConnection(w)
		}), nil)

		for _, c := range allCalls {
			_, err := bundle.run(t, c)
			requireError(t, err, true, true)
		}
	})

	t.Run("HangPastTimeoutIsTransientAndUncertain", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}), &setupOpts{Timeout: 200 * time.Millisecond})

		for _, c := range allCalls {
			start := time.Now()
			_, err := bundle.run(t, c)
			requireError(t, err, true, true)
			if elapsed := time.Since(start); elapsed > patience/2 {
				t.Errorf("%s returned after %v: the client's Timeout did not end it", c.name, elapsed)
			}
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

// A server that drops a kept-alive connection right after reading its second
// request is the case where net/http re-sends a request on its own, on a new
// connection, when the request looks idempotent. A create must never be
// re-sent behind the worker's back; an upsert may be.
func TestClientResendOnDroppedKeptAliveConnection(t *testing.T) {
	t.Parallel()

	type connKey struct{}
	setupDropper := func(t *testing.T) (*testBundle, *atomic.Int32) {
		t.Helper()
		var requests atomic.Int32
		bundle := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			requests.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			if r.Context().Value(connKey{}).(*atomic.Int32).Add(1) > 1 {
				dropConnection(w)
				return
			}
			answer(http.StatusCreated, `{"id":"crm_000001"}`)(w, r)
		}), &setupOpts{ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			// Counts the requests of one connection.
			return context.WithValue(ctx, connKey{}, new(atomic.Int32))
		}})
		return bundle, &requests
	}

	t.Run("CreateLeadIsNeverResent", func(t *testing.T) {
		t.Parallel()
		bundle, requests := setupDropper(t)

		if _, err := bundle.run(t, callCreate); err != nil {
			t.Fatalf("first create: %v", err)
		}
		_, err := bundle.run(t, callCreate)
		requireError(t, err, true, true)
		if n := requests.Load(); n != 2 {
			t.Errorf("the server received %d requests for 2 creates, want 2", n)
		}
		if n := bundle.conns.Load(); n != 1 {
			t.Errorf("%d connections, want 1 (the second create on the kept-alive one)", n)
		}
	})

	t.Run("UpsertLeadMayBeResent", func(t *testing.T) {
		t.Parallel()
		bundle, requests := setupDropper(t)

		if _, err := bundle.run(t, callUpsert); err != nil {
			t.Fatalf("first upsert: %v", err)
		}
		if _, err := bundle.run(t, callUpsert); err != nil {
			t.Fatalf("second upsert (re-sent by net/http on a new connection): %v", err)
		}
		if n := requests.Load(); n != 3 {
			t.Errorf("the server received %d requests for 2 upserts, want 3", n)
		}
	})
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
		{"SuccessWithTrailingData", answer(http.StatusOK, `{"id":"crm_000001"}`+strings.Repeat(" ", 256<<10))},
		{"NotFound", answer(http.StatusNotFound, big)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, tt.handler, nil)

			for range 3 {
				_, _ = bundle.run(t, callLookup)
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
		if got == nil || got.CompanySize == nil || *got.CompanySize != 35 || *got.Industry != "software" ||
			*got.Seniority != "director" || *got.Country != "GB" {
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

		_, err := bundle.run(t, callEnrich)
		requireError(t, err, true, true)
	})
}

// A success that carries no usable id may have created the record all the
// same: the caller must look before it posts again.
func TestClientCRMAnswerWithoutID(t *testing.T) {
	t.Parallel()

	bodies := map[string]string{
		"EmptyObject": `{}`,
		"EmptyID":     `{"id":""}`,
		"NumericID":   `{"id":42}`,
		"NullID":      `{"id":null}`,
		"NotJSON":     `created`,
		"NoBody":      ``,
	}
	for name, body := range bodies {
		for _, c := range []call{callUpsert, callCreate, callLookup} {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				status := http.StatusOK
				if c.name == "CreateLead" {
					status = http.StatusCreated
				}
				bundle := setup(t, answer(status, body), nil)

				found, err := bundle.run(t, c)
				requireError(t, err, true, true)
				if found {
					t.Error("an id was returned")
				}
			})
		}
	}
}

// Bodies may hold personal data: neither the request's nor the answer's
// shows in an error's message.
func TestClientErrorsHoldNoBodies(t *testing.T) {
	t.Parallel()

	const secret = "ANSWER-SECRET " + leadEmail
	handlers := map[string]http.HandlerFunc{
		"Refusal":        answer(http.StatusBadRequest, `{"error":"`+secret+`","email":"`+leadEmail+`"}`),
		"ServerError":    answer(http.StatusInternalServerError, secret),
		"UnreadableOK":   answer(http.StatusOK, secret),
		"UnreadableJSON": answer(http.StatusOK, `{"id":"`+secret),
		"Redirect":       answer(http.StatusFound, secret, "Location", "/x"),
		"Dropped": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			dropConnection(w)
		},
		"WrongTypes": answer(http.StatusOK, `{"id":["`+secret+`"],"industry":{"x":"`+secret+`"}}`),
	}
	for name, h := range handlers {
		for _, c := range allCalls {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				bundle := setup(t, h, nil)

				_, err := bundle.run(t, c)
				if err == nil {
					return // some calls accept some of these answers
				}
				msg := err.Error()
				for _, leak := range []string{"SECRET", leadEmail, leadName, "Analytical", "+44"} {
					if strings.Contains(msg, leak) {
						t.Errorf("error message %q contains %q", msg, leak)
					}
				}
			})
		}
	}
}

func TestNewClient(t *testing.T) {
	t.Parallel()

	good := downstream.Config{EnrichmentURL: "http://e.example/enrich", CRMURL: "https://crm.example/api", NotifyURL: "http://n.example:8080/"}
	tests := []struct {
		name string
		edit func(*downstream.Config)
		ok   bool
	}{
		{"Valid", func(*downstream.Config) {}, true},
		{"MissingEnrichmentURL", func(c *downstream.Config) { c.EnrichmentURL = "" }, false},
		{"RelativeCRMURL", func(c *downstream.Config) { c.CRMURL = "/crm" }, false},
		{"OtherScheme", func(c *downstream.Config) { c.NotifyURL = "ftp://n.example/" }, false},
		{"NoHost", func(c *downstream.Config) { c.CRMURL = "http:///crm" }, false},
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

func TestClientMetrics(t *testing.T) {
	t.Parallel()

	reg := prometheus.NewRegistry()
	var next atomic.Int32
	statuses := []int{http.StatusOK, http.StatusNotFound, http.StatusServiceUnavailable, http.StatusBadRequest}
	bundle := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(statuses[next.Add(1)-1], `{"id":"crm_000001"}`)(w, r)
	}), &setupOpts{Metrics: downstream.NewMetrics(reg)})

	for range statuses {
		_, _ = bundle.run(t, callLookup)
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	var observed uint64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch f.GetName() {
			case "leadintake_downstream_calls_total":
				got[labels["target"]+"/"+labels["result"]] = m.GetCounter().GetValue()
			case "leadintake_downstream_call_duration_seconds":
				observed += m.GetHistogram().GetSampleCount()
			}
		}
	}
	want := map[string]float64{
		"crm_lookup/success": 1, "crm_lookup/not_found": 1, "crm_lookup/transient": 1, "crm_lookup/permanent": 1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("calls %s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if observed != 4 {
		t.Errorf("%d durations observed, want 4", observed)
	}
}

// Error's message names the target and the status.
func TestErrorMessage(t *testing.T) {
	t.Parallel()

	tests := []struct {
		err  *downstream.Error
		want string
	}{
		{&downstream.Error{Target: downstream.TargetCRMUpsert, StatusCode: 503}, "crm_upsert: HTTP 503"},
		{&downstream.Error{Target: downstream.TargetNotify, Err: errors.New("connection reset")}, "notify: connection reset"},
		{&downstream.Error{Target: downstream.TargetEnrichment, StatusCode: 200, Err: errors.New("unreadable answer")}, "enrichment: HTTP 200: unreadable answer"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	wrapped := fmt.Errorf("crm: %w", tests[1].err)
	if de, ok := downstream.AsError(wrapped); !ok || de != tests[1].err {
		t.Error("AsError does not see through wrapping")
	}
	if !downstream.IsTransient(context.Canceled) || downstream.IsTransient(nil) {
		t.Error("IsTransient: a foreign error is transient, nil is not")
	}
}
