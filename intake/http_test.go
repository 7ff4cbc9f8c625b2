package intake_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/response"
)

func TestHTTP(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		api *testAPI
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{api: newTestAPI(t, nil)}
	}

	t.Run("ShapesEchosOwnErrors", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		for _, tt := range []struct {
			method, path string
			status       int
			code         response.Code
		}{
			{http.MethodGet, "/nowhere", http.StatusNotFound, response.CodeNotFound},
			{http.MethodPost, "/v1/lead", http.StatusNotFound, response.CodeNotFound},
			{http.MethodGet, "/v1/leads", http.StatusMethodNotAllowed, response.CodeMethodNotAllowed},
			{http.MethodPut, "/v1/leads", http.StatusMethodNotAllowed, response.CodeMethodNotAllowed},
			{http.MethodDelete, "/v1/operations/abc-key-123", http.StatusMethodNotAllowed, response.CodeMethodNotAllowed},
			{http.MethodPost, "/healthz", http.StatusMethodNotAllowed, response.CodeMethodNotAllowed},
		} {
			res := bundle.api.send(t, newRequest(t, bundle.api, tt.method, tt.path))
			if _, err := res.error(tt.status, tt.code); err != nil {
				t.Errorf("%s %s: %v", tt.method, tt.path, err)
			}
		}
	})

	t.Run("EchoesCallersRequestID", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		const id = "caller-chosen-id-42"
		for _, req := range []*http.Request{
			bundle.api.submission(testkit.NewKey(), validBody),                                    // 202
			bundle.api.submission(testkit.NewKey(), validBody, withoutHeader("Authorization")),    // 401
			bundle.api.submission(testkit.NewKey(), "[]"),                                         // 400
			bundle.api.operation(tokenA, "no-such-key"),                                           // 404
			newRequest(t, bundle.api, http.MethodGet, "/nowhere"),                                 // Echo's 404
			newRequest(t, bundle.api, http.MethodGet, "/healthz"),                                 // 200
			bundle.api.submission(testkit.NewKey(), validBody, withHeader("Content-Type", "x/y")), // 415
		} {
			req.Header.Set("X-Request-Id", id)
			res := bundle.api.send(t, req)
			if got := res.Header.Get("X-Request-Id"); got != id {
				t.Errorf("%s %s (%d): X-Request-Id %q, want the caller's %q", req.Method, req.URL.Path, res.Status, got, id)
			}
		}
	})

	// A caller's id is logged on every line of its request: one that could
	// carry personal data or flood the logs is replaced.
	t.Run("ReplacesUnfitRequestID", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		for _, id := range []string{
			"ada@example.com",
			"has space",
			strings.Repeat("x", 129),
			"é-accent",
		} {
			req := newRequest(t, bundle.api, http.MethodGet, "/healthz")
			req.Header.Set("X-Request-Id", id)
			got := bundle.api.send(t, req).Header.Get("X-Request-Id")
			if got == "" || got == id {
				t.Errorf("caller's X-Request-Id %q: answered %q, want a fresh one", id, got)
			}
		}
		req := newRequest(t, bundle.api, http.MethodGet, "/healthz")
		long := strings.Repeat("7", 128)
		req.Header.Set("X-Request-Id", long)
		if got := bundle.api.send(t, req).Header.Get("X-Request-Id"); got != long {
			t.Errorf("a 128-character id was replaced by %q", got)
		}
	})

	t.Run("GeneratesDistinctRequestIDs", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		seen := map[string]bool{}
		for range 5 {
			id := bundle.api.send(t, newRequest(t, bundle.api, http.MethodGet, "/healthz")).Header.Get("X-Request-Id")
			if seen[id] {
				t.Fatalf("X-Request-Id %q given twice", id)
			}
			seen[id] = true
		}
	})

	t.Run("GuardsOperations", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		req := bundle.api.operation(tokenA, "abc-key-123")
		req.Header.Del("Authorization")
		bundle.api.send(t, req).requireError(t, http.StatusUnauthorized, response.CodeUnauthorized)
		bundle.api.send(t, bundle.api.operation("wrong", "abc-key-123")).requireError(t, http.StatusUnauthorized, response.CodeUnauthorized)
		bundle.api.send(t, bundle.api.operation(tokenA, "abc-key-123")).requireError(t, http.StatusNotFound, response.CodeNotFound)
		bundle.api.send(t, bundle.api.operation(tokenA, "short")).requireError(t, http.StatusNotFound, response.CodeNotFound)
	})

	t.Run("ReportsHealthAndReadiness", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		for _, path := range []string{"/healthz", "/readyz"} {
			if res := bundle.api.send(t, newRequest(t, bundle.api, http.MethodGet, path)); res.Status != http.StatusOK {
				t.Errorf("GET %s: %d %s", path, res.Status, res.Body)
			}
		}
	})
}

// TestHTTPBoundsCallerChosenValues: nothing a caller sends becomes a metric
// series or a log field of its own choosing. A method outside the fixed set
// is answered 405 and recorded as OTHER.
func TestHTTPBoundsCallerChosenValues(t *testing.T) {
	t.Parallel()
	registry := prometheus.NewRegistry()
	api := newTestAPI(t, &testAPIOpts{Registry: registry})

	huge := "ZZ" + strings.Repeat("Q", 20_000)
	for _, method := range []string{"ZZZ1", "ZZZ2", "PROPFIND", huge} {
		for _, path := range []string{"/v1/leads", "/healthz", "/nowhere"} {
			res := api.send(t, newRequest(t, api, method, path))
			if _, err := res.error(http.StatusMethodNotAllowed, response.CodeMethodNotAllowed); err != nil {
				t.Errorf("%.10s %s: %v", method, path, err)
			}
		}
	}

	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true, "OPTIONS": true, "OTHER": true}
	others := 0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "method" {
					continue
				}
				if !allowed[l.GetValue()] {
					t.Errorf("%s has method label %.40q", f.GetName(), l.GetValue())
				}
				if l.GetValue() == "OTHER" {
					others += int(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	if others != 12 {
		t.Errorf("%d requests recorded with method OTHER, want 12", others)
	}
	logs := api.Logs.String()
	for _, m := range []string{"ZZZ1", "PROPFIND", "QQQQQQQQ"} {
		if strings.Contains(logs, m) {
			t.Errorf("the log holds the caller's method %q", m)
		}
	}
}

// TestHTTPDecodesPathParameters: a key percent-encoded in the path names the
// same key as its plain form.
func TestHTTPDecodesPathParameters(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, nil)
	const key = "demo-key:0001"
	api.send(t, api.submission(key, validBody)).requireAccepted(t, key, false)
	for _, path := range []string{"demo-key:0001", "demo%2Dkey%3A0001", "demo-key%3A0001", "%64emo-key%3a0001"} {
		res := api.send(t, api.operation(tokenA, path))
		var op operationBody
		if res.Status != http.StatusOK || json.Unmarshal(res.Body, &op) != nil || op.IdempotencyKey != key {
			t.Errorf("GET /v1/operations/%s: %d %s, want the operation of %q", path, res.Status, res.Body, key)
		}
	}
	// Encoded characters a key may not hold are still refused.
	for _, path := range []string{"demo%20key%200001", "demo-key%2F0001", "demo-key%250001"} {
		api.send(t, api.operation(tokenA, path)).requireError(t, http.StatusNotFound, response.CodeNotFound)
	}
}
