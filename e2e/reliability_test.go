package e2e

// The retry contract's list, end to end (real api and worker processes):
//
//   - simultaneous requests: TestSimultaneousRequests
//   - lost responses: TestLostResponse
//   - changed payloads: TestChangedPayload
//   - worker crashes: TestWorkerKilledDuringCRMCall (lead_test.go)
//   - expired keys: TestKeyExpiry (expiry_test.go)
//
// and two failures of what the service stands on: the database going away
// and coming back under load (TestDatabaseRestartsUnderLoad), and a
// downstream that hangs past DOWNSTREAM_TIMEOUT (TestDownstreamHangs).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/faultproxy"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/lead"
	api "github.com/leadintake/leadintake/response"
)

// relPatience bounds every wait for something that must happen; a test
// waits that long only when it is failing.
const relPatience = 3 * time.Minute

// relProxy puts a faultproxy between the stack and its database and returns
// it with the database URL through it. Registered before any process starts,
// its Close runs after theirs.
func relProxy(t *testing.T, s *stack) (*faultproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})
	u.Host = p.Addr()
	return p, u.String()
}

// relSend POSTs body under key to apiURL within ctx and returns the answer,
// or the error of a request that got none.
func relSend(ctx context.Context, s *stack, apiURL, key, body string) (*response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, apiURL+"/v1/leads", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// relStored is the final response the operation of key holds, once it is
// completed.
func relStored(t *testing.T, s *stack, key string) (int, []byte) {
	t.Helper()
	op := s.waitState(key, relPatience, string(lead.KeyCompleted))
	if op.Response == nil {
		t.Fatalf("key %s completed without a response", key)
	}
	return op.Response.Status, op.Response.Body
}

// relRequireReplay checks that a submission of key answers the stored final
// response, byte for byte, as a replay.
func relRequireReplay(t *testing.T, s *stack, key, body string) {
	t.Helper()
	status, stored := relStored(t, s, key)
	r := s.submit(key, body)
	if r.status != status || !bytes.Equal(r.body, stored) || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay of %s: %d replayed=%q %s\nwant %d %s", key, r.status, r.header.Get("Idempotent-Replayed"), r.body, status, stored)
	}
}

// relRequireOneOfEach checks that the CRM holds one record for key and the
// notification service one notification, and returns its deliveries.
func relRequireOneOfEach(t *testing.T, s *stack, key string) int {
	t.Helper()
	ref := intake.ExternalRef("e2e", key)
	if rec, ok := s.fake.CRM(ref); !ok || rec.Records != 1 {
		t.Fatalf("CRM records for %s: %+v, want 1", key, rec)
	}
	n, ok := s.fake.Notification(ref + ":notify")
	if !ok || n.Deliveries < 1 {
		t.Fatalf("no notification for %s", key)
	}
	if got := s.count(`SELECT count(*) FROM leads WHERE client_id = 'e2e' AND idempotency_key = $1`, key); got != 1 {
		t.Fatalf("leads for %s: %d, want 1", key, got)
	}
	return n.Deliveries
}

