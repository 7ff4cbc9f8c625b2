package e2e

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/testkit"
)

// submitWaiting POSTs body under key with the Prefer header prefer. It may
// run outside the test's goroutine: it returns, not fails on, an error.
func (s *stack) submitWaiting(key, body, prefer string) (*response, error) {
	req, err := http.NewRequest(http.MethodPost, s.apiURL+"/v1/leads", bytes.NewBufferString(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Prefer", prefer)
	res, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	return &response{status: res.StatusCode, header: res.Header, body: b}, nil
}

// waitAnswer waits for the answer of a submitWaiting run in a goroutine.
func waitAnswer(t *testing.T, answers <-chan answerOrError, within time.Duration, what string) *response {
	t.Helper()
	select {
	case a := <-answers:
		if a.err != nil {
			t.Fatalf("%s: %v", what, a.err)
		}
		return a.res
	case <-time.After(within):
		t.Fatalf("%s: no answer within %s", what, within)
		return nil
	}
}

type answerOrError struct {
	res *response
	err error
}

// submitWaitingAsync runs submitWaiting in a goroutine.
func (s *stack) submitWaitingAsync(key, body, prefer string) <-chan answerOrError {
	answers := make(chan answerOrError, 1)
	go func() {
		res, err := s.submitWaiting(key, body, prefer)
		answers <- answerOrError{res, err}
	}()
	return answers
}

// A POST that asks to wait is answered with its final response in one call,
// as a new request (not a replay).
func TestWaitForTheFinalResponse(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.startAPI()
	s.startWorker()
	r := waitAnswer(t, s.submitWaitingAsync("waited-key-0001", leadBody(1), "wait=30"), time.Minute, "POST with Prefer: wait=30")
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "false" ||
		r.header.Get("Preference-Applied") != "wait=30" {
		t.Fatalf("POST with Prefer: wait=30: %d (Idempotent-Replayed %q, Preference-Applied %q) %s",
			r.status, r.header.Get("Idempotent-Replayed"), r.header.Get("Preference-Applied"), r.body)
	}
}

// The database is cut while a request is held: the api's listening
// connection breaks, the worker finishes the lead meanwhile (its
// announcement is lost), and once the database is back the held request is
// answered with the final response, well before its wait runs out.
func TestWaitAcrossADatabaseCut(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	proxy, proxied := relProxy(t, s)
	direct := s.dbURL
	s.dbURL = proxied
	s.startAPI("MAX_WAIT=120s")
	s.dbURL = direct

	const key = "waited-across-cut-0001"
	answered := s.submitWaitingAsync(key, leadBody(2), "wait=120")
	testkit.EventuallyWithin(t, time.Minute, "the lead claimed", func() bool {
		return s.count(`SELECT count(*) FROM idempotency_keys WHERE key = $1`, key) == 1
	})
	proxy.Cut()
	s.startWorker()
	testkit.EventuallyWithin(t, time.Minute, "the lead finished", func() bool {
		return s.count(`SELECT count(*) FROM idempotency_keys WHERE key = $1 AND state = 'completed'`, key) == 1
	})
	start := time.Now()
	proxy.Restore()
	if r := waitAnswer(t, answered, 90*time.Second, "the held request, after the database came back"); r.status != http.StatusCreated {
		t.Fatalf("held request answered %d %s, want the final 201", r.status, r.body)
	}
	t.Logf("answered %s after the database came back", time.Since(start).Round(time.Millisecond))
}

// The api is told to stop while it holds a request: the request is
// answered (as the key stands: 202), not dropped, and the api exits 0.
func TestWaitersAreAnsweredOnStop(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	api := s.startAPI("MAX_WAIT=120s", "SHUTDOWN_TIMEOUT=60s")
	const key = "waited-at-stop-0001"
	answered := s.submitWaitingAsync(key, leadBody(3), "wait=120")
	testkit.EventuallyWithin(t, time.Minute, "the lead claimed", func() bool {
		return s.count(`SELECT count(*) FROM idempotency_keys WHERE key = $1`, key) == 1
	})
	time.Sleep(200 * time.Millisecond) // a moment to be held; answered either way
	stopped := make(chan error, 1)
	go func() { stopped <- api.Stop(time.Minute) }()
	if r := waitAnswer(t, answered, 30*time.Second, "the held request, when the api stopped"); r.status != http.StatusAccepted ||
		r.header.Get("Preference-Applied") != "wait=120" {
		t.Fatalf("held request answered %d %s at the stop, want 202", r.status, r.body)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("api stop: %v", err)
	}
}
