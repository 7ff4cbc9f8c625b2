package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/testkit"
)

// assignClients is a clients file of one client, "filed", whose leads take
// turns among four owners.
func assignClients(token string) string {
	return `clients:
  - id: filed
    tokens_sha256: [` + sha256Hex(token) + `]
    owners:
      - {name: ann, crm_owner: "101"}
      - {name: bo, crm_owner: "102"}
      - {name: cy, crm_owner: "103"}
      - {name: di, crm_owner: "104"}
    assign:
      - pool: [ann, bo, cy, di]
`
}

// The owner of a lead is chosen once, in the order leads arrive, fairly
// across several workers: over N leads from a pool of four, each owner gets
// N/4, whatever fails meanwhile. Leads that fail and are retried, leads of
// a worker killed mid-run, and leads that end downstream_unavailable and
// are redriven all keep the owner they were given: every CRM write of a
// lead names the same owner, and its completed body names it too.
//
// LEADINTAKE_E2E_ASSIGN_LEADS sets N (default 200; a multiple of 4).
func TestAssignmentIsFairAndChosenOnce(t *testing.T) {
	t.Parallel()
	n := 200
	if v, err := strconv.Atoi(os.Getenv("LEADINTAKE_E2E_ASSIGN_LEADS")); err == nil && v > 0 {
		n = v - v%4
	}
	s := newStack(t, nil)
	const token = "assign-token-0001"
	path := filepath.Join(t.TempDir(), "clients.yaml")
	writeClientsFile(t, path, assignClients(token))
	s.startAPI("CLIENTS_FILE=" + path)
	// Half the CRM's answers are 503s: many leads fail and are retried.
	if err := s.fake.SetChaos(fake.CRMUpsert, fake.Chaos{FailRate: 0.5, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	// A lead held back longer than DELIVERY_MAX_AGE ends
	// downstream_unavailable: the CRM's outage below ends some that way,
	// to be redriven.
	env := []string{"CLIENTS_FILE=" + path, "JOB_MAX_ATTEMPTS=3", "PROBE_INTERVAL=1s", "JOB_TIMEOUT=2s", "RESCUE_STUCK_AFTER=12s", "DELIVERY_MAX_AGE=6s"}
	for range 3 {
		s.startWorker(env...)
	}
	keys := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range keys {
		keys[i] = fmt.Sprintf("assign-key-%05d", i)
		if i == n/3 {
			// A worker dies mid-run, with leads in its hands; another
			// takes its place, and the rescuer gives its leads to the
			// others.
			wg.Wait()
			if err := syscall.Kill(s.workers[1].Pid(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			s.startWorker(env...)
		}
		if i == 2*n/3 {
			// The CRM goes down for the last third.
			wg.Wait()
			if err := s.fake.SetChaos(fake.CRMUpsert, fake.Chaos{FailRate: 1}); err != nil {
				t.Fatal(err)
			}
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			submitRetrying(t, s, token, keys[i], leadBody(i))
		})
	}
	wg.Wait()

	var failed []string
	for i, key := range keys {
		want := []string{"completed", "failed"}
		if i >= 2*n/3 {
			want = want[1:] // held by the outage past DELIVERY_MAX_AGE
		}
		st := s.waitStateAs(token, key, 2*time.Minute, want...)
		if st.State == "failed" {
			failed = append(failed, key)
		}
	}
	// The CRM recovers; the failed leads are redriven.
	if err := s.fake.SetChaos(fake.CRMUpsert, fake.Chaos{}); err != nil {
		t.Fatal(err)
	}
	if len(failed) > 0 {
		args := append([]string{"leads", "redrive", "--client", "filed"}, failed...)
		r := runBinary(t, "api", []string{"DATABASE_URL=" + s.dbURL, piiHashKey, "CLIENTS_FILE=" + path}, args...)
		if r.code != 0 {
			t.Fatalf("redrive: exit %d\n%s", r.code, r.stderr)
		}
	}

	owners := map[string]int{}
	for _, key := range keys {
		st := s.waitStateAs(token, key, 2*time.Minute, "completed")
		var body struct {
			Owner string `json:"owner"`
		}
		if err := json.Unmarshal(st.Response.Body, &body); err != nil {
			t.Fatal(err)
		}
		owners[body.Owner]++
		rec, ok := s.fake.CRM(intake.ExternalRef("filed", key))
		if !ok || len(rec.IDs) != 1 {
			t.Fatalf("key %s: CRM records %+v", key, rec)
		}
		for i, b := range rec.Bodies {
			var w struct {
				Owner string `json:"owner"`
			}
			if err := json.Unmarshal(b, &w); err != nil || w.Owner != body.Owner {
				t.Errorf("key %s: CRM write %d names owner %q, its completed body %q", key, i+1, w.Owner, body.Owner)
			}
		}
	}
	t.Logf("%d leads through 3 workers (one killed and replaced), %d redriven: owners %v", n, len(failed), owners)
	for _, o := range []string{"ann", "bo", "cy", "di"} {
		if owners[o] != n/4 {
			t.Errorf("owners %v: each should have %d", owners, n/4)
			break
		}
	}
}

// submitRetrying POSTs body under key with token until the api takes it
// (202, or a replay), keeping the retry contract: a 503 is sent again.
func submitRetrying(t *testing.T, s *stack, token, key, body string) {
	t.Helper()
	for range 50 {
		switch code := s.submitAs(token, key, body); {
		case code == http.StatusAccepted || code == http.StatusCreated:
			return
		case code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests:
			time.Sleep(200 * time.Millisecond)
		default:
			t.Errorf("key %s: %d", key, code)
			return
		}
	}
	t.Errorf("key %s: never taken", key)
}

// waitStateAs polls the operation of key, with token, until its state is
// one of states.
func (s *stack) waitStateAs(token, key string, timeout time.Duration, states ...string) operationState {
	s.t.Helper()
	var last operationState
	testkit.EventuallyWithin(s.t, timeout, "key "+key+" in "+fmt.Sprint(states), func() bool {
		req, err := http.NewRequest(http.MethodGet, s.apiURL+"/v1/operations/"+key, nil)
		if err != nil {
			s.t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		r := s.do(req)
		if r.status != http.StatusOK {
			return false
		}
		last = operationState{}
		if err := json.Unmarshal(r.body, &last); err != nil {
			s.t.Fatal(err)
		}
		for _, st := range states {
			if last.State == st {
				return true
			}
		}
		return false
	})
	return last
}