// Many requests with one key arrive at once, at two api processes: one
// claim, one lead, one job, one CRM record, one notification; every answer
// names the same lead. With two payloads racing for a key, one payload
// wins and the other is refused.
func TestSimultaneousRequests(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.startAPI()
	firstURL := s.apiURL
	s.startAPI()
	apiURLs := []string{firstURL, s.apiURL}
	s.startWorker()

	const n = 24
	// together sends n requests from as many goroutines released at once,
	// alternately to either api, with body(i).
	together := func(key string, body func(i int) string) []*response {
		answers := make([]*response, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				answers[i], errs[i] = relSend(context.Background(), s, apiURLs[i%2], key, body(i))
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		return answers
	}

	t.Run("SamePayload", func(t *testing.T) {
		const key = "simultaneous-0001"
		answers := together(key, func(int) string { return leadBody(1) })
		claims, leads := 0, map[string]bool{}
		for _, r := range answers {
			switch {
			case r.status == http.StatusAccepted:
				if r.header.Get("Idempotent-Replayed") == "false" {
					claims++
				}
				leads[leadID(t, r.body)] = true
			case r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "true":
				// The worker was quicker than the last of the requests.
				leads[leadID(t, r.body)] = true
			default:
				t.Fatalf("answer %d replayed=%q %s", r.status, r.header.Get("Idempotent-Replayed"), r.body)
			}
		}
		if claims != 1 || len(leads) != 1 {
			t.Fatalf("%d claims, lead ids %v; want one claim and one lead id", claims, leads)
		}
		if got := s.count(`SELECT count(*) FROM river_job WHERE kind = 'process_lead'
			AND args->>'lead_id' = (SELECT id::text FROM leads WHERE idempotency_key = $1)`, key); got != 1 {
			t.Fatalf("jobs for the lead: %d, want 1", got)
		}
		relRequireReplay(t, s, key, leadBody(1))
		if d := relRequireOneOfEach(t, s, key); d != 1 {
			t.Fatalf("notification deliveries: %d, want 1", d)
		}
	})

	t.Run("TwoPayloads", func(t *testing.T) {
		const key = "simultaneous-0002"
		bodies := []string{leadBody(2), leadBody(3)}
		answers := together(key, func(i int) string { return bodies[(i/2)%2] })
		won := ""
		for i, r := range answers {
			body := bodies[(i/2)%2]
			switch {
			case r.status == http.StatusAccepted || r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "true":
				if won != "" && won != body {
					t.Fatalf("both payloads were accepted under one key")
				}
				won = body
			case r.status == http.StatusUnprocessableEntity && strings.Contains(string(r.body), string(api.CodeKeyReused)):
			default:
				t.Fatalf("answer %d %s", r.status, r.body)
			}
		}
		for i, r := range answers {
			if r.status == http.StatusUnprocessableEntity && bodies[(i/2)%2] == won {
				t.Fatalf("the winning payload was refused as a reuse: %s", r.body)
			}
		}
		relRequireReplay(t, s, key, won)
		relRequireOneOfEach(t, s, key)
		// The CRM got the winner.
		var sent struct {
			Email string `json:"email"`
		}
		rec, _ := s.fake.CRM(intake.ExternalRef("e2e", key))
		if err := json.Unmarshal(rec.LastBody, &sent); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(won, `"`+sent.Email+`"`) {
			t.Fatalf("the CRM got %s; the winning payload was %s", sent.Email, won)
		}
	})
}

// A client gives up on its request, or its connection breaks, and it
// retries with the same key: the retry gets the same answer as if nothing
// had been lost, and nothing is done twice.
func TestLostResponse(t *testing.T) {
	t.Parallel()

	t.Run("ClientGivesUpWhileTheClaimRuns", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, nil)
		proxy, proxied := relProxy(t, s)
		// The claim outlives the caller's patience: the database hangs
		// while the request runs, and comes back within REQUEST_TIMEOUT.
		s.startAPI("DATABASE_URL="+proxied, "REQUEST_TIMEOUT=60s")
		s.startWorker()

		const key = "lost-response-0001"
		body := leadBody(11)
		proxy.Blackhole()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := relSend(ctx, s, s.apiURL, key, body)
		cancel()
		if err == nil {
			t.Fatalf("the request was answered while the database hung: %d %s", r.status, r.body)
		}
		proxy.Restore()

		// The request the client gave up on was applied all the same.
		testkit.EventuallyWithin(t, relPatience, "the abandoned request's claim commits", func() bool {
			return s.count(`SELECT count(*) FROM idempotency_keys WHERE key = $1`, key) == 1
		})
		var stored string
		if err := s.pool.QueryRow(context.Background(), `SELECT lead_id::text FROM idempotency_keys WHERE key = $1`, key).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		retry := s.submit(key, body)
		switch {
		case retry.status == http.StatusAccepted && retry.header.Get("Idempotent-Replayed") == "true":
		case retry.status == http.StatusCreated && retry.header.Get("Idempotent-Replayed") == "true":
		default:
			t.Fatalf("retry: %d replayed=%q %s, want the claim's answer replayed", retry.status, retry.header.Get("Idempotent-Replayed"), retry.body)
		}
		if got := leadID(t, retry.body); got != stored {
			t.Fatalf("retry names lead %s; the abandoned request claimed %s", got, stored)
		}
		relRequireReplay(t, s, key, body)
		if d := relRequireOneOfEach(t, s, key); d != 1 {
			t.Fatalf("notification deliveries: %d, want 1", d)
		}
	})

	t.Run("ConnectionBreaksMidBody", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, nil)
		s.startAPI()
		s.startWorker()

		const key = "lost-response-0002"
		body := leadBody(12)
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.apiURL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /v1/leads HTTP/1.1\r\nHost: e2e\r\nAuthorization: Bearer %s\r\nIdempotency-Key: %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", s.token, key, len(body), body[:len(body)/2])
		time.Sleep(200 * time.Millisecond) // let the server start on the body
		conn.Close()

		// Half a request is no request: the key stays free, and the retry
		// is the first claim.
		time.Sleep(500 * time.Millisecond)
		if n := s.count(`SELECT count(*) FROM idempotency_keys WHERE key = $1`, key); n != 0 {
			t.Fatalf("a request cut mid-body claimed its key")
		}
		retry := s.submit(key, body)
		if retry.status != http.StatusAccepted || retry.header.Get("Idempotent-Replayed") != "false" {
			t.Fatalf("retry: %d replayed=%q %s, want the first claim", retry.status, retry.header.Get("Idempotent-Replayed"), retry.body)
		}
		relRequireReplay(t, s, key, body)
		relRequireOneOfEach(t, s, key)
	})
}

