package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leadintake/leadintake/internal/admin"
	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/probe"
	"github.com/leadintake/leadintake/internal/scratchdb"
	"github.com/leadintake/leadintake/store"
)

// probeEvery is how often the readiness check runs at most.
const probeEvery = probe.Every

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

// roundTrips counts a pool's connection acquisitions and statements: each
// readiness check acquires a connection and pings the database on it (a
// ping is no traced statement).
type roundTrips struct{ acquires, queries atomic.Int64 }

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}
func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *roundTrips) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	c.acquires.Add(1)
	return ctx
}
func (c *roundTrips) TraceAcquireEnd(context.Context, *pgxpool.Pool, pgxpool.TraceAcquireEndData) {}

// A hundred probes of /readyz at once cost the database one check (a
// connection acquired, one ping), or two should a second pass meanwhile.
func TestReadyzSharesOneCheck(t *testing.T) {
	t.Parallel()
	dbURL, _ := dbtest.New(t)
	trips := &roundTrips{}
	pool := dbtest.Traced(t, dbURL, trips)
	h, err := admin.NewHandler(t.Context(), &admin.Opts{
		Gatherer: prometheus.NewRegistry(), Ready: store.New(pool).Ready,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = admin.NewServer(h, nil)
	srv.Start()
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	t.Cleanup(client.CloseIdleConnections)
	probe := func() int {
		res, err := client.Get(srv.URL + "/readyz")
		if err != nil {
			t.Error(err)
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	// The first check also finds the migrations; later ones only ping.
	if got := probe(); got != http.StatusOK {
		t.Fatalf("GET /readyz: %d", got)
	}
	time.Sleep(probeEvery + 100*time.Millisecond)
	acquires, queries := trips.acquires.Load(), trips.queries.Load()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 100 {
		wg.Go(func() {
			<-start
			if got := probe(); got != http.StatusOK {
				t.Errorf("GET /readyz: %d", got)
			}
		})
	}
	close(start)
	wg.Wait()
	if n := trips.acquires.Load() - acquires; n < 1 || n > 2 {
		t.Errorf("100 probes at once acquired %d connections, want 1 (2 if a second passed meanwhile)", n)
	}
	if n := trips.queries.Load() - queries; n != 0 {
		t.Errorf("100 probes at once ran %d statements beyond the ping, want none", n)
	}
}
