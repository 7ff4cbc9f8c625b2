package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/otlpsink"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/webhook"
)

// traceEnv is the environment of a process that exports its traces to rcv,
// in small batches sent at once.
func traceEnv(rcv *otlpsink.Receiver) []string {
	return []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.Endpoint(),
		"OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_SERVICE_NAME=",
	}
}

// newTraceIDs returns the trace and span ids of a new trace's span.
func newTraceIDs() (traceID, spanID string) {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])
}

// traceIDOf is the trace id of a traceparent ("" for none).
func traceIDOf(tp string) string {
	parts := strings.Split(tp, "-")
	if len(parts) != 4 {
		return ""
	}
	return parts[1]
}

// tracedSubmission is one POST of TestTracing.
type tracedSubmission struct {
	key, body, traceID, spanID, leadID string
	email, name, company, phone        string
}

// One submission is one trace: leads posted at once, so that their claims
// commit together, each keep the trace of their own POST, from the api's
// request span to the worker's job, its database work, its CRM call (which
// carries the traceparent) and its callback's delivery. No span holds
// personal data, a token or a key in clear.
func TestTracing(t *testing.T) {
	t.Parallel()
	rcv, err := otlpsink.Start(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rcv.Close() })
	secret, err := webhook.ParseSecret(e2eCallbackSecret)
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, &stackOpts{fake: &fake.Options{CallbackSecret: secret}})
	const token = "traced-token-0001"
	path := filepath.Join(t.TempDir(), "clients.yaml")
	// The callback's URL holds credentials, in its user-info and its
	// query: no span may keep them.
	const cbUser, cbPassword, cbQuery = "cbuser", "cb-password-0001", "cb-query-secret-0001"
	cbURL := strings.Replace(s.fakeURL, "http://", "http://"+cbUser+":"+cbPassword+"@", 1) + "/callbacks/traced?token=" + cbQuery
	file := "clients:\n  - id: traced\n    tokens_sha256: [" + sha256Hex(token) + "]\n" +
		"    callback:\n      url: " + cbURL + "\n      secret: " + e2eCallbackSecret + "\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	s.startAPI(append(traceEnv(rcv), "CLIENTS_FILE="+path)...)
	s.startWorker(append(traceEnv(rcv), "CLIENTS_FILE="+path)...)

	// Bursts of concurrent POSTs until one had claims committed together
	// (one transaction inserted several of its jobs).
	var subs []*tracedSubmission
	grouped := false
	for round := 0; round < 5 && !grouped; round++ {
		const n = 12
		burst := make([]*tracedSubmission, n)
		for i := range burst {
			traceID, spanID := newTraceIDs()
			j := round*n + i
			burst[i] = &tracedSubmission{
				key: fmt.Sprintf("traced-key-%04d-%s", j, traceID[:8]), body: leadBody(9000 + j), traceID: traceID, spanID: spanID,
				email: fmt.Sprintf("lead%d@example.com", 9000+j), name: fmt.Sprintf("Lead %d", 9000+j),
				company: fmt.Sprintf("Company %d", 9000+j), phone: fmt.Sprintf("+44 20 7946 %04d", (9000+j)%10000),
			}
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, sub := range burst {
			wg.Go(func() {
				<-start
				// A 503 (a busy machine's database) is sent again, the
				// same key, body and traceparent, as the contract says.
				for range 60 {
					req, err := http.NewRequest(http.MethodPost, s.apiURL+"/v1/leads", bytes.NewBufferString(sub.body))
					if err != nil {
						t.Error(err)
						return
					}
					req.Header.Set("Authorization", "Bearer "+token)
					req.Header.Set("Idempotency-Key", sub.key)
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("traceparent", "00-"+sub.traceID+"-"+sub.spanID+"-01")
					resp, err := s.client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					if resp.StatusCode == http.StatusServiceUnavailable {
						time.Sleep(time.Second)
						continue
					}
					if resp.StatusCode != http.StatusAccepted {
						t.Errorf("POST %s: %d", sub.key, resp.StatusCode)
					}
					return
				}
				t.Errorf("POST %s: 503 for a minute", sub.key)
			})
		}
		close(start)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		subs = append(subs, burst...)
		keys := make([]string, len(burst))
		for i, sub := range burst {
			keys[i] = sub.key
		}
		// xmin is the inserting transaction: fewer transactions than jobs
		// is a group commit.
		grouped = s.count(`SELECT count(DISTINCT j.xmin::text) FROM river_job j JOIN leads l ON l.job_id = j.id
WHERE l.idempotency_key = ANY($1)`, keys) < n
	}
	if !grouped {
		t.Fatal("no burst had its claims committed together")
	}

	// Each job's metadata holds its own request's trace, also in a group.
	for _, sub := range subs {
		var leadID, tp, stored string
		if err := s.pool.QueryRow(context.Background(), `
SELECT l.id::text, coalesce(j.metadata->>'traceparent', ''), coalesce(l.trace_parent, '')
FROM leads l JOIN river_job j ON j.id = l.job_id WHERE l.idempotency_key = $1`, sub.key).Scan(&leadID, &tp, &stored); err != nil {
			t.Fatal(err)
		}
		sub.leadID = leadID
		if traceIDOf(tp) != sub.traceID || traceIDOf(stored) != sub.traceID {
			t.Errorf("lead %s: job's traceparent %q, lead's %q, want trace %s", leadID, tp, stored, sub.traceID)
		}
	}
	allKeys := make([]string, len(subs))
	for i, sub := range subs {
		allKeys[i] = sub.key
	}
	testkit.EventuallyWithin(t, time.Minute, "every lead completed", func() bool {
		return s.count(`SELECT count(*) FROM idempotency_keys WHERE key = ANY($1) AND state = 'completed'`, allKeys) == len(subs)
	})
	// A poll: its span is named by route, its path (with the key) is not
	// recorded.
	req, err := http.NewRequest(http.MethodGet, s.apiURL+"/v1/operations/"+subs[0].key, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if r := s.do(req); r.status != http.StatusOK {
		t.Fatalf("GET operation: %d %s", r.status, r.body)
	}
	testkit.EventuallyWithin(t, time.Minute, "every callback delivered", func() bool {
		return s.count(`SELECT count(*) FROM callbacks WHERE delivered_at IS NOT NULL`) == len(subs)
	})

	// The downstream calls carried each lead's own trace: as many distinct
	// trace ids as leads, each a POST's.
	want := make([]string, len(subs))
	for i, sub := range subs {
		want[i] = sub.traceID
	}
	slices.Sort(want)
	for _, target := range []fake.Target{fake.Enrichment, fake.CRMUpsert, fake.Notify, fake.Callback} {
		var got []string
		for _, tp := range s.fake.TraceParents(target) {
			got = append(got, traceIDOf(tp))
		}
		slices.Sort(got)
		got = slices.Compact(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: trace ids of the calls received %q, want the POSTs' %q", target, got, want)
		}
	}

	// The spans: for each lead, the api's request span (a child of the
	// POST's), the worker's job span with the lead's id, statements, its
	// finish (a statement of a group of leads, recorded in each one's
	// trace), the CRM call and the callback's delivery, all in the POST's
	// trace.
	spanOf := func(sp otlpsink.Span) string {
		return fmt.Sprintf("%s %q parent=%s attrs=%v", sp.Service, sp.Name, sp.ParentSpanID, sp.Attributes)
	}
	type found struct{ request, job, sql, finish, crm, callback bool }
	testkit.EventuallyWithin(t, 30*time.Second, "every lead's spans received", func() bool {
		byTrace := map[string]*found{}
		polled := false
		for _, sp := range rcv.Spans() {
			f := byTrace[sp.TraceID]
			if f == nil {
				f = &found{}
				byTrace[sp.TraceID] = f
			}
			switch {
			case sp.Service == "leadintake-api" && sp.Name == "POST /v1/leads":
				f.request = true
			case sp.Service == "leadintake-worker" && sp.Name == "job process_lead":
				f.job = true
			case sp.Service == "leadintake-worker" && sp.Name == "finish leads (grouped)":
				f.finish, f.sql = true, true
			case sp.Service == "leadintake-worker" && sp.Attributes["db.system.name"] == "postgresql":
				f.sql = true
			case sp.Service == "leadintake-worker" && sp.Name == "PUT crm":
				f.crm = true
			case sp.Service == "leadintake-worker" && sp.Name == "POST callback":
				f.callback = true
			}
			if sp.Name == "GET /v1/operations/:key" {
				polled = true
			}
		}
		if !polled {
			return false
		}
		for _, sub := range subs {
			if f := byTrace[sub.traceID]; f == nil || !f.request || !f.job || !f.sql || !f.finish || !f.crm || !f.callback {
				return false
			}
		}
		return true
	})
	for _, sp := range rcv.Spans() {
		sub := func() *tracedSubmission {
			for _, sub := range subs {
				if sub.traceID == sp.TraceID {
					return sub
				}
			}
			return nil
		}()
		switch {
		case sp.Name == "POST /v1/leads" && sub != nil:
			if sp.ParentSpanID != sub.spanID || sp.Attributes["lead_id"] != sub.leadID || sp.Attributes["http.route"] != "/v1/leads" {
				t.Errorf("request span %s: want the child of the POST's span %s, lead_id %s", spanOf(sp), sub.spanID, sub.leadID)
			}
		case sp.Name == "job process_lead":
			if sub == nil || sp.Attributes["lead_id"] != sub.leadID || sp.ParentSpanID == "" {
				t.Errorf("job span %s: not in its lead's trace", spanOf(sp))
			}
		case sp.Name == "GET /v1/operations/:key":
			if sp.Attributes["url.path"] != "/v1/operations/:key" {
				t.Errorf("operation span %s: url.path is not the route", spanOf(sp))
			}
		case strings.HasPrefix(sp.Name, "GET /v1/operations/"):
			t.Errorf("span named by its path: %s", spanOf(sp))
		}
	}

	// Nothing personal, no token, no key, no secret in any span.
	secrets := []string{token, "Bearer", e2eCallbackSecret, strings.TrimPrefix(piiHashKey, "PII_HASH_KEY="), cbPassword, cbQuery}
	for _, sub := range subs {
		secrets = append(secrets, sub.key, sub.email, sub.name, sub.company, sub.phone)
	}
	for _, sp := range rcv.Spans() {
		for _, v := range sp.Values() {
			for _, secret := range secrets {
				if strings.Contains(v, secret) {
					t.Errorf("span %s holds %q", spanOf(sp), secret)
				}
			}
		}
	}
}
