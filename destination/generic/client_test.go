package generic_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/generic"
)

func TestClientSendsContractRequests(t *testing.T) {
	t.Parallel()

	industry := "software"
	amended := func(r *destination.Record) {
		r.Amendment, r.Amends, r.DuplicateOf = 2, "l0", "l-1"
		r.Owner = &destination.Owner{Name: "grace", CRMOwner: "9001", Slack: "U0", Email: "grace@example.com"}
		r.Enrichment = &destination.Enrichment{Industry: &industry}
	}
	leadMembers := map[string]any{
		"external_ref": leadRef, "lead_id": leadID, "email": leadEmail, "name": leadName, "company": "Analytical Engines",
		"phone": leadPhone, "source": "referral", "score": 85.0, "tier": "hot",
	}
	with := func(m map[string]any, more map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			out[k] = v
		}
		for k, v := range more {
			out[k] = v
		}
		return out
	}
	tests := []struct {
		name        string
		call        call
		edit        func(*destination.Record)
		method      string
		path, query string
		idemKey     string
		token       string
		// body lists members the request body must carry, with their
		// values; nil for a request without a body. absent lists members
		// it must not carry.
		body   map[string]any
		absent []string
	}{
		{"UpsertLead", callUpsert, nil, http.MethodPut, "/crm/leads/" + leadRef, "", leadRef, crmToken,
			with(leadMembers, map[string]any{"enrichment": nil}), []string{"owner", "duplicate_of"}},
		{"UpsertLeadOfAnAmendment", callUpsert, amended, http.MethodPut, "/crm/leads/" + leadRef, "", leadRef + ":amend:2", crmToken,
			with(leadMembers, map[string]any{"owner": "grace", "duplicate_of": "l-1", "enrichment": map[string]any{"industry": "software"}}), nil},
		{"CreateLead", callCreate, nil, http.MethodPost, "/crm/leads", "", leadRef, crmToken,
			with(leadMembers, map[string]any{"enrichment": nil}), []string{"owner", "duplicate_of"}},
		{"CreateLeadOfAnAmendment", callCreate, amended, http.MethodPost, "/crm/leads", "", leadRef + ":amend:2", crmToken,
			with(leadMembers, map[string]any{"owner": "grace", "duplicate_of": "l-1"}), nil},
		{"LookupLead", callLookup, nil, http.MethodGet, "/crm/leads", "external_ref=" + leadRef, "", crmToken, nil, nil},
		// The notification carries phone, source and owner when set, and
		// never the enrichment.
		{"Notify", callNotify, nil, http.MethodPost, "/notify", "", leadRef + ":notify", notifyToken,
			map[string]any{"lead_id": leadID, "external_ref": leadRef, "score": 85.0, "tier": "hot", "email": leadEmail,
				"name": leadName, "company": "Analytical Engines", "phone": leadPhone, "source": "referral"},
			[]string{"owner", "amends", "duplicate_of", "enrichment"}},
		{"NotifyOfAnAmendment", callNotify, amended, http.MethodPost, "/notify", "", leadRef + ":notify:2", notifyToken,
			map[string]any{"lead_id": leadID, "external_ref": leadRef, "email": leadEmail, "owner": "grace", "amends": "l0", "duplicate_of": "l-1"},
			[]string{"enrichment"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			bundle := setup(t, rec, nil)
			r := record()
			if tt.edit != nil {
				tt.edit(r)
			}

			if _, err := bundle.runRecord(t, tt.call, r); err != nil {
				t.Fatalf("%s: %v", tt.call.name, err)
			}
			got := rec.last(t)
			if got.Method != tt.method || got.Path != tt.path || got.Query != tt.query {
				t.Errorf("request %s %s?%s, want %s %s?%s", got.Method, got.Path, got.Query, tt.method, tt.path, tt.query)
			}
			if k, ok := got.Header["Idempotency-Key"]; tt.idemKey == "" && ok || got.Header.Get("Idempotency-Key") != tt.idemKey {
				t.Errorf("Idempotency-Key %q, want %q", k, tt.idemKey)
			}
			if a := got.Header.Get("Authorization"); a != "Bearer "+tt.token {
				t.Errorf("Authorization %q, want %q", a, "Bearer "+tt.token)
			}
			if a := got.Header.Get("Accept"); a != "application/json" {
				t.Errorf("Accept %q, want application/json", a)
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
				if v, ok := got.Body[name]; !ok || !reflect.DeepEqual(v, want) {
					t.Errorf("body member %q = %v (present %t), want %v", name, v, ok, want)
				}
			}
			for _, name := range tt.absent {
				if v, ok := got.Body[name]; ok {
					t.Errorf("body member %q = %v, want none", name, v)
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
		status    int
		class     destination.Class
		uncertain bool
	}{
		{http.StatusMovedPermanently, destination.Transient, true},
		{http.StatusFound, destination.Transient, true},
		{http.StatusTemporaryRedirect, destination.Transient, true},
		{http.StatusBadRequest, destination.Rejected, false},
		// Refused credentials hold the destination; they do not reject
		// the lead.
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
}

func TestClientAcceptsSuccess(t *testing.T) {
	t.Parallel()

	tests := []struct {
		call   call
		status int
	}{
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
			bundle := setup(t, answer(tt.status, `{"id":"crm_000001"}`), nil)

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

// A 404 is "none" for the look-up, and rejects the lead for the calls that
// write.
func TestClientNotFound(t *testing.T) {
	t.Parallel()

	tests := []struct {
		call call
		// refused: a rejection; otherwise not found, without error.
		refused bool
	}{
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
				de := requireError(t, err, destination.Rejected, false)
				if de.Status != http.StatusNotFound {
					t.Errorf("Status %d, want 404", de.Status)
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
		// holdAll: the answer holds every lead's calls.
		holdAll bool
	}{
		{"Seconds", http.StatusServiceUnavailable, seconds("2"), 2 * time.Second, 2 * time.Second, true},
		{"SecondsOnTooManyRequests", http.StatusTooManyRequests, seconds("120"), 2 * time.Minute, 2 * time.Minute, true},
		{"SecondsOnRequestTimeout", http.StatusRequestTimeout, seconds("5"), 5 * time.Second, 5 * time.Second, false},
		{"SecondsOnServerError", http.StatusInternalServerError, seconds("5"), 5 * time.Second, 5 * time.Second, false},
		{"SecondsCappedAtAnHour", http.StatusServiceUnavailable, seconds("7200"), time.Hour, time.Hour, true},
		{"HugeSecondsCappedAtAnHour", http.StatusServiceUnavailable, seconds("1000000000000"), time.Hour, time.Hour, true},
		{"OverflowingSecondsCappedAtAnHour", http.StatusServiceUnavailable, seconds("99999999999999999999999"), time.Hour, time.Hour, true},
		{"OverflowingNegativeSeconds", http.StatusServiceUnavailable, seconds("-99999999999999999999999"), 0, 0, false},
		// An HTTP date has whole seconds, and the call takes a moment.
		{"HTTPDate", http.StatusServiceUnavailable, date(90 * time.Second), 80 * time.Second, 90 * time.Second, true},
		{"HTTPDateCappedAtAnHour", http.StatusServiceUnavailable, date(3 * time.Hour), time.Hour, time.Hour, true},
		{"HTTPDateInThePast", http.StatusServiceUnavailable, date(-time.Hour), 0, 0, false},
		{"Zero", http.StatusServiceUnavailable, seconds("0"), 0, 0, false},
		{"Negative", http.StatusServiceUnavailable, seconds("-5"), 0, 0, false},
		{"Garbage", http.StatusServiceUnavailable, seconds("soon"), 0, 0, false},
		{"None", http.StatusServiceUnavailable, seconds(""), 0, 0, false},
		{"IgnoredOnARefusal", http.StatusBadRequest, seconds("30"), 0, 0, false},
		{"IgnoredOnRefusedCredentials", http.StatusUnauthorized, seconds("30"), 0, 0, false},
	}
	for _, tt := range tests {
		for _, c := range []call{callUpsert, callNotify} {
			t.Run(tt.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				bundle := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					var headers []string
					if v := tt.header(time.Now()); v != "" {
						headers = []string{"Retry-After", v}
					}
					answer(tt.status, `{"error":"later"}`, headers...)(w, r)
				}), nil)

				_, err := bundle.run(t, c)
				de, ok := destination.AsError(err)
				if !ok {
					t.Fatalf("error %v, want a *destination.Error", err)
				}
				if de.RetryAfter < tt.min || de.RetryAfter > tt.max {
					t.Errorf("RetryAfter %v, want within [%v, %v]", de.RetryAfter, tt.min, tt.max)
				}
				if de.HoldAll != tt.holdAll {
					t.Errorf("HoldAll %t, want %t", de.HoldAll, tt.holdAll)
				}
			})
		}
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
			de := requireError(t, err, destination.Transient, false)
			if de.Status != 0 {
				t.Errorf("%s: Status %d, want none", c.name, de.Status)
			}
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
			requireError(t, err, destination.Transient, true)
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
			requireError(t, err, destination.Transient, true)
			if elapsed := time.Since(start); elapsed > patience/2 {
				t.Errorf("%s returned after %v: the destination's Timeout did not end it", c.name, elapsed)
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
// re-sent behind the lead's life's back; an upsert may be.
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
		requireError(t, err, destination.Transient, true)
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
		for _, c := range []call{callLookup, callNotify} {
			t.Run(tt.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				bundle := setup(t, tt.handler, nil)

				for range 3 {
					_, _ = bundle.run(t, c)
				}
				if n := bundle.conns.Load(); n != 1 {
					t.Errorf("3 calls used %d connections, want 1", n)
				}
			})
		}
	}
}

// A success that carries no usable id may have written the record all the
// same: the lead's life must look before it posts again.
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
				de := requireError(t, err, destination.Transient, true)
				if de.Status != status {
					t.Errorf("Status %d, want %d", de.Status, status)
				}
				if found {
					t.Error("an id was returned")
				}
			})
		}
	}
}

