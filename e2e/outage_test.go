package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/testkit"
)

// The outage drill, on compressed timings: a downstream is down for 30 s
// while 200 leads arrive, with JOB_MAX_ATTEMPTS=3. During the outage it
// gets no more calls than its probes (one a PROBE_INTERVAL) and the few
// that found it out; once it is back, every lead completes without anyone
// retrying, with one CRM record and one notification each.
func TestOutageDrill(t *testing.T) {
	t.Parallel()
	for _, target := range []fake.Target{fake.CRMUpsert, fake.Notify} {
		t.Run(string(target), func(t *testing.T) {
			t.Parallel()
			drill(t, target)
		})
	}
}

const (
	drillLeads       = 200
	drillOutage      = 30 * time.Second
	drillProbe       = 2 * time.Second
	drillConcurrency = 20
)

func drill(t *testing.T, target fake.Target) {
	s := newStack(t, &stackOpts{workerEnv: []string{
		"JOB_MAX_ATTEMPTS=3", fmt.Sprintf("PROBE_INTERVAL=%s", drillProbe),
		fmt.Sprintf("WORKER_CONCURRENCY=%d", drillConcurrency),
	}})
	s.startAPI("JOB_MAX_ATTEMPTS=3")
	s.startWorker()
	s.startWorker()

	if err := s.fake.SetChaos(target, fake.Chaos{FailRate: 1, FailStatus: http.StatusServiceUnavailable}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	before := s.fake.Requests(target)
	keys := make([]string, drillLeads)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range keys {
		keys[i] = fmt.Sprintf("drill-%s-%04d", target, i)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if r := s.submit(keys[i], leadBody(i)); r.status != http.StatusAccepted {
				t.Errorf("submit %d: %d %s", i, r.status, r.body)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Every lead is accepted and waits; none is failed for it.
	testkit.EventuallyWithin(t, drillOutage, "every lead waiting", func() bool {
		return s.count(`SELECT count(*) FROM leads WHERE waiting_for IS NOT NULL`) == drillLeads
	})
	if n := s.count(`SELECT count(*) FROM idempotency_keys WHERE state <> 'processing'`); n != 0 {
		t.Fatalf("%d keys finished during the outage, want none", n)
	}
	if wait := drillOutage - time.Since(start); wait > 0 {
		time.Sleep(wait)
	}
	calls := s.fake.Requests(target) - before
	if err := s.fake.SetChaos(target, fake.Chaos{}); err != nil {
		t.Fatal(err)
	}
	recovered := time.Now()

	// The probes, and what found the outage out: the calls in flight of
	// both workers, and the failures in a row it takes.
	probes := int(drillOutage/drillProbe) + 1
	allowance := 2*drillConcurrency + 8
	t.Logf("%s: %d calls during %s of outage (%d probes at most, %d allowed for the detection)", target, calls, drillOutage, probes, allowance)
	if calls > probes+allowance {
		t.Errorf("%d calls during the outage, want at most %d probes and %d more", calls, probes, allowance)
	}
	for _, key := range keys {
		s.waitState(key, 2*time.Minute, "completed")
	}
	t.Logf("%s: every lead completed %s after the recovery", target, time.Since(recovered).Round(100*time.Millisecond))
	state := s.fake.State()
	if state.Totals.CRMRecords != drillLeads || state.Totals.DuplicateRefs != 0 {
		t.Errorf("CRM totals %+v, want %d records, no duplicate", state.Totals, drillLeads)
	}
	for _, key := range keys {
		body := s.waitState(key, time.Minute, "completed").Response.Body
		var done struct{ Notified bool }
		if err := json.Unmarshal(body, &done); err != nil || !done.Notified {
			t.Errorf("key %s: %s, want notified", key, body)
		}
	}
	if n := s.count(`SELECT count(*) FROM river_job WHERE kind = 'process_lead' AND attempt > 3`); n != 0 {
		t.Errorf("%d jobs past their 3 attempts", n)
	}
}

// Redrive, from the command line and the admin listener: a key that failed
// with downstream_unavailable is re-opened as a retry would re-open it (the
// same lead, a new attempt, a new finish); a key that does not qualify is
// named and left as it is; each redrive is recorded.
func TestRedrive(t *testing.T) {
	t.Parallel()
	s := newStack(t, &stackOpts{workerEnv: []string{"JOB_MAX_ATTEMPTS=1"}})
	api := s.startAPI("JOB_MAX_ATTEMPTS=1", "ADMIN_USER="+operator.user, "ADMIN_PASSWORD="+operator.password)
	admin := adminURL(t, api)
	s.startWorker()

	// Three leads fail on the CRM, one at a time (never an outage: one
	// lead's failures are its own); a fourth completes.
	var failed []string
	for i := range 3 {
		key := fmt.Sprintf("redrive-key-%04d", i)
		s.fake.Script(fake.CRMUpsert, fake.Fault{Status: http.StatusBadGateway})
		if r := s.submit(key, leadBody(i)); r.status != http.StatusAccepted {
			t.Fatalf("submit: %d %s", r.status, r.body)
		}
		s.waitState(key, time.Minute, "failed")
		failed = append(failed, key)
	}
	done := "redrive-key-done"
	s.submit(done, leadBody(9))
	s.waitState(done, time.Minute, "completed")
	before := s.operation(failed[0])

	// Bad usage.
	for _, args := range [][]string{
		{"leads", "redrive"},
		{"leads", "redrive", "--client", "e2e", "--outcome", "downstream_unavailable", failed[0]},
		{"leads", "redrive", failed[0]},
		{"leads", "redrive", "--outcome", "crm_rejected"},
	} {
		if r := s.command(args...); r.code != 2 {
			t.Errorf("api %v: exit %d, want 2 (bad usage): %s", args, r.code, r.stderr)
		}
	}

	// A dry run changes nothing.
	r := s.command("leads", "redrive", "--outcome", "downstream_unavailable", "--dry-run", "--json")
	var dry struct {
		Redriven int `json:"redriven"`
		Keys     []struct {
			ClientID string `json:"client_id"`
			Key      string `json:"key"`
		} `json:"keys"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &dry) != nil || dry.Redriven != 3 || len(dry.Keys) != 3 || dry.Keys[0].ClientID != "e2e" {
		t.Fatalf("dry run: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	if s.waitState(failed[0], time.Second, "failed"); s.count(`SELECT count(*) FROM audit WHERE action = 'redrive'`) != 0 {
		t.Fatal("a dry run was recorded")
	}

	// Named keys: the failed one is redriven, the completed one named.
	r = s.command("leads", "redrive", "--client", "e2e", failed[0], done)
	if r.code != 1 || r.stdout != "redriven 1\n" || !strings.Contains(r.stderr, done) || !strings.Contains(r.stderr, "completed") {
		t.Fatalf("redrive of keys: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	after := s.waitState(failed[0], time.Minute, "completed")
	var was operationState
	if err := json.Unmarshal(before.body, &was); err != nil || after.LeadID != was.LeadID {
		t.Fatalf("the redriven key's lead %s, want the same lead %s", after.LeadID, was.LeadID)
	}

	// By outcome, from the admin listener: the two others.
	resp := postAdmin(t, admin+"/admin/redrives", operator, `{"outcome":"downstream_unavailable"}`, nil)
	var got struct {
		Redriven int               `json:"redriven"`
		Keys     []json.RawMessage `json:"keys"`
		Skipped  []json.RawMessage `json:"skipped"`
	}
	if resp.status != http.StatusOK || json.Unmarshal(resp.body, &got) != nil || got.Redriven != 2 || len(got.Skipped) != 0 {
		t.Fatalf("POST /admin/redrives: %d %s", resp.status, resp.body)
	}
	for _, key := range failed[1:] {
		s.waitState(key, time.Minute, "completed")
	}
	for _, body := range []string{`{}`, `{"keys":["x"]}`, `{"client_id":"e2e","keys":["x"],"outcome":"downstream_unavailable"}`, `{"outcome":"downstream_unavailable","since":"yesterday"}`} {
		if r := postAdmin(t, admin+"/admin/redrives", operator, body, nil); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "bad_request") {
			t.Errorf("POST /admin/redrives %s: %d %s, want 400 bad_request", body, r.status, r.body)
		}
	}
	if n := s.count(`SELECT count(*) FROM audit WHERE action = 'redrive'`); n != 2 {
		t.Errorf("%d redrives recorded, want 2", n)
	}
	if n := s.count(`SELECT count(*) FROM audit WHERE action = 'redrive' AND actor = 'cli' AND via = 'cli' AND count = 1 AND (detail->>'keys_named')::int = 2`); n != 1 {
		t.Errorf("the command's redrive is not recorded as such")
	}

	// The delivery log of a redriven key: its failed call, then the calls
	// of the redrive, its attempt counted from 1 again.
	r = s.command("keys", "show", "--client", "e2e", failed[0], "--json")
	var shown struct {
		Calls []struct {
			Step    string `json:"step"`
			Attempt int    `json:"attempt"`
			Outcome string `json:"outcome"`
		} `json:"calls"`
		WaitingFor *string `json:"waiting_for"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &shown) != nil {
		t.Fatalf("keys show: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	var log []string
	for _, c := range shown.Calls {
		log = append(log, fmt.Sprintf("%s/%d/%s", c.Step, c.Attempt, c.Outcome))
	}
	if want := "[enrichment/1/200 crm/1/502 crm/1/201 notification/1/202]"; fmt.Sprint(log) != want || shown.WaitingFor != nil {
		t.Errorf("calls %v waiting for %v, want %s and nothing", log, shown.WaitingFor, want)
	}
	if r := s.command("keys", "show", "--client", "e2e", failed[0]); r.code != 0 || !strings.Contains(r.stdout, "crm_lookup") && !strings.Contains(r.stdout, "STEP") {
		t.Errorf("keys show's table has no calls: %s", r.stdout)
	}
}
