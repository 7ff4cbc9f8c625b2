package admin_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leadintake/leadintake/internal/admin"
	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/scratchdb"
	"github.com/leadintake/leadintake/store"
)

// The worker's admin listener answers /healthz while it runs and /readyz
// as its store's readiness says, without credentials (a probe sends none),
// while /metrics keeps asking for them.
func TestProbes(t *testing.T) {
	t.Parallel()
	serve := func(t *testing.T, pool *pgxpool.Pool) string {
		t.Helper()
		h, err := admin.NewHandler(t.Context(), &admin.Opts{
			Gatherer: prometheus.NewRegistry(), User: "operator", Password: "secret-pw", Ready: store.New(pool).Ready,
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
	get := func(t *testing.T, url string) int {
		t.Helper()
		res, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}

	t.Run("ReadyOnAMigratedDatabase", func(t *testing.T) {
		t.Parallel()
		_, pool := dbtest.New(t)
		base := serve(t, pool)
		for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 401} {
			if got := get(t, base+path); got != want {
				t.Errorf("GET %s: %d, want %d", path, got, want)
			}
		}
	})

	t.Run("NotReadyWithoutItsDatabase", func(t *testing.T) {
		t.Parallel()
		url, err := scratchdb.WithDatabase(scratchdb.ServerURL(os.Getenv), "leadintake_no_such_database", nil)
		if err != nil {
			t.Fatal(err)
		}
		pool, err := pgxpool.New(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		base := serve(t, pool)
		if got := get(t, base+"/healthz"); got != 200 {
			t.Errorf("GET /healthz: %d, want 200 while the process runs", got)
		}
		if got := get(t, base+"/readyz"); got != 503 {
			t.Errorf("GET /readyz: %d, want 503 without its database", got)
		}
	})
}
