package intake_test

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/webhook"
)

// fromPage makes req a web page's: client a's publishable key, sent from
// origin.
func fromPage(origin string) func(*http.Request) {
	return func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+publishableKeyA)
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
	}
}

// requireNoCORS checks an answer a page must not be able to read.
func requireNoCORS(t *testing.T, res *reply) {
	t.Helper()
	if got := res.Header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Errorf("%d with Access-Control-Allow-Origin %q, want none", res.Status, got)
	}
}

// requireCORS checks an answer the page of shopOrigin may read.
func requireCORS(t *testing.T, res *reply) {
	t.Helper()
	if res.Header.Get("Access-Control-Allow-Origin") != shopOrigin || res.Header.Get("Vary") != "Origin" ||
		res.Header.Get("Access-Control-Expose-Headers") != "Idempotency-Key, Idempotent-Replayed, Location, Retry-After, X-Request-Id, Preference-Applied" {
		t.Errorf("%d with CORS headers %v, want those of %s", res.Status, res.Header, shopOrigin)
	}
}

func TestBrowsers(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, nil)
	preflight := func(path, origin string) *http.Request {
		req := newRequest(t, api, http.MethodOptions, path)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type, idempotency-key")
		return req
	}

	t.Run("PreflightFromAnAllowedOrigin", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{"/v1/leads", "/v1/operations/some-key-0001"} {
			res := api.send(t, preflight(path, shopOrigin))
			h := res.Header
			if res.Status != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != shopOrigin || h.Get("Vary") != "Origin" ||
				h.Get("Access-Control-Allow-Methods") != "GET, POST" || h.Get("Access-Control-Max-Age") != "600" ||
				h.Get("Access-Control-Allow-Headers") != "Authorization, Content-Type, Idempotency-Key, Supersedes, Prefer, X-Request-Id, Form-Signals, traceparent, tracestate" {
				t.Errorf("OPTIONS %s from %s: %d %v", path, shopOrigin, res.Status, h)
			}
		}
	})

	t.Run("PreflightRefused", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct{ path, origin string }{
			{"/v1/leads", "https://evil.example"},
			{"/v1/leads", ""},
			{"/v1/leads", "http://shop.example"}, // another scheme is another origin
			{"/healthz", shopOrigin},
			{"/v1/webhooks/a/leads", shopOrigin},
			{"/nowhere", shopOrigin},
		} {
			res := api.send(t, preflight(tt.path, tt.origin))
			res.requireError(t, http.StatusForbidden, response.CodeOriginNotAllowed)
			requireNoCORS(t, res)
		}
	})

	t.Run("SubmitsAndPollsFromAnAllowedOrigin", func(t *testing.T) {
		t.Parallel()
		key := testkit.NewKey()
		res := api.send(t, api.submission(key, validBody, fromPage(shopOrigin)))
		res.requireAccepted(t, key, false)
		requireCORS(t, res)
		op := api.send(t, edited(api.operation(tokenA, key), fromPage(shopOrigin)))
		if op.Status != http.StatusOK {
			t.Fatalf("poll: %d %s", op.Status, op.Body)
		}
		requireCORS(t, op)
	})

	t.Run("RefusesOtherOrigins", func(t *testing.T) {
		t.Parallel()
		for _, origin := range []string{"https://evil.example", ""} {
			key := testkit.NewKey()
			res := api.send(t, api.submission(key, validBody, fromPage(origin)))
			res.requireError(t, http.StatusForbidden, response.CodeOriginNotAllowed)
			requireNoCORS(t, res)
			if keyStored(t, api.Pool, "a", key) {
				t.Fatal("a refused submission stored its key")
			}
		}
	})

	t.Run("RefusesEverythingElse", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct{ method, path string }{
			{http.MethodPost, "/v1/webhooks/a/leads"},
			{http.MethodGet, "/v1/leads"},
			{http.MethodDelete, "/v1/operations/some-key-0001"},
			{http.MethodGet, "/nowhere"},
		} {
			req := newRequest(t, api, tt.method, tt.path)
			fromPage(shopOrigin)(req)
			api.send(t, req).requireError(t, http.StatusForbidden, response.CodeForbiddenForPublishableKey)
		}
		// Public routes ignore Authorization.
		req := newRequest(t, api, http.MethodGet, "/healthz")
		fromPage("https://evil.example")(req)
		if res := api.send(t, req); res.Status != http.StatusOK {
			t.Errorf("GET /healthz with a publishable key: %d", res.Status)
		}
	})

	// Any page may read /healthz: the snippet tells by it the api that
	// refuses its origin from an api out of reach (a load balancer's 502).
	t.Run("HealthzIsReadableByAnyPage", func(t *testing.T) {
		t.Parallel()
		for _, origin := range []string{"https://evil.example", shopOrigin} {
			req := newRequest(t, api, http.MethodGet, "/healthz")
			req.Header.Set("Origin", origin)
			res := api.send(t, req)
			if res.Status != http.StatusOK || res.Header.Get("Access-Control-Allow-Origin") != "*" || string(res.Body) != `{"status":"ok"}` {
				t.Errorf("GET /healthz from %s: %d %v %s; want 200, Access-Control-Allow-Origin: *, status ok", origin, res.Status, res.Header, res.Body)
			}
		}
	})

	t.Run("UnknownPublishableKey", func(t *testing.T) {
		t.Parallel()
		res := api.send(t, api.submission(testkit.NewKey(), validBody, func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer pk_a_notakeyatall0000000")
			r.Header.Set("Origin", shopOrigin)
		}))
		res.requireError(t, http.StatusUnauthorized, response.CodeUnauthorized)
		requireCORS(t, res)
	})

	t.Run("BearerTokensAreNotAffected", func(t *testing.T) {
		t.Parallel()
		key := testkit.NewKey()
		res := api.send(t, api.submission(key, validBody, withHeader("Origin", shopOrigin)))
		res.requireAccepted(t, key, false)
		requireNoCORS(t, res)
	})

	t.Run("FinalResponsesAreProjected", func(t *testing.T) {
		t.Parallel()
		completed, failed := testkit.NewKey(), testkit.NewKey()
		for _, k := range []string{completed, failed} {
			api.send(t, api.submission(k, validBody, fromPage(shopOrigin))).requireAccepted(t, k, false)
		}
		finishKey(t, api, completed, finish{
			Body: `{"status":"completed","lead_id":"L1","crm_id":"crm_1","score":85,"tier":"hot","notified":true,"warnings":[]}`,
		})
		finishKey(t, api, failed, finish{
			State: "failed", Status: http.StatusUnprocessableEntity, FailureCode: response.CodeCRMRejected,
			Body: `{"status":"failed","lead_id":"L2","error":{"code":"crm_rejected","message":"refused"}}`,
		})
		for _, tt := range []struct {
			key, want string
			status    int
		}{
			{completed, `{"status":"completed","lead_id":"L1"}`, http.StatusCreated},
			{failed, `{"status":"failed","lead_id":"L2","error":{"code":"crm_rejected","message":"refused"}}`, http.StatusUnprocessableEntity},
		} {
			res := api.send(t, api.submission(tt.key, validBody, fromPage(shopOrigin)))
			if res.Status != tt.status || string(res.Body) != tt.want {
				t.Errorf("replay to a page: %d %s, want %d %s", res.Status, res.Body, tt.status, tt.want)
			}
			op := api.send(t, edited(api.operation(tokenA, tt.key), fromPage(shopOrigin)))
			var body operationBody
			if err := json.Unmarshal(op.Body, &body); err != nil || body.Response == nil || string(body.Response.Body) != tt.want {
				t.Errorf("operation to a page: %s, want the response %s", op.Body, tt.want)
			}
			// The stored response itself is unchanged.
			if full := api.send(t, api.submission(tt.key, validBody)); strings.Contains(tt.want, "completed") && !strings.Contains(string(full.Body), "crm_id") {
				t.Errorf("replay to the bearer client: %s", full.Body)
			}
		}
	})
}

