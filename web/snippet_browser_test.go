package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leadintake/leadintake/internal/browsertest"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/web"
)

const testPK = "pk_test_0123456789abcdef"

// scriptedAPI stands in for the api, from the browser's side of the
// network: it serves the snippet, answers CORS preflights from any origin,
// and answers every other request with the next of its scripted answers,
// recording what it was sent. The real api is the e2e tests' business;
// this one makes the answers the snippet must survive (a 503, a 429, a
// refused Supersedes) happen on cue.
type scriptedAPI struct {
	url string
	// module is the URL the page imports the snippet from: its own, unless
	// a test shares another's module instance (and its memory).
	module string

	mu      sync.Mutex
	answers []scripted
	got     []sent
	// down is how many more requests (preflights and /healthz included)
	// are answered as a load balancer answers while the api is down: 502,
	// an error page without CORS headers.
	down int
	// refuseOrigin answers every preflight 403 without CORS headers, as
	// the api answers an origin no publishable key allows.
	refuseOrigin bool
}

// scripted is one answer of a scriptedAPI.
type scripted struct {
	status int
	header map[string]string
	body   string
}

// sent is one request a scriptedAPI received.
type sent struct {
	Method, Path, Key, Supersedes, Prefer, Body, Signals string
}

func newScriptedAPI(t *testing.T, answers ...scripted) *scriptedAPI {
	t.Helper()
	a := &scriptedAPI{answers: answers}
	snippet := web.Snippet()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/sdk/leadintake.js" {
			snippet.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		a.mu.Lock()
		down := a.down > 0
		if down {
			a.down--
		}
		refuse := a.refuseOrigin
		a.mu.Unlock()
		if down {
			h.Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<h1>502 Bad Gateway</h1>")
			return
		}
		if r.URL.Path == "/healthz" {
			// As the api answers it: readable from any page.
			h.Set("Access-Control-Allow-Origin", "*")
			h.Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"status":"ok"}`)
			return
		}
		if r.Method == http.MethodOptions && refuse {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		h.Set("Access-Control-Allow-Origin", r.Header.Get("Origin"))
		h.Set("Access-Control-Expose-Headers", "Idempotency-Key, Idempotent-Replayed, Location, Retry-After")
		if r.Method == http.MethodOptions {
			h.Set("Access-Control-Allow-Methods", "GET, POST")
			// The contract's list: a header the snippet sends beyond it
			// fails the preflight, and with it every POST.
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key, Supersedes, Prefer, X-Request-Id, Form-Signals, traceparent, tracestate")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		body, _ := io.ReadAll(r.Body)
		a.mu.Lock()
		a.got = append(a.got, sent{
			Method: r.Method, Path: r.URL.Path, Key: r.Header.Get("Idempotency-Key"),
			Supersedes: r.Header.Get("Supersedes"), Prefer: r.Header.Get("Prefer"), Body: string(body),
			Signals: r.Header.Get("Form-Signals"),
		})
		next := scripted{status: http.StatusBadRequest, body: `{"error":{"code":"script_exhausted","message":"no more answers"}}`}
		if len(a.answers) > 0 {
			next, a.answers = a.answers[0], a.answers[1:]
		}
		a.mu.Unlock()
		for k, v := range next.header {
			h.Set(k, v)
		}
		h.Set("Content-Type", "application/json")
		w.WriteHeader(next.status)
		_, _ = io.WriteString(w, next.body)
	}))
	t.Cleanup(srv.Close)
	a.url = srv.URL
	a.module = srv.URL + "/v1/sdk/leadintake.js"
	return a
}

// requests returns what the api was sent, preflights aside.
func (a *scriptedAPI) requests() []sent {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got)
}

// outcome is what submitLead came to in the page.
type outcome struct {
	Answer *struct {
		Status     string `json:"status"`
		LeadID     string `json:"lead_id"`
		HTTPStatus int    `json:"httpStatus"`
		Key        string `json:"key"`
		RetryAfter int    `json:"retryAfter"`
		Error      *struct {
			Code    string            `json:"code"`
			Details []json.RawMessage `json:"details"`
		} `json:"error"`
	} `json:"answer"`
	Error   string   `json:"error"` // the rejection's name
	Saved   bool     `json:"saved"`
	Key     string   `json:"key"`
	Events  []string `json:"events"`
	Stored  []string `json:"stored"`  // the localStorage record at each event, "" for none
	Pending string   `json:"pending"` // the localStorage record, "" for none
}

// submitIn runs submitLead in the page against api, after setup (a
// statement run first, such as one that writes localStorage).
func submitIn(t *testing.T, tab context.Context, api *scriptedAPI, lead string, timeout time.Duration, setup string) outcome {
	t.Helper()
	return runIn(t, tab, api, "m.submitLead({...opts, lead: "+lead+"})", timeout, setup)
}

// runIn evaluates call, a promise of an Answer made with the module m and
// the options opts (the api, the key, the progress target, timeout and
// wait; without attribution, so that the bodies are the leads as given:
// TestSnippetAttribution tests it), in the page against api, after setup. Beside each progress event
// it records what localStorage holds for the enquiry at that moment.
func runIn(t *testing.T, tab context.Context, api *scriptedAPI, call string, timeout time.Duration, setup string) outcome {
	t.Helper()
	script := fmt.Sprintf(`(async () => {
		%s;
		const m = await import(%q);
		const events = [], stored = [], target = new EventTarget(), name = %q;
		target.addEventListener(m.PROGRESS_EVENT, (e) => {
			events.push([e.detail.state, e.detail.reason ?? "", e.detail.wait ?? ""].join(" ").trim());
			stored.push(localStorage.getItem(name) ?? "");
		});
		const opts = { api: %q, publishableKey: %q, target, timeout: %d, wait: 3, attribution: false };
		let out;
		try {
			out = { answer: await %s };
		} catch (e) {
			out = { error: e.name, saved: e.saved, key: e.key };
		}
		out.events = events;
		out.stored = stored;
		out.pending = localStorage.getItem(name) ?? "";
		return JSON.stringify(out);
	})()`, setup, api.module, storageKey, api.url, testPK, timeout.Milliseconds(), call)
	ctx, cancel := context.WithTimeout(tab, 2*testkit.Patience)
	defer cancel()
	res, err := chromedp.Run(ctx, chromedp.Evaluate[string](script, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s in the browser: %v", call, err)
	}
	var out outcome
	if err := json.Unmarshal([]byte(res), &out); err != nil {
		t.Fatalf("the outcome %s: %v", res, err)
	}
	return out
}

// storageKey is where the snippet keeps the enquiry of testPK's default
// name.
const storageKey = "leadintake:" + testPK + ":enquiry"

// record is the snippet's localStorage record of an enquiry.
type record struct {
	V          int     `json:"v"`
	Key        string  `json:"key"`
	At         float64 `json:"at"`
	Body       *string `json:"body"`
	Supersedes *string `json:"supersedes"`
	Acked      bool    `json:"acked"`
}

// parseRecord reads a record; "" is none.
func parseRecord(t *testing.T, s string) *record {
	t.Helper()
	if s == "" {
		return nil
	}
	var r record
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		t.Fatalf("the stored record %s: %v", s, err)
	}
	return &r
}

// browserTab starts Chromium on an empty page of an origin of its own, or
// skips the test without one (fails it in CI, where a browser test must
// not silently disappear).
func browserTab(t *testing.T) context.Context {
	t.Helper()
	browsertest.Require(t)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, "<!doctype html><title>blank</title>")
	}))
	t.Cleanup(page.Close)
	tab, stop := browsertest.Start(t, context.Background(), 800, 600)
	t.Cleanup(stop)
	if err := chromedp.Do(tab, chromedp.Navigate(page.URL)); err != nil {
		t.Fatalf("browser: %v", err)
	}
	return tab
}

const (
	lead     = `{email: "ada@example.com", source: "website", name: "Ada"}`
	leadJSON = `{"email":"ada@example.com","source":"website","name":"Ada"}`
	// clearStorage starts a case with no pending enquiry.
	clearStorage = "localStorage.clear()"
)

// acceptedReplayed is a 202 for key as the api sends it, with its
// Idempotent-Replayed.
func acceptedReplayed(key, replayed string) scripted {
	a := accepted(key)
	a.header["Idempotent-Replayed"] = replayed
	return a
}

// jsQuote quotes s as a JavaScript string literal.
func jsQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func accepted(key string) scripted {
	return scripted{status: http.StatusAccepted, header: map[string]string{"Location": "/v1/operations/" + key, "Retry-After": "1"},
		body: `{"status":"processing","idempotency_key":"` + key + `","lead_id":"L1","status_url":"/v1/operations/` + key + `"}`}
}

// The snippet's side of the retry contract, against answers on cue. The
// cases run one after another in one tab: they share its localStorage.
func TestSnippetInBrowser(t *testing.T) {
	t.Parallel()
	tab := browserTab(t)

	t.Run("RetriesWithTheSameKeyAndBodyThenPolls", func(t *testing.T) {
		api := newScriptedAPI(t,
			scripted{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "1"}, body: `{"error":{"code":"store_unavailable","message":"x"}}`},
			scripted{status: http.StatusTooManyRequests, header: map[string]string{"Retry-After": "1"}, body: `{"error":{"code":"rate_limited","message":"x"}}`},
			accepted("will-be-replaced"),
			scripted{status: http.StatusOK, body: `{"idempotency_key":"k","state":"processing","lead_id":"L1","response":null}`},
			scripted{status: http.StatusOK, body: `{"idempotency_key":"k","state":"completed","lead_id":"L1","response":{"status":201,"body":{"status":"completed","lead_id":"L1"}}}`},
		)
		out := submitIn(t, tab, api, lead, time.Minute, clearStorage)
		if out.Answer == nil || out.Answer.Status != "completed" || out.Answer.LeadID != "L1" || out.Answer.HTTPStatus != 201 {
			t.Fatalf("outcome %+v, want completed L1 201", out)
		}
		got := api.requests()
		if len(got) != 5 {
			t.Fatalf("requests %+v, want 3 POSTs and 2 polls", got)
		}
		key := got[0].Key
		for i, r := range got[:3] {
			if r.Method != http.MethodPost || r.Key != key || r.Body != leadJSON || r.Supersedes != "" || !strings.HasPrefix(r.Prefer, "wait=") {
				t.Errorf("POST %d: %+v, want the same key %s and body, and Prefer: wait", i+1, r, key)
			}
		}
		for _, r := range got[3:] {
			if r.Method != http.MethodGet || r.Path != "/v1/operations/will-be-replaced" || r.Prefer != "wait=3" {
				t.Errorf("poll %+v, want GET of the Location with Prefer: wait=3", r)
			}
		}
		if out.Answer.Key != key || out.Pending != "" {
			t.Errorf("answer key %q (want %q), pending %q (want none)", out.Answer.Key, key, out.Pending)
		}
		want := []string{"saving", "retrying busy 1000", "saving", "retrying rate_limited 1000", "saving", "waiting", "waiting", "done"}
		if !slices.Equal(out.Events, want) {
			t.Errorf("events %q, want %q", out.Events, want)
		}
	})

	t.Run("AnEditSupersedesThePendingEnquiry", func(t *testing.T) {
		api := newScriptedAPI(t,
			scripted{status: http.StatusCreated, body: `{"status":"completed","lead_id":"L2"}`},
		)
		setup := `localStorage.setItem("leadintake:` + testPK + `:enquiry", JSON.stringify({v: 1, key: "earlier-key-0001", body: "{\"email\":\"old@example.com\",\"source\":\"website\"}", supersedes: null, at: Date.now()}))`
		out := submitIn(t, tab, api, lead, time.Minute, setup)
		got := api.requests()
		if out.Answer == nil || out.Answer.Status != "completed" || len(got) != 1 {
			t.Fatalf("outcome %+v, requests %+v", out, got)
		}
		if r := got[0]; r.Supersedes != "earlier-key-0001" || r.Key == "earlier-key-0001" || r.Key == "" || r.Body != leadJSON {
			t.Errorf("the edit was sent as %+v, want a new key superseding earlier-key-0001", r)
		}
	})

	t.Run("TheSameEnquiryKeepsItsKey", func(t *testing.T) {
		api := newScriptedAPI(t, scripted{status: http.StatusCreated, body: `{"status":"completed","lead_id":"L3"}`})
		setup := `localStorage.setItem("leadintake:` + testPK + `:enquiry", JSON.stringify({v: 1, key: "pending-key-0001", body: ` + fmt.Sprintf("%q", leadJSON) + `, supersedes: "older-key-0001", at: Date.now()}))`
		out := submitIn(t, tab, api, lead, time.Minute, setup)
		got := api.requests()
		if out.Answer == nil || len(got) != 1 || got[0].Key != "pending-key-0001" || got[0].Supersedes != "older-key-0001" {
			t.Fatalf("outcome %+v, requests %+v; want the pending key, with its Supersedes", out, got)
		}
	})

	t.Run("AnUnknownSupersededKeyIsDropped", func(t *testing.T) {
		api := newScriptedAPI(t,
			scripted{status: http.StatusUnprocessableEntity, body: `{"error":{"code":"supersedes_unknown","message":"x"}}`},
			scripted{status: http.StatusCreated, body: `{"status":"completed","lead_id":"L4"}`},
		)
		setup := `localStorage.setItem("leadintake:` + testPK + `:enquiry", JSON.stringify({v: 1, key: "never-sent-0001", body: "{}", supersedes: null, at: Date.now()}))`
		out := submitIn(t, tab, api, lead, time.Minute, setup)
		got := api.requests()
		if out.Answer == nil || out.Answer.Status != "completed" || len(got) != 2 {
			t.Fatalf("outcome %+v, requests %+v", out, got)
		}
		if got[0].Supersedes != "never-sent-0001" || got[1].Supersedes != "" || got[1].Key != got[0].Key {
			t.Errorf("requests %+v, want the same key again without Supersedes", got)
		}
	})

	t.Run("ARefusalIsFinal", func(t *testing.T) {
		api := newScriptedAPI(t, scripted{status: http.StatusUnprocessableEntity,
			body: `{"error":{"code":"validation_failed","message":"x","details":[{"field":"email","problem":"is required"}]}}`})
		out := submitIn(t, tab, api, lead, time.Minute, clearStorage)
		if out.Answer == nil || out.Answer.Status != "refused" || out.Answer.Error == nil || out.Answer.Error.Code != "validation_failed" ||
			len(out.Answer.Error.Details) != 1 || out.Pending != "" || len(api.requests()) != 1 {
			t.Fatalf("outcome %+v, want refused validation_failed with its details, nothing pending, one request", out)
		}
	})

	t.Run("ALongRateLimitIsFinal", func(t *testing.T) {
		api := newScriptedAPI(t, scripted{status: http.StatusTooManyRequests, header: map[string]string{"Retry-After": "600"},
			body: `{"error":{"code":"rate_limited","message":"x"}}`})
		out := submitIn(t, tab, api, lead, time.Minute, clearStorage)
		if out.Answer == nil || out.Answer.Status != "refused" || out.Answer.Error == nil || out.Answer.Error.Code != "rate_limited" || out.Answer.RetryAfter != 600 {
			t.Fatalf("outcome %+v, want refused rate_limited, retryAfter 600", out)
		}
	})

	t.Run("NoAnswerInTimeIsUncertain", func(t *testing.T) {
		busy := scripted{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "1"}, body: `{"error":{"code":"store_unavailable","message":"x"}}`}
		api := newScriptedAPI(t, busy, busy, busy, busy, busy, busy)
		out := submitIn(t, tab, api, lead, 2500*time.Millisecond, clearStorage)
		if out.Error != "OutcomeUnknown" || out.Saved || out.Key == "" || !strings.Contains(out.Pending, out.Key) {
			t.Fatalf("outcome %+v, want OutcomeUnknown, not saved, the enquiry still pending under its key", out)
		}
		if last := out.Events[len(out.Events)-1]; last != "uncertain" {
			t.Errorf("events %q, want uncertain last", out.Events)
		}
	})

	// Before the api acknowledges the enquiry the record holds its body, so
	// that a retry sends the same bytes; from the 202 on only the key;
	// after the final answer nothing.
	t.Run("WhatItKeeps", func(t *testing.T) {
		api := newScriptedAPI(t,
			scripted{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "1"}, body: `{"error":{"code":"store_unavailable","message":"x"}}`},
			acceptedReplayed("kept-key-0001", "false"),
			scripted{status: http.StatusOK, body: `{"idempotency_key":"k","state":"processing","lead_id":"L1","response":null}`},
			scripted{status: http.StatusOK, body: `{"idempotency_key":"k","state":"completed","lead_id":"L1","response":{"status":201,"body":{"status":"completed","lead_id":"L1"}}}`},
		)
		out := submitIn(t, tab, api, lead, time.Minute, clearStorage)
		want := []string{"saving", "retrying busy 1000", "saving", "waiting", "waiting", "done"}
		if out.Answer == nil || out.Answer.Status != "completed" || !slices.Equal(out.Events, want) || len(out.Stored) != len(want) {
			t.Fatalf("outcome %+v, want completed after events %q", out, want)
		}
		key := out.Answer.Key
		for i, event := range out.Events {
			rec := parseRecord(t, out.Stored[i])
			switch event {
			case "saving", "retrying busy 1000":
				if rec == nil || rec.Key != key || rec.Acked || rec.Body == nil || *rec.Body != leadJSON {
					t.Errorf("at %q, before the api acknowledged it, the record is %s; want the key %s with the body", event, out.Stored[i], key)
				}
			case "waiting":
				if rec == nil || rec.Key != key || !rec.Acked || rec.Body != nil || strings.Contains(out.Stored[i], "ada@example.com") {
					t.Errorf("at %q, after the 202, the record is %s; want the key %s alone", event, out.Stored[i], key)
				}
			case "done":
				if rec != nil {
					t.Errorf("after the final answer the record is %s; want none", out.Stored[i])
				}
			}
		}
	})

	// Once the api has the enquiry, sending it again from the same page
	// (an uncertain outcome, the visitor presses Send again) polls its key:
	// the page still knows the body, the storage does not.
	t.Run("AfterAcknowledgementTheSameEnquiryIsPolled", func(t *testing.T) {
		processing := scripted{status: http.StatusOK, body: `{"idempotency_key":"k","state":"processing","lead_id":"L5","response":null}`}
		api := newScriptedAPI(t, acceptedReplayed("polled-key-0001", "false"), processing, processing, processing, processing)
		out := submitIn(t, tab, api, lead, 2500*time.Millisecond, clearStorage)
		rec := parseRecord(t, out.Pending)
		if out.Error != "OutcomeUnknown" || !out.Saved || rec == nil || rec.Key != out.Key || !rec.Acked || rec.Body != nil {
			t.Fatalf("outcome %+v; want OutcomeUnknown, saved, the key alone stored", out)
		}
		key := out.Key
		api2 := newScriptedAPI(t, scripted{status: http.StatusOK,
			body: `{"idempotency_key":"k","state":"completed","lead_id":"L5","response":{"status":201,"body":{"status":"completed","lead_id":"L5"}}}`})
		// The same module as the first run's: the same page's memory.
		api2.module = api.module
		out = runIn(t, tab, api2, "m.submitLead({...opts, lead: "+lead+"})", time.Minute, "")
		got := api2.requests()
		if out.Answer == nil || out.Answer.Status != "completed" || out.Answer.Key != key || len(got) != 1 ||
			got[0].Method != http.MethodGet || got[0].Path != "/v1/operations/"+key || out.Pending != "" {
			t.Fatalf("outcome %+v, requests %+v; want one poll of %s, completed, nothing stored", out, got, key)
		}
	})

	// After a reload the stored key is all there is: it is polled, never
	// sent again, and the form cannot be filled back.
	t.Run("AReloadAfterAcknowledgementPolls", func(t *testing.T) {
		api := newScriptedAPI(t,
			scripted{status: http.StatusOK, body: `{"idempotency_key":"k","state":"processing","lead_id":"L6","response":null}`},
			scripted{status: http.StatusOK, body: `{"idempotency_key":"k","state":"completed","lead_id":"L6","response":{"status":201,"body":{"status":"completed","lead_id":"L6"}}}`},
		)
		setup := `localStorage.setItem(` + jsQuote(storageKey) + `, JSON.stringify({v: 1, key: "acked-key-0001", at: Date.now(), acked: true}))`
		pending := runIn(t, tab, api, "Promise.resolve(m.pendingLead(opts))", time.Minute, setup)
		if p := pending.Answer; p == nil || p.Key != "acked-key-0001" {
			t.Fatalf("pendingLead: %+v", pending)
		}
		out := runIn(t, tab, api, "m.resumeLead(opts)", time.Minute, "")
		got := api.requests()
		if out.Answer == nil || out.Answer.Status != "completed" || out.Answer.Key != "acked-key-0001" || out.Pending != "" || len(got) != 2 {
			t.Fatalf("outcome %+v, requests %+v; want two polls, completed, nothing stored", out, got)
		}
		for _, r := range got {
			if r.Method != http.MethodGet || r.Path != "/v1/operations/acked-key-0001" {
				t.Errorf("request %+v, want a poll of the stored key", r)
			}
		}
		if want := []string{"waiting", "waiting", "done"}; !slices.Equal(out.Events, want) {
			t.Errorf("events %q, want %q", out.Events, want)
		}
	})

	// A quarantined enquiry's final answer, 200 received, is final: the
	// page shows its thanks, and nothing is kept.
	t.Run("ReceivedIsFinal", func(t *testing.T) {
		api := newScriptedAPI(t, scripted{status: http.StatusOK, header: map[string]string{"Idempotent-Replayed": "false"},
			body: `{"status":"received","lead_id":"L9"}`})
		out := submitIn(t, tab, api, lead, time.Minute, clearStorage)
		if out.Answer == nil || out.Answer.Status != "received" || out.Answer.LeadID != "L9" || out.Answer.HTTPStatus != 200 ||
			out.Pending != "" || len(api.requests()) != 1 || out.Events[len(out.Events)-1] != "done" {
			t.Fatalf("outcome %+v; want received L9 200, done, nothing stored, one request", out)
		}
	})

	// Every POST carries Form-Signals, read afresh: hp, t since shownAt,
	// and the captcha token as a structured-field string.
	t.Run("FormSignals", func(t *testing.T) {
		api := newScriptedAPI(t,
			scripted{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "2"}, body: `{"error":{"code":"store_unavailable","message":"x"}}`},
			scripted{status: http.StatusCreated, body: `{"status":"completed","lead_id":"L7"}`},
		)
		call := `m.submitLead({...opts, lead: ` + lead + `, shownAt: Date.now() - 5000, honeypot: () => true, captcha: () => 'to"k\\en'})`
		out := runIn(t, tab, api, call, time.Minute, clearStorage)
		got := api.requests()
		if out.Answer == nil || out.Answer.Status != "completed" || len(got) != 2 {
			t.Fatalf("outcome %+v, requests %+v", out, got)
		}
		var ts []int
		for _, r := range got {
			m := regexp.MustCompile(`^hp=\?1, t=([0-9]+), captcha="to\\"k\\\\en"$`).FindStringSubmatch(r.Signals)
			if m == nil {
				t.Fatalf("Form-Signals %q, want hp=?1, t=<seconds>, captcha=\"to\\\"k\\\\en\"", r.Signals)
			}
			n, _ := strconv.Atoi(m[1])
			ts = append(ts, n)
		}
		if ts[0] < 5 || ts[1] < ts[0]+2 {
			t.Errorf("t %v: want at least 5, then at least 2 more (the Retry-After)", ts)
		}

		api = newScriptedAPI(t, scripted{status: http.StatusCreated, body: `{"status":"completed","lead_id":"L8"}`})
		out = runIn(t, tab, api, `m.submitLead({...opts, lead: `+lead+`, shownAt: Date.now(), captcha: "caf\u00e9"})`, time.Minute, clearStorage)
		if got := api.requests(); out.Answer == nil || len(got) != 1 || !regexp.MustCompile(`^hp=\?0, t=[0-9]+$`).MatchString(got[0].Signals) {
			t.Fatalf("outcome %+v, requests %+v; want hp=?0 and t, and no captcha a structured-field string cannot carry", out, got)
		}
	})

	// A load balancer's 502 without CORS headers, preflights and /healthz
	// included, is the api out of reach, whatever the browser makes of it:
	// the snippet keeps the enquiry and keeps trying (offline), and sends it
	// once the api answers.
	t.Run("ABadGatewayIsNoRefusal", func(t *testing.T) {
		api := newScriptedAPI(t, scripted{status: http.StatusCreated, body: `{"status":"completed","lead_id":"L10"}`})
		api.down = 12
		out := submitIn(t, tab, api, lead, 2*time.Minute, clearStorage)
		got := api.requests()
		if out.Answer == nil || out.Answer.Status != "completed" || out.Answer.LeadID != "L10" || len(got) != 1 || got[0].Body != leadJSON {
			t.Fatalf("outcome %+v, requests %+v; want completed L10 after one POST that got through", out, got)
		}
		offline := 0
		for _, e := range out.Events {
			if strings.HasPrefix(e, "retrying offline ") {
				offline++
			}
		}
		if offline < 2 || out.Pending != "" {
			t.Errorf("events %q, pending %q; want retrying offline, more than once, and nothing kept at the end", out.Events, out.Pending)
		}
	})

	// An origin the api refuses (its preflight 403, without CORS headers)
	// while the api answers /healthz: a refusal, final after two tries,
	// and nothing kept.
	t.Run("ARefusedOriginIsFinal", func(t *testing.T) {
		api := newScriptedAPI(t)
		api.refuseOrigin = true
		out := submitIn(t, tab, api, lead, time.Minute, clearStorage)
		if out.Answer == nil || out.Answer.Status != "refused" || out.Answer.Error == nil || out.Answer.Error.Code != "origin_not_allowed" || out.Pending != "" {
			t.Fatalf("outcome %+v; want refused origin_not_allowed, nothing kept", out)
		}
	})

	// The browser coming back online ends the wait before the next attempt:
	// the enquiry goes at once, not after its Retry-After.
	t.Run("OnlineSendsAtOnce", func(t *testing.T) {
		api := newScriptedAPI(t,
			scripted{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "40"}, body: `{"error":{"code":"store_unavailable","message":"x"}}`},
			scripted{status: http.StatusCreated, body: `{"status":"completed","lead_id":"L11"}`},
		)
		call := `(async () => {
			const run = m.submitLead({...opts, lead: ` + lead + `});
			await new Promise((resolve) => target.addEventListener(m.PROGRESS_EVENT, (e) => e.detail.state === "retrying" && resolve()));
			window.dispatchEvent(new Event("online"));
			return run;
		})()`
		start := time.Now()
		out := runIn(t, tab, api, call, 2*time.Minute, clearStorage)
		if out.Answer == nil || out.Answer.Status != "completed" || len(api.requests()) != 2 {
			t.Fatalf("outcome %+v, requests %+v", out, api.requests())
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("the enquiry went %v after the browser came back online; want at once, not after its Retry-After", took)
		}
	})

	// Records older than a week are deleted when the snippet loads; the
	// rest of localStorage is left alone.
	t.Run("OldRecordsAreDeletedOnLoad", func(t *testing.T) {
		api := newScriptedAPI(t)
		week := (7 * 24 * time.Hour).Milliseconds()
		script := fmt.Sprintf(`(async () => {
			localStorage.clear();
			localStorage.setItem("leadintake:pk_a:old", JSON.stringify({v: 1, key: "old-key-0001", at: Date.now() - %d - 60000, acked: true}));
			localStorage.setItem("leadintake:pk_a:new", JSON.stringify({v: 1, key: "new-key-0001", at: Date.now() - %d + 600000, body: "{}"}));
			localStorage.setItem("leadintake:pk_a:junk", "not json");
			localStorage.setItem("someone-else", "keep me");
			await import(%q + "?fresh=" + Math.random());
			return JSON.stringify(Object.keys(localStorage).sort());
		})()`, week, week, api.url+"/v1/sdk/leadintake.js")
		ctx, cancel := context.WithTimeout(tab, 2*testkit.Patience)
		defer cancel()
		res, err := chromedp.Run(ctx, chromedp.Evaluate[string](script, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		if res != `["leadintake:pk_a:new","someone-else"]` {
			t.Errorf("after the snippet loaded localStorage holds %s; want the recent record and the page's own", res)
		}
	})
}
