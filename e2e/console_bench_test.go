package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// consoleBenchKeys is how many keys the measure of the leads page loads.
const consoleBenchKeys = 100_000

// loadKeys inserts n keys with their leads, by SQL: five clients, created
// over the last 30 days, most completed, a few failed, processing,
// quarantined or awaiting reconciliation; then ANALYZE.
func loadKeys(t *testing.T, s *stack, n int) {
	t.Helper()
	ctx := context.Background()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, sql := range []string{
		`CREATE TEMP TABLE gen AS
SELECT g, gen_random_uuid() AS id,
       (ARRAY['acme', 'globex', 'initech', 'umbrella', 'e2e'])[1 + g % 5] AS client,
       'bench-' || lpad(g::text, 8, '0') AS key,
       now() - random() * interval '30 days' AS at,
       CASE WHEN g % 100 < 2 THEN 'processing' WHEN g % 100 = 2 THEN 'needs_reconciliation'
            WHEN g % 100 < 6 THEN 'failed' WHEN g % 100 < 8 THEN 'quarantined' ELSE 'completed' END AS state,
       CASE WHEN g % 100 = 5 THEN 'crm_rejected' ELSE 'downstream_unavailable' END AS code
FROM generate_series(1, ` + fmt.Sprint(n) + `) g`,
		`INSERT INTO leads (id, client_id, idempotency_key, external_ref, submission, created_at, updated_at, finished_at,
                   crm_state, crm_destination, enrichment_outcome, score, tier)
SELECT id, client, key, 'ref-' || key,
       jsonb_build_object('email', 'lead' || g || '@example.com', 'source', 'website', 'name', 'Lead ' || g),
       at, at, CASE WHEN state IN ('completed', 'failed', 'quarantined') THEN at + interval '2 seconds' END,
       CASE WHEN state = 'completed' THEN 'accepted' ELSE 'pending' END, CASE WHEN state <> 'quarantined' THEN 'crm' END,
       'data', 40, 'warm'
FROM gen`,
		`INSERT INTO idempotency_keys (client_id, key, fingerprint_hmac, state, lead_id, response_status, response_body, failure_code,
                              created_at, updated_at, finished_at, expires_at)
SELECT client, key, sha256(key::bytea), state, id,
       CASE state WHEN 'completed' THEN 201 WHEN 'failed' THEN 502 WHEN 'quarantined' THEN 200 END,
       CASE WHEN state IN ('completed', 'failed', 'quarantined') THEN json_build_object('lead_id', id) END,
       CASE WHEN state = 'failed' THEN code END,
       at, at, CASE WHEN state IN ('completed', 'failed', 'quarantined') THEN at + interval '2 seconds' END,
       CASE WHEN state IN ('completed', 'failed', 'quarantined') THEN at + interval '60 days' END
FROM gen`,
		`ANALYZE idempotency_keys`,
		`ANALYZE leads`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("load keys: %v", err)
		}
	}
}

// ttfb GETs url as who n times (after a few to warm up) and returns the
// times to the first byte of each answer, sorted.
func ttfb(t *testing.T, url string, who basicAuth, n int) []time.Duration {
	t.Helper()
	var out []time.Duration
	for i := range n + 3 {
		var start, first time.Time
		trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { first = time.Now() }}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth(who.user, who.password)
		start = time.Now()
		res, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", url, res.StatusCode)
		}
		if i >= 3 {
			out = append(out, first.Sub(start))
		}
	}
	slices.Sort(out)
	return out
}

// sqlTracer keeps the statements a pool sends, with their arguments.
type sqlTracer struct {
	mu    sync.Mutex
	calls []pgx.TraceQueryStartData
}

func (c *sqlTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, d)
	return ctx
}

func (c *sqlTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// The leads page over 100,000 keys: the time to the first byte of the
// first page, of a page filtered by client, state and age, and of a page
// deep in the list; and the plans of the store's statements for them,
// which read the console's indexes, not the table. A measure, not a test
// of every run: CONSOLE_BENCH=1 runs it (see docs/console.md).
func TestConsoleLeadsAt100k(t *testing.T) {
	if os.Getenv("CONSOLE_BENCH") == "" {
		t.Skip("a measure: CONSOLE_BENCH=1 runs it")
	}
	s := newStack(t, nil)
	api := s.startAPI("ADMIN_USER="+operator.user, "ADMIN_PASSWORD="+operator.password)
	admin := adminURL(t, api)
	start := time.Now()
	loadKeys(t, s, consoleBenchKeys)
	t.Logf("%d keys and their leads loaded in %s", consoleBenchKeys, time.Since(start).Round(time.Millisecond))

	filtered := "/console/leads?client=acme&state=completed&within=24h"
	sparse := "/console/leads?client=acme&state=failed&within=168h"
	// The 20th page of all keys, by the cursors the pages link to.
	deep := "/console/leads"
	for range 19 {
		r := get(t, admin+deep, operator)
		_, rest, ok := strings.Cut(string(r.body), `rel="next" href="`)
		next, _, _ := strings.Cut(rest, `"`)
		if !ok {
			t.Fatal("no next page")
		}
		deep = strings.ReplaceAll(next, "&amp;", "&")
	}
	const n = 20
	report := func(name, path string) {
		d := ttfb(t, admin+path, operator, n)
		t.Logf("%-48s TTFB over %d GETs: min %6.1f ms, median %6.1f ms, p95 %6.1f ms", name, n,
			ms(d[0]), ms(d[n/2]), ms(d[n*95/100]))
	}
	report("first page (GET /console/leads)", "/console/leads")
	report("client + state + age ("+strings.TrimPrefix(filtered, "/console/leads")+")", filtered)
	report("client + state + age ("+strings.TrimPrefix(sparse, "/console/leads")+")", sparse)
	report("20th page of all keys (after=...)", deep)

	// The plans of the store's statements for the first page and the
	// filtered one, as the api sends them.
	tracer := &sqlTracer{}
	pool := dbtest.Traced(t, s.dbURL, tracer)
	st := store.New(pool)
	for _, c := range []struct {
		name  string
		f     store.LeadFilter
		index string
	}{
		{"first page", store.LeadFilter{Limit: 50}, "idempotency_keys_created_idx"},
		{"client + state + age", store.LeadFilter{ClientID: "acme", State: lead.KeyCompleted, Within: 24 * time.Hour, Limit: 50}, "idempotency_keys_client_state_idx"},
		{"client + age, every state merged", store.LeadFilter{ClientID: "acme", Within: 24 * time.Hour, Limit: 50}, "idempotency_keys_client_state_idx"},
	} {
		tracer.mu.Lock()
		tracer.calls = nil
		tracer.mu.Unlock()
		if _, err := st.ListLeads(context.Background(), c.f); err != nil {
			t.Fatal(err)
		}
		tracer.mu.Lock()
		calls := slices.Clone(tracer.calls)
		tracer.mu.Unlock()
		q := calls[len(calls)-1]
		rows, err := pool.Query(context.Background(), "EXPLAIN (ANALYZE, BUFFERS) "+q.SQL, q.Args...)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(plan, "\n")
		t.Logf("%s:\n%s\n\n%s", c.name, strings.TrimSpace(q.SQL), text)
		if !strings.Contains(text, c.index) || strings.Contains(text, "Seq Scan on idempotency_keys") {
			t.Errorf("%s: the plan does not read %s", c.name, c.index)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