// A page reaches only the keys submitted through a publishable key of its
// client: any other key of the client (a server's, a signed webhook's) is
// unknown to it, whatever it asks, and it learns nothing of its state.
func TestPublishableKeysReachOnlyPageKeys(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, nil)
	secret, err := webhook.ParseSecret(webhookSecretA)
	if err != nil {
		t.Fatal(err)
	}
	server, webhookKey, page := testkit.NewKey(), "msg_"+testkit.NewKey(), testkit.NewKey()
	api.send(t, api.submission(server, validBody)).requireAccepted(t, server, false)
	api.send(t, api.signed("a", webhookKey, validBody, time.Now(), secret)).requireAccepted(t, webhookKey, false)
	api.send(t, api.submission(page, validBody, fromPage(shopOrigin))).requireAccepted(t, page, false)
	finished := testkit.NewKey()
	api.send(t, api.submission(finished, validBody)).requireAccepted(t, finished, false)
	finishKey(t, api, finished, finish{Body: `{"status":"completed","lead_id":"L1","crm_id":"crm_1","score":85,"tier":"hot","notified":true,"warnings":[]}`})

	for _, key := range []string{server, webhookKey, finished} {
		api.send(t, edited(api.operation(tokenA, key), fromPage(shopOrigin))).requireError(t, http.StatusNotFound, response.CodeNotFound)
		api.send(t, edited(withPrefer(api.operation(tokenA, key), "wait=1"), fromPage(shopOrigin))).requireError(t, http.StatusNotFound, response.CodeNotFound)
		// The same body under that key: not a replay, not in progress.
		api.send(t, api.submission(key, validBody, fromPage(shopOrigin))).requireError(t, http.StatusUnprocessableEntity, response.CodeKeyReused)
		amendment := testkit.NewKey()
		api.send(t, api.submission(amendment, otherBody, fromPage(shopOrigin), withHeader("Supersedes", key))).
			requireError(t, http.StatusUnprocessableEntity, response.CodeSupersedesUnknown)
		if keyStored(t, api.Pool, "a", amendment) {
			t.Errorf("an amendment of %s by a page stored its key", key)
		}
		// The client's server still reaches it.
		if op := api.send(t, api.operation(tokenA, key)); op.Status != http.StatusOK {
			t.Errorf("the server's GET of its own key: %d", op.Status)
		}
	}

	// The page's own key is the page's, and the server's too.
	if op := api.send(t, edited(api.operation(tokenA, page), fromPage(shopOrigin))); op.Status != http.StatusOK {
		t.Errorf("the page's GET of its own key: %d %s", op.Status, op.Body)
	}
	api.send(t, api.submission(page, validBody, fromPage(shopOrigin))).requireAccepted(t, page, true)
	if op := api.send(t, api.operation(tokenA, page)); op.Status != http.StatusOK {
		t.Errorf("the server's GET of the page's key: %d", op.Status)
	}
	amendment := testkit.NewKey()
	api.send(t, api.submission(amendment, otherBody, fromPage(shopOrigin), withHeader("Supersedes", page))).requireAccepted(t, amendment, false)
	if op := api.send(t, edited(api.operation(tokenA, amendment), fromPage(shopOrigin))); op.Status != http.StatusOK {
		t.Errorf("the page's GET of its amendment: %d", op.Status)
	}
}