// Bodies may hold personal data: neither the request's nor the answer's
// shows in an error's message, and neither does a token.
func TestClientErrorsHoldNoBodies(t *testing.T) {
	t.Parallel()

	const secret = "ANSWER-SECRET " + leadEmail
	handlers := map[string]http.HandlerFunc{
		"Refusal":        answer(http.StatusBadRequest, `{"error":"`+secret+`","email":"`+leadEmail+`"}`),
		"Unauthorized":   answer(http.StatusUnauthorized, `{"error":"`+secret+`"}`),
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
				for _, leak := range []string{"SECRET", leadEmail, leadName, "Analytical", "+44", leadRef, crmToken, notifyToken} {
					if strings.Contains(msg, leak) {
						t.Errorf("error message %q contains %q", msg, leak)
					}
				}
			})
		}
	}
}

// Each call is reported, by its step and its outcome, for the delivery
// log (and the worker's metrics, which count them by destination).
func TestClientReportsEachCall(t *testing.T) {
	t.Parallel()

	var next atomic.Int32
	statuses := []int{http.StatusOK, http.StatusNotFound, http.StatusServiceUnavailable, http.StatusBadRequest}
	bundle := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status := http.StatusOK
		switch {
		case r.URL.Path == "/notify":
			status = http.StatusAccepted
		case r.Method == http.MethodPost:
			status = http.StatusCreated
		case r.Method == http.MethodGet:
			status = statuses[next.Add(1)-1]
		}
		answer(status, `{"id":"crm_000001"}`)(w, r)
	}), nil)

	var (
		mu   sync.Mutex
		seen []string
	)
	ctx := destination.WithObserver(context.Background(), func(o destination.Observation) {
		mu.Lock()
		defer mu.Unlock()
		if o.Duration <= 0 || o.StartedAt.IsZero() {
			t.Errorf("observation %+v without a start or a duration", o)
		}
		seen = append(seen, o.Step+" "+o.Outcome)
	})
	r := record()
	for range statuses {
		_, _, _ = bundle.create.Lookup(ctx, r)
	}
	_, _ = bundle.upsert.Write(ctx, r)
	_, _ = bundle.create.Write(ctx, r)
	_, _ = bundle.channel.Send(ctx, r, "")
	// Neither makes a call.
	_, _ = bundle.upsert.Update(ctx, "crm_000001", r)
	_, _ = bundle.upsert.Prepare(ctx, r)
	_, _, _ = bundle.channel.Find(ctx, r, time.Now())

	mu.Lock()
	defer mu.Unlock()
	want := "crm_lookup 200, crm_lookup 404, crm_lookup 503, crm_lookup 400, crm 200, crm 201, notification 202"
	if got := strings.Join(seen, ", "); got != want {
		t.Errorf("calls reported %q, want %q", got, want)
	}
}

