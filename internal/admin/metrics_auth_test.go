package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/leadintake/leadintake/internal/admin"
	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/testkit"
)

// The scrape credential (METRICS_USER, METRICS_PASSWORD) opens /metrics
// and nothing else: not River UI, not erasures, not redrives, which the
// admin credential opens (and /metrics too). Set alone, it guards /metrics.
func TestScrapeCredential(t *testing.T) {
	t.Parallel()
	_, pool := dbtest.New(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e := &erasures{}
	r := &redrives{}
	serve := func(o *admin.Opts) http.Handler {
		o.Gatherer, o.Logger = prometheus.NewRegistry(), slogJSON(&testkit.LockedBuffer{})
		h, err := admin.NewHandler(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	// Each request from an address of its own: wrong credentials are
	// slowed per address, which is TestWrongCredentialsAreSlowedPerAddress's.
	addr := 0
	send := func(h http.Handler, method, path, body, user, password string) int {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		addr++
		req.RemoteAddr = fmt.Sprintf("192.0.2.%d:1234", addr)
		req.Header.Set("Content-Type", "application/json")
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	type request struct{ method, path, body string }
	metrics := request{http.MethodGet, "/metrics", ""}
	adminOnly := []request{
		{http.MethodGet, "/riverui/", ""},
		{http.MethodGet, "/riverui/api/jobs?state=available", ""},
		{http.MethodPost, "/admin/erasures", `{"client_id":"known","email":"ada@example.com"}`},
		{http.MethodPost, "/admin/redrives", `{"client_id":"known","keys":["key-0001"]}`},
	}

	t.Run("Both", func(t *testing.T) {
		h := serve(&admin.Opts{
			User: "operator", Password: "secret-pw", MetricsUser: "prometheus", MetricsPassword: "scrape-pw",
			RiverClient: client, Erase: e.erase, Redrive: r.redrive,
		})
		if got := send(h, metrics.method, metrics.path, "", "prometheus", "scrape-pw"); got != http.StatusOK {
			t.Errorf("GET /metrics with the scrape credential: %d, want 200", got)
		}
		if got := send(h, metrics.method, metrics.path, "", "operator", "secret-pw"); got != http.StatusOK {
			t.Errorf("GET /metrics with the admin credential: %d, want 200", got)
		}
		for _, req := range adminOnly {
			if got := send(h, req.method, req.path, req.body, "prometheus", "scrape-pw"); got != http.StatusUnauthorized {
				t.Errorf("%s %s with the scrape credential: %d, want 401", req.method, req.path, got)
			}
			if got := send(h, req.method, req.path, req.body, "operator", "secret-pw"); got != http.StatusOK {
				t.Errorf("%s %s with the admin credential: %d, want 200", req.method, req.path, got)
			}
		}
		// Neither half of one credential with the other's.
		for _, pair := range [][2]string{{"prometheus", "secret-pw"}, {"operator", "scrape-pw"}} {
			if got := send(h, metrics.method, metrics.path, "", pair[0], pair[1]); got != http.StatusUnauthorized {
				t.Errorf("GET /metrics as %s with the other's password: %d, want 401", pair[0], got)
			}
		}
		if len(e.asked) != 1 || len(r.asked) != 1 {
			t.Errorf("%d erasures and %d redrives made, want the admin's one each", len(e.asked), len(r.asked))
		}
	})

	t.Run("ScrapeCredentialAlone", func(t *testing.T) {
		h := serve(&admin.Opts{MetricsUser: "prometheus", MetricsPassword: "scrape-pw", RiverClient: client})
		if got := send(h, metrics.method, metrics.path, "", "", ""); got != http.StatusUnauthorized {
			t.Errorf("GET /metrics without credentials: %d, want 401", got)
		}
		if got := send(h, metrics.method, metrics.path, "", "prometheus", "scrape-pw"); got != http.StatusOK {
			t.Errorf("GET /metrics with the scrape credential: %d, want 200", got)
		}
		if got := send(h, http.MethodGet, "/riverui/", "", "prometheus", "scrape-pw"); got != http.StatusNotFound {
			t.Errorf("GET /riverui/ without an admin credential set: %d, want 404 (not served)", got)
		}
	})
}
