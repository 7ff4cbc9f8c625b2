package jobs_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/jobs"
)

// owe writes a callback delivery owed to client, as a finishing
// transaction does, and enqueues its job.
func (b *testBundle) owe(t *testing.T, client string) uuid.UUID {
	t.Helper()
	id := uuid.New()
	b.exec(t, `INSERT INTO callbacks (id, client_id, lead_id, payload) VALUES ($1, $2, gen_random_uuid(), '{"type":"lead.completed"}')`, id, client)
	b.insertJob(t, jobs.DeliverCallbackArgs{CallbackID: id})
	return id
}

// callbackEnded reports whether the delivery was delivered, or given up,
// and after how many attempts.
func (b *testBundle) callbackEnded(t *testing.T, id uuid.UUID) (delivered, givenUp bool, attempts int) {
	t.Helper()
	if err := b.pool.QueryRow(context.Background(),
		`SELECT delivered_at IS NOT NULL, given_up_at IS NOT NULL, attempts FROM callbacks WHERE id = $1`, id).
		Scan(&delivered, &givenUp, &attempts); err != nil {
		t.Fatal(err)
	}
	return delivered, givenUp, attempts
}

// useCallbacks puts in force a clients file of the clients and their
// callback URLs.
func (b *testBundle) useCallbacks(t *testing.T, urls map[string]string) {
	t.Helper()
	var file strings.Builder
	file.WriteString("clients:\n")
	for id, url := range urls {
		file.WriteString("  - id: " + id + "\n    callback:\n      url: \"" + url + "\"\n      secret: " + callbackSecret + "\n")
	}
	set, err := callers.ParseFile([]byte(file.String()))
	if err != nil {
		t.Fatal(err)
	}
	b.callers.Replace(set)
}

// One client's hanging receiver holds at most its own share of the
// callback workers: another client's deliveries go out meanwhile.
func TestCallbackReceiversDoNotHoldEachOtherBack(t *testing.T) {
	t.Parallel()
	var hanging atomic.Int64
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hanging.Add(1)
		defer hanging.Add(-1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) }) // before slow.Close, which waits for them
	// The slow receiver's deliveries hang far longer than the test waits.
	bundle := setup(t, &setupOpts{CallbackTimeout: 10 * testkit.Patience, CallbacksPerClient: 2})
	bundle.useCallbacks(t, map[string]string{"slow": slow.URL + "/hook", clientID: bundle.callbackURL(t)})

	for range 12 {
		bundle.owe(t, "slow")
	}
	testkit.Eventually(t, "the slow receiver's deliveries under way", func() bool { return hanging.Load() >= 2 })
	fast := bundle.owe(t, clientID)
	testkit.Eventually(t, "the other client's delivery, while the slow receiver hangs", func() bool {
		delivered, _, _ := bundle.callbackEnded(t, fast)
		return delivered
	})
	if n := hanging.Load(); n > 2 {
		t.Errorf("%d deliveries to one receiver at once, want at most its bound of 2", n)
	}
}

// A callback URL's user name, password and query string are the
// receiver's secrets: the user-info is sent as basic auth, the query as it
// is, and neither appears in a log line or a job's errors.
func TestCallbackURLSecretsStayOut(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		got.Store(user + " " + pass + " " + r.URL.RawQuery)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)
	// A port nothing listens on: every attempt fails, and its error is
	// logged and kept.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()

	bundle := setup(t, &setupOpts{CallbackMaxAge: 2 * time.Second})
	bundle.secrets.add("leaky-user", "leaky-pass", "leaky-query")
	host := strings.TrimPrefix(receiver.URL, "http://")
	bundle.useCallbacks(t, map[string]string{
		"alive": "http://leaky-user:leaky-pass@" + host + "/hook?token=leaky-query",
		"dead":  "http://leaky-user:leaky-pass@" + dead + "/hook?token=leaky-query",
	})
	alive, gone := bundle.owe(t, "alive"), bundle.owe(t, "dead")
	testkit.Eventually(t, "both deliveries ended", func() bool {
		a, _, _ := bundle.callbackEnded(t, alive)
		_, g, _ := bundle.callbackEnded(t, gone)
		return a && g
	})
	if v, _ := got.Load().(string); v != "leaky-user leaky-pass token=leaky-query" {
		t.Errorf("the receiver got basic auth and query %q, want the URL's", v)
	}
	var errs []string
	if err := bundle.pool.QueryRow(context.Background(),
		`SELECT coalesce(array_agg(e::text), '{}') FROM river_job, unnest(errors) e WHERE kind = 'deliver_callback'`).Scan(&errs); err != nil {
		t.Fatal(err)
	}
	if len(errs) == 0 {
		t.Fatal("no job error kept: the test saw nothing")
	}
	bundle.secrets.requireAbsent(t, strings.Join(errs, "\n"))
}

// A receiver that redirects has not taken the delivery, and will not by
// being asked again: a 3xx is given up at once, not retried for a day.
func TestCallbackRedirectIsGivenUp(t *testing.T) {
	t.Parallel()
	bundle := setup(t, nil)
	bundle.fake.Script(fake.Callback, fake.Fault{Status: http.StatusFound}, fake.Fault{Status: http.StatusFound})
	id := bundle.owe(t, clientID)
	testkit.Eventually(t, "the delivery ended", func() bool {
		d, g, _ := bundle.callbackEnded(t, id)
		return d || g
	})
	if delivered, givenUp, attempts := bundle.callbackEnded(t, id); !givenUp || delivered || attempts != 1 {
		t.Errorf("after a 302: delivered %v, given up %v, %d attempts; want given up after 1", delivered, givenUp, attempts)
	}
}
