package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/leadintake/leadintake/internal/admin"
	"github.com/leadintake/leadintake/internal/dbtest"
)

// newAdmin serves the api's admin listener, River UI included, over real
// HTTP with the server settings the binaries use.
func newAdmin(t *testing.T) string {
	t.Helper()
	_, pool := dbtest.New(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h, err := admin.NewHandler(ctx, &admin.Opts{
		Gatherer: prometheus.NewRegistry(), User: "operator", Password: "secret-pw", RiverClient: client,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = admin.NewServer(h, nil)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestAdminListener(t *testing.T) {
	t.Parallel()
	base := newAdmin(t)

	send := func(t *testing.T, method, path string, header map[string]string) int {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(`{"ids":["1"]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("operator", "secret-pw")
		req.Header.Set("Content-Type", "application/json")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}

	t.Run("RefusesCrossSiteWrites", func(t *testing.T) {
		t.Parallel()
		for _, h := range []map[string]string{
			{"Sec-Fetch-Site": "cross-site"},
			{"Sec-Fetch-Site": "same-site"},
			{"Origin": "http://evil.example"},
		} {
			for _, action := range []string{"cancel", "retry", "delete"} {
				if got := send(t, http.MethodPost, "/riverui/api/jobs/"+action, h); got != http.StatusForbidden {
					t.Errorf("POST /riverui/api/jobs/%s with %v: %d, want 403", action, h, got)
				}
			}
		}
	})

	t.Run("AcceptsSameOriginAndNonBrowserWrites", func(t *testing.T) {
		t.Parallel()
		for _, h := range []map[string]string{
			nil,
			{"Sec-Fetch-Site": "same-origin"},
			{"Origin": base},
		} {
			if got := send(t, http.MethodPost, "/riverui/api/jobs/cancel", h); got == http.StatusForbidden || got >= 500 {
				t.Errorf("POST /riverui/api/jobs/cancel with %v: %d", h, got)
			}
		}
		// Reads are never refused for their origin.
		if got := send(t, http.MethodGet, "/metrics", map[string]string{"Sec-Fetch-Site": "cross-site"}); got != http.StatusOK {
			t.Errorf("GET /metrics cross-site: %d, want 200", got)
		}
	})

	t.Run("LimitsHeaders", func(t *testing.T) {
		t.Parallel()
		if got := send(t, http.MethodGet, "/metrics", map[string]string{"X-Padding": strings.Repeat("p", 2<<20)}); got != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("2 MiB of headers: %d, want 431", got)
		}
	})
}