// Nor does a page learn a key's name that it may not see: in its
// operations, supersedes and superseded_by name only keys submitted with a
// publishable key of its client, and are null otherwise. The client's
// server sees the whole chain.
func TestPublishableKeysLearnNoOtherKeyNames(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, nil)
	page := fromPage(shopOrigin)
	pageOperation := func(t *testing.T, key string) (operationBody, string) {
		t.Helper()
		res := api.send(t, edited(api.operation(tokenA, key), page))
		var op operationBody
		if res.Status != http.StatusOK || decodeStrict(res.Body, &op) != nil {
			t.Fatalf("the page's GET of %s: %d %s", key, res.Status, res.Body)
		}
		return op, string(res.Body)
	}

	// A page's amendment of its own key: both are the page's to see.
	first, amendment := testkit.NewKey(), testkit.NewKey()
	api.send(t, api.submission(first, validBody, page)).requireAccepted(t, first, false)
	api.send(t, api.submission(amendment, otherBody, page, withHeader("Supersedes", first))).requireAccepted(t, amendment, false)
	if op, _ := pageOperation(t, first); deref(op.SupersededBy) != amendment {
		t.Errorf("the page's key superseded by the page's amendment: superseded_by %v, want %s", op.SupersededBy, amendment)
	}
	if op, _ := pageOperation(t, amendment); deref(op.Supersedes) != first {
		t.Errorf("the page's amendment: supersedes %v, want %s", op.Supersedes, first)
	}

	// The client's server amends a page's key under a key of its own: the
	// page sees its key superseded, by no key it is told.
	pageKey, serverKey := testkit.NewKey(), testkit.NewKey()
	api.send(t, api.submission(pageKey, validBody, page)).requireAccepted(t, pageKey, false)
	api.send(t, api.submission(serverKey, otherBody, withHeader("Supersedes", pageKey))).requireAccepted(t, serverKey, false)
	if op, body := pageOperation(t, pageKey); op.SupersededBy != nil || strings.Contains(body, serverKey) {
		t.Errorf("the page's GET of its key superseded by the server's: %s; want superseded_by null, no server key named", body)
	}
	if op := getOperation(t, api, pageKey); deref(op.SupersededBy) != serverKey {
		t.Errorf("the server's GET of the page's key: superseded_by %v, want %s", op.SupersededBy, serverKey)
	}
	if op := getOperation(t, api, serverKey); deref(op.Supersedes) != pageKey {
		t.Errorf("the server's GET of its amendment: supersedes %v, want %s", op.Supersedes, pageKey)
	}
}