// The kind's capabilities, and the calls it does not make.
func TestCapabilities(t *testing.T) {
	t.Parallel()

	var requests atomic.Int32
	bundle := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		answer(http.StatusOK, `{"id":"crm_000001"}`)(w, r)
	}), nil)
	if c := bundle.upsert.Capabilities(); !c.Upsert || !c.ConsistentLookup || c.UpdateByID || c.Prepares {
		t.Errorf("upsert mode: %+v, want an upsert with a consistent look-up", c)
	}
	if c := bundle.create.Capabilities(); c.Upsert || !c.ConsistentLookup || c.UpdateByID || c.Prepares {
		t.Errorf("create mode: %+v, want a create with a consistent look-up", c)
	}
	if c := bundle.channel.Capabilities(); !c.Dedupes {
		t.Errorf("channel: %+v, want one that dedupes", c)
	}
	ctx := context.Background()
	if _, err := bundle.upsert.Update(ctx, "crm_000001", record()); destination.Classify(err) != destination.Rejected || err == nil {
		t.Errorf("Update: %v, want a rejection", err)
	}
	if p, err := bundle.upsert.Prepare(ctx, record()); p != "" || err != nil {
		t.Errorf("Prepare = %q, %v; want nothing", p, err)
	}
	if rc, found, err := bundle.channel.Find(ctx, record(), time.Now()); rc != "" || found || err != nil {
		t.Errorf("Find = %q, %t, %v; want nothing found", rc, found, err)
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests, want none", n)
	}
}

