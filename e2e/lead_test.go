package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/store"
)

func TestHappyPathReplaysFinalResponse(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.startAPI()
	s.startWorker()

	const key = "happy-path-0001"
	body := `{"email":"ada@example.com","source":"referral","name":"Ada","company":"Analytical Engines"}`
	first := s.submit(key, body)
	if first.status != http.StatusAccepted || first.header.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("first submit: %d %s replayed=%q", first.status, first.body, first.header.Get("Idempotent-Replayed"))
	}
	var accepted struct {
		LeadID string `json:"lead_id"`
	}
	if err := json.Unmarshal(first.body, &accepted); err != nil {
		t.Fatal(err)
	}

	op := s.waitState(key, time.Minute, string(store.KeyCompleted))
	if op.Response == nil || op.Response.Status != http.StatusCreated {
		t.Fatalf("operation: %+v", op)
	}
	var final struct {
		Status   string   `json:"status"`
		LeadID   string   `json:"lead_id"`
		CRMID    string   `json:"crm_id"`
		Score    int      `json:"score"`
		Tier     string   `json:"tier"`
		Notified bool     `json:"notified"`
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal(op.Response.Body, &final); err != nil {
		t.Fatal(err)
	}
	// 40 + company 15 + referral 20 + enrichment 10.
	if final.Status != "completed" || final.LeadID != accepted.LeadID || final.Score != 85 || final.Tier != "hot" ||
		!final.Notified || final.CRMID == "" || len(final.Warnings) != 0 {
		t.Fatalf("final response: %+v", final)
	}

	// Every retry replays the stored response byte for byte.
	for range 3 {
		r := s.submit(key, body)
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || r.header.Get("Idempotency-Key") != key {
			t.Fatalf("replay: %d replayed=%q", r.status, r.header.Get("Idempotent-Replayed"))
		}
		if !bytes.Equal(r.body, op.Response.Body) {
			t.Fatalf("replay body\n%s\nwant\n%s", r.body, op.Response.Body)
		}
	}
	ref := intake.ExternalRef("e2e", key)
	if rec, ok := s.fake.CRM(ref); !ok || rec.Records != 1 {
		t.Fatalf("CRM records for %s: %+v", ref, rec)
	}
	if n, ok := s.fake.Notification(ref + ":notify"); !ok || n.Deliveries != 1 {
		t.Fatalf("notification: %+v", n)
	}
}

// The worker is killed while the CRM call is in flight (the CRM applied the
// create and never answered); another worker takes the job over after
// RESCUE_STUCK_AFTER: it looks the reference up instead of posting again.
func TestWorkerKilledDuringCRMCall(t *testing.T) {
	t.Parallel()
	s := newStack(t, &stackOpts{workerEnv: []string{
		"CRM_MODE=create", "JOB_TIMEOUT=3s", "RESCUE_STUCK_AFTER=13s", "DOWNSTREAM_TIMEOUT=30s",
	}})
	s.fake.Script(fake.CRMCreate, fake.Fault{HangAfterApply: true})
	s.startAPI()
	first := s.startWorker()

	const key = "killed-worker-0001"
	if r := s.submit(key, leadBody(1)); r.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	eventually(t, time.Minute, "the CRM create arrives", func() bool { return s.fake.Requests(fake.CRMCreate) >= 1 })
	first.Kill()

	s.startWorker()
	s.waitState(key, 2*time.Minute, string(store.KeyCompleted))

	ref := intake.ExternalRef("e2e", key)
	rec, _ := s.fake.CRM(ref)
	if rec.Records != 1 {
		t.Fatalf("CRM records for the lead: %d, want 1 (%+v)", rec.Records, rec)
	}
	if s.fake.Requests(fake.CRMCreate) != 1 {
		t.Fatalf("CRM creates: %d, want 1 (the record was found by look-up)", s.fake.Requests(fake.CRMCreate))
	}
	if n, _ := s.fake.Notification(ref + ":notify"); n.Deliveries != 1 {
		t.Fatalf("notification deliveries: %d", n.Deliveries)
	}
}

// 500 leads through real api and worker processes, a tenth of them retried
// (some at once, some later): one CRM record and one notification each.
func TestManyLeadsWithRetries(t *testing.T) {
	t.Parallel()
	const leads = 500
	s := newStack(t, nil)
	s.startAPI()
	s.startWorker()
	s.startWorker()

	keys := make([]string, leads)
	for i := range keys {
		keys[i] = fmt.Sprintf("bulk-%04d-%s", i, strings.Repeat("x", 8))
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		bad  []string
		work = make(chan int)
	)
	check := func(i int, r *response) {
		if r.status != http.StatusAccepted && r.status != http.StatusCreated {
			mu.Lock()
			bad = append(bad, fmt.Sprintf("lead %d: %d %s", i, r.status, r.body))
			mu.Unlock()
		}
	}
	for range 16 {
		wg.Go(func() {
			for i := range work {
				check(i, s.submit(keys[i], leadBody(i)))
				if i%10 == 0 { // retried at once, as after a lost answer
					check(i, s.submit(keys[i], leadBody(i)))
				}
			}
		})
	}
	for i := range leads {
		work <- i
	}
	close(work)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d bad answers, first: %s", len(bad), bad[0])
	}

	eventually(t, 3*time.Minute, "every key completed", func() bool {
		return s.count(`SELECT count(*) FROM idempotency_keys WHERE state = 'completed'`) == leads
	})
	// Retried later too, once finished: replays, nothing new.
	for i := 5; i < leads; i += 10 {
		if r := s.submit(keys[i], leadBody(i)); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("late retry of lead %d: %d", i, r.status)
		}
	}

	st := s.fake.State()
	if st.Totals.CRMRecords != leads || st.Totals.DuplicateRefs != 0 || st.Totals.Notifications != leads {
		t.Fatalf("fake totals: %+v", st.Totals)
	}
	for key, n := range st.Notifications {
		if n.Deliveries != 1 {
			t.Fatalf("notification %s delivered %d times", key, n.Deliveries)
		}
	}
	if got := s.count(`SELECT count(*) FROM leads`); got != leads {
		t.Fatalf("leads: %d, want %d", got, leads)
	}
	if got := s.count(`SELECT count(*) FROM river_job WHERE kind = 'process_lead'`); got != leads {
		t.Fatalf("process_lead jobs: %d, want %d", got, leads)
	}
}

// SIGTERM: the worker stops fetching, lets the running job finish, exits 0;
// the api finishes the requests in flight and exits 0.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.fake.Script(fake.CRMUpsert, fake.Fault{Delay: 2 * time.Second})
	api := s.startAPI()
	worker := s.startWorker()

	const key = "graceful-stop-0001"
	if r := s.submit(key, leadBody(2)); r.status != http.StatusAccepted {
		t.Fatalf("submit: %d", r.status)
	}
	eventually(t, time.Minute, "the CRM call starts", func() bool { return s.fake.Requests(fake.CRMUpsert) >= 1 })
	if err := worker.Stop(30 * time.Second); err != nil {
		t.Fatalf("worker exit: %v", err)
	}
	// The job finished before the worker exited.
	if got := s.count(`SELECT count(*) FROM idempotency_keys WHERE state = 'completed'`); got != 1 {
		t.Fatalf("completed keys after the stop: %d, want 1", got)
	}
	if err := api.Stop(30 * time.Second); err != nil {
		t.Fatalf("api exit: %v", err)
	}
}
