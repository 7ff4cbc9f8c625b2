package intake_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/intake"
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
			code         string
		}{
			{http.MethodGet, "/nowhere", http.StatusNotFound, intake.CodeNotFound},
			{http.MethodPost, "/v1/lead", http.StatusNotFound, intake.CodeNotFound},
			{http.MethodGet, "/v1/leads", http.StatusMethodNotAllowed, intake.CodeMethodNotAllowed},
			{http.MethodPut, "/v1/leads", http.StatusMethodNotAllowed, intake.CodeMethodNotAllowed},
			{http.MethodDelete, "/v1/operations/abc-key-123", http.StatusMethodNotAllowed, intake.CodeMethodNotAllowed},
			{http.MethodPost, "/healthz", http.StatusMethodNotAllowed, intake.CodeMethodNotAllowed},
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
			bundle.api.submission(newKey(), validBody),                                    // 202
			bundle.api.submission(newKey(), validBody, withoutHeader("Authorization")),    // 401
			bundle.api.submission(newKey(), "[]"),                                         // 400
			bundle.api.operation(tokenA, "no-such-key"),                                   // 404
			newRequest(t, bundle.api, http.MethodGet, "/nowhere"),                         // Echo's 404
			newRequest(t, bundle.api, http.MethodGet, "/healthz"),                         // 200
			bundle.api.submission(newKey(), validBody, withHeader("Content-Type", "x/y")), // 415
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
		bundle.api.send(t, req).requireError(t, http.StatusUnauthorized, intake.CodeUnauthorized)
		bundle.api.send(t, bundle.api.operation("wrong", "abc-key-123")).requireError(t, http.StatusUnauthorized, intake.CodeUnauthorized)
		bundle.api.send(t, bundle.api.operation(tokenA, "abc-key-123")).requireError(t, http.StatusNotFound, intake.CodeNotFound)
		bundle.api.send(t, bundle.api.operation(tokenA, "short")).requireError(t, http.StatusNotFound, intake.CodeNotFound)
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