// edited applies edits to req.
func edited(req *http.Request, edits ...func(*http.Request)) *http.Request {
	for _, e := range edits {
		e(req)
	}
	return req
}

func TestPublicRateLimit(t *testing.T) {
	t.Parallel()

	t.Run("LimitsNewSubmissionsOnly", func(t *testing.T) {
		t.Parallel()
		api := newTestAPI(t, &testAPIOpts{PublicRateLimit: intake.RateLimit{N: 2, Per: time.Hour}})
		keys := []string{testkit.NewKey(), testkit.NewKey()}
		for _, k := range keys {
			api.send(t, api.submission(k, validBody, fromPage(shopOrigin))).requireAccepted(t, k, false)
		}
		limited := testkit.NewKey()
		res := api.send(t, api.submission(limited, validBody, fromPage(shopOrigin)))
		res.requireError(t, http.StatusTooManyRequests, response.CodeRateLimited)
		requireCORS(t, res)
		if ra := res.Header.Get("Retry-After"); ra == "" || ra == "0" {
			t.Errorf("429 with Retry-After %q", ra)
		}
		if keyStored(t, api.Pool, "a", limited) {
			t.Fatal("the limited submission stored its key")
		}
		// Replays, polls, refusals and bearer clients are not counted.
		api.send(t, api.submission(keys[0], validBody, fromPage(shopOrigin))).requireAccepted(t, keys[0], true)
		if op := api.send(t, edited(api.operation(tokenA, keys[1]), fromPage(shopOrigin))); op.Status != http.StatusOK {
			t.Errorf("poll while limited: %d", op.Status)
		}
		api.send(t, api.submission(testkit.NewKey(), "{", fromPage(shopOrigin))).requireError(t, http.StatusBadRequest, response.CodeInvalidJSON)
		bearer := testkit.NewKey()
		api.send(t, api.submission(bearer, validBody)).requireAccepted(t, bearer, false)
	})

	t.Run("ForwardedForCountsOnlyBehindTrustedProxies", func(t *testing.T) {
		t.Parallel()
		forwarded := func(addr string) func(*http.Request) {
			return func(r *http.Request) { r.Header.Set("X-Forwarded-For", "198.51.100.7, "+addr) }
		}
		direct := newTestAPI(t, &testAPIOpts{PublicRateLimit: intake.RateLimit{N: 1, Per: time.Hour}})
		k1, k2 := testkit.NewKey(), testkit.NewKey()
		direct.send(t, direct.submission(k1, validBody, fromPage(shopOrigin), forwarded("203.0.113.1"))).requireAccepted(t, k1, false)
		// A forged header from an untrusted peer changes nothing.
		direct.send(t, direct.submission(k2, validBody, fromPage(shopOrigin), forwarded("203.0.113.2"))).
			requireError(t, http.StatusTooManyRequests, response.CodeRateLimited)

		proxied := newTestAPI(t, &testAPIOpts{
			PublicRateLimit: intake.RateLimit{N: 1, Per: time.Hour},
			TrustedProxies:  []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
		})
		for _, addr := range []string{"203.0.113.1", "203.0.113.2"} {
			k := testkit.NewKey()
			proxied.send(t, proxied.submission(k, validBody, fromPage(shopOrigin), forwarded(addr))).requireAccepted(t, k, false)
		}
		k := testkit.NewKey()
		proxied.send(t, proxied.submission(k, validBody, fromPage(shopOrigin), forwarded("203.0.113.1"))).
			requireError(t, http.StatusTooManyRequests, response.CodeRateLimited)
	})

	t.Run("ForwardedForHopsWithPortsAndZones", func(t *testing.T) {
		t.Parallel()
		// Proxies write a hop as ip:port, [ipv6]:port or with an IPv6 zone;
		// each is its address, and a trusted proxy with a zone is still
		// trusted. Otherwise every visitor would count as the proxy.
		proxied := newTestAPI(t, &testAPIOpts{
			PublicRateLimit: intake.RateLimit{N: 1, Per: time.Hour},
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"),
				netip.MustParsePrefix("fe80::/10")},
		})
		submit := func(xff string) *reply {
			return proxied.send(t, proxied.submission(testkit.NewKey(), validBody, fromPage(shopOrigin), withHeader("X-Forwarded-For", xff)))
		}
		for _, tt := range []struct{ first, again, other string }{
			{"203.0.113.1:4711", "203.0.113.1:4712", "203.0.113.2:4711"},
			{"[2001:db8:1::1]:443", "2001:db8:1::1", "[2001:db8:2::1]:443"},
			{"203.0.113.3, fe80::1%eth0", "203.0.113.3, [fe80::2%25eth1]:80", "203.0.113.4, fe80::1%eth0"},
			// An IPv6 visitor is its /64.
			{"2001:db8:5::1", "[2001:db8:5::ffff]:80", "2001:db8:6::1"},
		} {
			if res := submit(tt.first); res.Status != http.StatusAccepted {
				t.Errorf("X-Forwarded-For %q: %d %s, want 202", tt.first, res.Status, res.Body)
			}
			if res := submit(tt.other); res.Status != http.StatusAccepted {
				t.Errorf("X-Forwarded-For %q after %q: %d %s, want 202 (another visitor)", tt.other, tt.first, res.Status, res.Body)
			}
			submit(tt.again).requireError(t, http.StatusTooManyRequests, response.CodeRateLimited)
		}
	})
}

func TestParseRateLimit(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]intake.RateLimit{"20/m": {N: 20, Per: time.Minute}, "5/s": {N: 5, Per: time.Second}, "100/h": {N: 100, Per: time.Hour}} {
		if got, err := intake.ParseRateLimit(in); err != nil || got != want {
			t.Errorf("%q: %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "20", "0/m", "-1/s", "20/d", "x/m"} {
		if _, err := intake.ParseRateLimit(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