// The same key with another payload is refused while the first is in
// progress and after it finished, and changes nothing; the same payload
// written differently (member order, white space) is the same request.
func TestChangedPayload(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	// The CRM is slow for the first lead, so that it is still in progress
	// when the changed payload arrives.
	s.fake.Script(fake.CRMUpsert, fake.Fault{Delay: 2 * time.Second})
	s.startAPI()
	s.startWorker()

	const key = "changed-payload-0001"
	body := `{"email":"first@example.com","source":"referral","name":"First","company":"One Ltd"}`
	changed := `{"email":"second@example.com","source":"referral","name":"Second","company":"One Ltd"}`
	reformatted := "{ \"company\" : \"One Ltd\",\n \"name\":\"First\", \"source\":\"referral\",\t\"email\":\"first@example.com\" }"

	first := s.submit(key, body)
	if first.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", first.status, first.body)
	}
	var canonical []byte
	if err := s.pool.QueryRow(context.Background(), `SELECT submission::text FROM leads WHERE idempotency_key = $1`, key).Scan(&canonical); err != nil {
		t.Fatal(err)
	}

	requireRefused := func(when string) {
		t.Helper()
		r := s.submit(key, changed)
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), `"code":"`+string(api.CodeKeyReused)+`"`) {
			t.Fatalf("changed payload %s: %d %s, want 422 %s", when, r.status, r.body, string(api.CodeKeyReused))
		}
		if r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("changed payload %s: Idempotent-Replayed %q on a refusal", when, r.header.Get("Idempotent-Replayed"))
		}
	}
	requireRefused("in progress")
	if r := s.submit(key, reformatted); r.status != http.StatusAccepted && r.status != http.StatusCreated ||
		r.header.Get("Idempotent-Replayed") != "true" || leadID(t, r.body) != leadID(t, first.body) {
		t.Fatalf("same payload reformatted: %d replayed=%q %s, want a replay", r.status, r.header.Get("Idempotent-Replayed"), r.body)
	}

	relStored(t, s, key)
	requireRefused("finished")
	relRequireReplay(t, s, key, body)
	relRequireReplay(t, s, key, reformatted)

	// Nothing of the changed payload went anywhere.
	var after []byte
	if err := s.pool.QueryRow(context.Background(), `SELECT submission::text FROM leads WHERE idempotency_key = $1`, key).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, canonical) {
		t.Fatalf("stored submission changed: %s, was %s", after, canonical)
	}
	relRequireOneOfEach(t, s, key)
	rec, _ := s.fake.CRM(intake.ExternalRef("e2e", key))
	if rec.Writes != 1 || bytes.Contains(rec.LastBody, []byte("second@example.com")) {
		t.Fatalf("CRM: %d writes, last %s", rec.Writes, rec.LastBody)
	}
	for ref, n := range s.fake.State().Notifications {
		if bytes.Contains(n.FirstBody, []byte("second@example.com")) {
			t.Fatalf("notification %s carries the changed payload", ref)
		}
	}
}