// What NewClient used to check of CRM_URL and NOTIFY_URL, the kind's
// Validate checks of its url.
func TestSpecValidate(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		edit func(*destination.Config)
		ok   bool
	}{
		{"Valid", func(*destination.Config) {}, true},
		{"ValidCreate", func(c *destination.Config) { c.Values["mode"] = generic.ModeCreate }, true},
		{"MissingURL", func(c *destination.Config) { delete(c.Values, "url") }, false},
		{"RelativeURL", func(c *destination.Config) { c.Values["url"] = "/crm" }, false},
		{"OtherScheme", func(c *destination.Config) { c.Values["url"] = "ftp://n.example/" }, false},
		{"NoHost", func(c *destination.Config) { c.Values["url"] = "http:///crm" }, false},
		{"Unparsable", func(c *destination.Config) { c.Values["url"] = "http://[::1" }, false},
		{"UnknownMode", func(c *destination.Config) { c.Values["mode"] = "replace" }, false},
		{"Map", func(c *destination.Config) { c.Map = destination.Mapping{{Field: "jobtitle", Source: "name"}} }, false},
		{"BaseURL", func(c *destination.Config) { c.BaseURL = "https://proxy.example" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &destination.Config{Name: "crm", Kind: generic.Kind, Values: map[string]string{
				"url": "https://crm.example/api", "token": "SECRET-TOKEN",
			}}
			tt.edit(c)
			err := generic.Spec.Validate(c)
			if (err == nil) != tt.ok {
				t.Errorf("Validate: error %v, want ok %t", err, tt.ok)
			}
			if err != nil && strings.Contains(err.Error(), "SECRET") {
				t.Errorf("error %q shows the token", err)
			}
		})
	}
}
