package intake_test

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/faultproxy"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
)

// TestStoreOutage cuts the database off in the middle of a run, both ways a
// network fails: connections closed at once (Cut) and a database that stops
// answering (Blackhole). The API must answer 503 store_unavailable, within a
// bound, never 500, and recover once the database is back, with the same
// handler and pool.
func TestStoreOutage(t *testing.T) {
	t.Parallel()

	// requestTimeout is short so that a hung database is found out fast;
	// outside the outage the test retries 503s, as a client would, so a
	// slow machine cannot fail it.
	const requestTimeout = 500 * time.Millisecond

	type testBundle struct {
		api   *testAPI
		proxy *faultproxy.Proxy
		key   string // submitted with validBody before the outage
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		dbURL, pool := dbtest.New(t)
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		proxy, err := faultproxy.New(u.Host)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = proxy.Addr()
		proxied, err := pgxpool.New(context.Background(), u.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			proxied.Close()
			if err := proxy.Close(); err != nil {
				t.Errorf("close proxy: %v", err)
			}
		})
		api := newTestAPIOn(t, pool, &testAPIOpts{Pool: proxied, RequestTimeout: requestTimeout})
		key := testkit.NewKey()
		submitUntilAccepted(t, api, key)
		return &testBundle{api: api, proxy: proxy, key: key}
	}

	for _, fault := range []struct {
		name  string
		start func(*faultproxy.Proxy)
	}{
		{"Cut", (*faultproxy.Proxy).Cut},
		{"Blackhole", (*faultproxy.Proxy).Blackhole},
	} {
		t.Run("AnswersUnavailableWhile"+fault.name+"AndRecovers", func(t *testing.T) {
			t.Parallel()
			bundle := setup(t)
			api := bundle.api

			// Requests in flight when the fault strikes: each must still
			// be answered, by anything but a 500.
			stop := make(chan struct{})
			answered := make(chan struct{}, 100)
			var load sync.WaitGroup
			for i := range 4 {
				load.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						req := api.submission(bundle.key, validBody) // a replay
						if i%2 == 1 {
							req = api.operation(tokenA, bundle.key)
						}
						res, err := api.trySend(req)
						if err != nil {
							t.Errorf("in flight as the database failed: %v", err)
							return
						}
						if res.Status >= 500 && res.Status != http.StatusServiceUnavailable {
							t.Errorf("in flight as the database failed: %s %s: %d %s", req.Method, req.URL.Path, res.Status, res.Body)
							return
						}
						select {
						case answered <- struct{}{}:
						default:
						}
					}
				})
			}
			for range cap(answered) {
				<-answered // the load is under way
			}
			fault.start(bundle.proxy)

			outageKey := testkit.NewKey()
			for _, req := range []*http.Request{
				api.submission(outageKey, validBody),
				api.submission(bundle.key, validBody),
				api.operation(tokenA, bundle.key),
				newRequest(t, api, http.MethodGet, "/readyz"),
			} {
				res := api.send(t, req)
				if _, err := res.error(http.StatusServiceUnavailable, response.CodeStoreUnavailable); err != nil {
					t.Errorf("%s %s during the outage: %v", req.Method, req.URL.Path, err)
				} else if res.Header.Get("Retry-After") == "" {
					t.Errorf("%s %s: 503 without Retry-After", req.Method, req.URL.Path)
				}
			}
			if res := api.send(t, newRequest(t, api, http.MethodGet, "/healthz")); res.Status != http.StatusOK {
				t.Errorf("GET /healthz during the outage: %d %s", res.Status, res.Body)
			}
			close(stop)
			load.Wait()

			bundle.proxy.Restore()
			submitUntilAccepted(t, api, testkit.NewKey())
			submitUntilAccepted(t, api, outageKey)
			if op := getOperation(t, api, bundle.key); op.State != string(lead.KeyProcessing) {
				t.Fatalf("operation after the outage: %+v", op)
			}
			// /readyz shares one check a second among its probes: the
			// outage's may still be the latest for up to a second.
			testkit.EventuallyWithin(t, 5*time.Second, "GET /readyz 200 after the outage", func() bool {
				return api.send(t, newRequest(t, api, http.MethodGet, "/readyz")).Status == http.StatusOK
			})
		})
	}
}

// submitUntilAccepted submits validBody under key until it is accepted,
// retrying 503s with the same key as the contract tells clients to.
func submitUntilAccepted(t *testing.T, api *testAPI, key string) processing {
	t.Helper()
	deadline := time.Now().Add(testkit.Patience)
	for {
		res := api.send(t, api.submission(key, validBody))
		if res.Status != http.StatusServiceUnavailable {
			body, err := res.accepted(key, res.Header.Get("Idempotent-Replayed") == "true")
			if err != nil {
				t.Fatal(err)
			}
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("still 503 after %s: %s", testkit.Patience, res.Body)
		}
		time.Sleep(50 * time.Millisecond) // a client's back-off, not synchronisation
	}
}

// TestStoreNotReady: a database the api cannot use for a reason other than
// the network (no migrations yet, a database that does not exist, a role the
// server refuses) makes /readyz 503 and every submission 503
// store_unavailable, never 500.
func TestStoreNotReady(t *testing.T) {
	t.Parallel()
	withURL := func(t *testing.T, dbURL string, edit func(*url.URL)) *pgxpool.Pool {
		t.Helper()
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		edit(u)
		pool, err := pgxpool.New(context.Background(), u.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	unmigrated := dbtest.Empty(t)
	for _, tt := range []struct {
		name string
		pool func(t *testing.T) *pgxpool.Pool
	}{
		{"BeforeMigrations", func(t *testing.T) *pgxpool.Pool { return withURL(t, unmigrated, func(*url.URL) {}) }},
		{"MissingDatabase", func(t *testing.T) *pgxpool.Pool {
			return withURL(t, unmigrated, func(u *url.URL) { u.Path = "/leadintake_no_such_database" })
		}},
		{"RefusedRole", func(t *testing.T) *pgxpool.Pool {
			return withURL(t, unmigrated, func(u *url.URL) { u.User = url.UserPassword("leadintake_no_such_role", "wrong") })
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, direct := dbtest.New(t)
			api := newTestAPIOn(t, direct, &testAPIOpts{Pool: tt.pool(t)})
			for _, req := range []*http.Request{
				newRequest(t, api, http.MethodGet, "/readyz"),
				api.submission(testkit.NewKey(), validBody),
				api.operation(tokenA, "some-key-0001"),
			} {
				res := api.send(t, req)
				if _, err := res.error(http.StatusServiceUnavailable, response.CodeStoreUnavailable); err != nil {
					t.Errorf("%s %s: %v", req.Method, req.URL.Path, err)
				}
			}
		})
	}
}