// The database goes away (every connection cut, new ones refused) and then
// hangs (nothing answers) while submissions flow, for the api and the
// worker alike. Clients get 202s, or 503s with Retry-After during the
// outage, never a 500; every submission that got a 202 completes once the
// database is back: one lead, one CRM record, one notification each.
func TestDatabaseRestartsUnderLoad(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	proxy, proxied := relProxy(t, s)
	s.dbURL = proxied // for the api and the worker; s.pool stays direct
	api := s.startAPI("REQUEST_TIMEOUT=2s")
	// A cut can lose the answer to River's fetch after the database marked
	// the jobs running: they wait for the rescuer, after RESCUE_STUCK_AFTER
	// (5 minutes by default, longer than this test waits).
	worker := s.startWorker("JOB_TIMEOUT=5s", "RESCUE_STUCK_AFTER=15s")

	type outcome struct {
		answered  bool // a 202, or a 201 when the lead was quicker than a retry
		statuses  []int
		unhealthy []string // answers that break the contract
	}
	var (
		mu       sync.Mutex
		outcomes = map[string]*outcome{}
	)
	submitUntilAnswered := func(key, body string) {
		o := &outcome{}
		deadline := time.Now().Add(relPatience)
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			r, err := relSend(ctx, s, s.apiURL, key, body)
			cancel()
			if err != nil {
				o.unhealthy = append(o.unhealthy, "no answer: "+err.Error())
				break
			}
			o.statuses = append(o.statuses, r.status)
			if r.status == http.StatusServiceUnavailable {
				if r.header.Get("Retry-After") == "" {
					o.unhealthy = append(o.unhealthy, "503 without Retry-After")
				}
				time.Sleep(200 * time.Millisecond)
				continue
			}
			if r.status != http.StatusAccepted && r.status != http.StatusCreated {
				o.unhealthy = append(o.unhealthy, fmt.Sprintf("%d %s", r.status, r.body))
			}
			o.answered = true
			break
		}
		mu.Lock()
		outcomes[key] = o
		mu.Unlock()
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := g*10000 + i
				submitUntilAnswered(fmt.Sprintf("db-restart-%05d", n), leadBody(n))
				time.Sleep(50 * time.Millisecond)
			}
		})
	}

	readyz := func() int {
		resp, err := s.client.Get(s.apiURL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	time.Sleep(2 * time.Second)
	proxy.Cut()
	testkit.EventuallyWithin(t, time.Minute, "/readyz says 503 while the database is cut", func() bool { return readyz() == http.StatusServiceUnavailable })
	time.Sleep(3 * time.Second)
	proxy.Restore()
	testkit.EventuallyWithin(t, time.Minute, "/readyz says 200 once the database is back", func() bool { return readyz() == http.StatusOK })
	time.Sleep(2 * time.Second)
	proxy.Blackhole()
	time.Sleep(3 * time.Second)
	proxy.Restore()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	var accepted []string
	statuses := map[int]int{}
	for key, o := range outcomes {
		for _, st := range o.statuses {
			statuses[st]++
		}
		if len(o.unhealthy) > 0 {
			t.Errorf("key %s: %v", key, o.unhealthy)
		}
		if o.answered {
			accepted = append(accepted, key)
		}
	}
	t.Logf("%d submissions, answers by status %v", len(outcomes), statuses)
	if statuses[http.StatusServiceUnavailable] == 0 {
		t.Logf("no 503 was seen: every request fell between the outages")
	}
	if len(accepted) == 0 {
		t.Fatal("no submission was accepted")
	}
	if t.Failed() {
		t.FailNow()
	}

	testkit.EventuallyWithin(t, relPatience, "every accepted submission completes", func() bool {
		return s.count(`SELECT count(*) FROM idempotency_keys WHERE key = ANY($1) AND state = 'completed'`, accepted) == len(accepted)
	})
	deliveries := 0
	for _, key := range accepted {
		deliveries += relRequireOneOfEach(t, s, key)
	}
	st := s.fake.State()
	if leads := s.count(`SELECT count(*) FROM leads`); leads != len(accepted) || st.Totals.DuplicateRefs != 0 ||
		st.Totals.CRMRecords != len(accepted) || st.Totals.Notifications != len(accepted) {
		t.Fatalf("%d leads, fake totals %+v, for %d accepted submissions", leads, st.Totals, len(accepted))
	}
	// A notification sent just before the outage stopped the lead's
	// finishing transaction is sent again under its key: the notification
	// service delivers it once.
	t.Logf("%d notifications, %d deliveries", st.Totals.Notifications, deliveries)
	for _, p := range []interface{ Done() <-chan struct{} }{api, worker} {
		select {
		case <-p.Done():
			t.Fatalf("a process exited during the outage:\n%s", tail(api.Output()+worker.Output(), 40))
		default:
		}
	}
}

// A downstream accepts the call and never answers: the worker gives up
// after DOWNSTREAM_TIMEOUT, retries, and the lead completes with one CRM
// record and one notification.
func TestDownstreamHangs(t *testing.T) {
	t.Parallel()
	env := []string{"DOWNSTREAM_TIMEOUT=1s", "JOB_TIMEOUT=10s", "RESCUE_STUCK_AFTER=20s"}

	t.Run("CRMUpsert", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, &stackOpts{workerEnv: env})
		// Hangs before applying, then after: the upsert is repeated, and
		// the CRM still holds one record.
		s.fake.Script(fake.Enrichment, fake.Fault{Hang: true})
		s.fake.Script(fake.CRMUpsert, fake.Fault{Hang: true}, fake.Fault{HangAfterApply: true})
		s.startAPI()
		s.startWorker()
		const key = "hang-upsert-0001"
		if r := s.submit(key, leadBody(21)); r.status != http.StatusAccepted {
			t.Fatalf("submit: %d %s", r.status, r.body)
		}
		relRequireReplay(t, s, key, leadBody(21))
		relRequireOneOfEach(t, s, key)
		// At least: a slow machine may time a normal call out too.
		if got := s.fake.Requests(fake.CRMUpsert); got < 3 {
			t.Fatalf("CRM upserts: %d, want 3 (hang, hang after apply, success)", got)
		}
		_, stored := relStored(t, s, key)
		if !strings.Contains(string(stored), `"warnings":[]`) {
			t.Fatalf("final response %s: the enrichment was retried after its hang, want no warning", stored)
		}
	})

	t.Run("CRMCreate", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, &stackOpts{workerEnv: append([]string{"CRM_MODE=create"}, env...)})
		// The create is applied and never answered: the worker looks the
		// reference up instead of posting again.
		s.fake.Script(fake.CRMCreate, fake.Fault{HangAfterApply: true})
		s.startAPI()
		s.startWorker()
		const key = "hang-create-0001"
		if r := s.submit(key, leadBody(22)); r.status != http.StatusAccepted {
			t.Fatalf("submit: %d %s", r.status, r.body)
		}
		relRequireReplay(t, s, key, leadBody(22))
		relRequireOneOfEach(t, s, key)
		if got := s.fake.Requests(fake.CRMCreate); got != 1 {
			t.Fatalf("CRM creates: %d, want 1", got)
		}
		if s.fake.Requests(fake.CRMLookup) < 1 {
			t.Fatal("no look-up after the uncertain create")
		}
	})

	t.Run("Notification", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, &stackOpts{workerEnv: env})
		// Delivered, never acknowledged: sent again under the same key.
		s.fake.Script(fake.Notify, fake.Fault{HangAfterApply: true})
		s.startAPI()
		s.startWorker()
		const key = "hang-notify-0001"
		if r := s.submit(key, leadBody(23)); r.status != http.StatusAccepted {
			t.Fatalf("submit: %d %s", r.status, r.body)
		}
		relRequireReplay(t, s, key, leadBody(23))
		if d := relRequireOneOfEach(t, s, key); d < 2 {
			t.Fatalf("notification deliveries: %d, want 2 (one unacknowledged, one resent under the same key)", d)
		}
		if n := len(s.fake.State().Notifications); n != 1 {
			t.Fatalf("notifications: %d, want 1", n)
		}
		_, stored := relStored(t, s, key)
		if !strings.Contains(string(stored), `"notified":true`) {
			t.Fatalf("final response %s, want notified", stored)
		}
	})
}
