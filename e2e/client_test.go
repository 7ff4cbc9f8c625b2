package e2e

// The client library (package client) against the real api and worker, with
// the network between the client and the api breaking in the ways the retry
// contract is about: a response lost after the api committed, 503s while
// the api's database is cut, 429s with Retry-After, and a connection that
// hangs. Whatever happens, one enquiry is one lead, one CRM record and one
// notification, and the client ends with the stored final response.

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/leadintake/leadintake/client"
	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/httpfault"
)

// clientPatience bounds a submission in these tests; a test waits that long
// only when it is failing.
const clientPatience = 3 * time.Minute

// newClientStack starts a stack (api with apiEnv, and a worker) and an
// httpfault proxy between the tests' clients and the api.
func newClientStack(t *testing.T, apiEnv ...string) (*stack, *httpfault.Proxy) {
	t.Helper()
	s := newStack(t, nil)
	s.startAPI(apiEnv...)
	s.startWorker()
	return s, newHTTPFault(t, s.apiURL)
}

// newHTTPFault starts an httpfault proxy in front of target, closed when
// the test ends.
func newHTTPFault(t *testing.T, target string) *httpfault.Proxy {
	t.Helper()
	p, err := httpfault.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close the HTTP proxy: %v", err)
		}
	})
	return p
}

// eventLog collects a client's events.
type eventLog struct {
	mu     sync.Mutex
	events []client.Event
	// on, when set, sees each event as it happens.
	on func(client.Event)
}

func (l *eventLog) add(e client.Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	on := l.on
	l.mu.Unlock()
	if on != nil {
		on(e)
	}
}

func (l *eventLog) all() []client.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]client.Event(nil), l.events...)
}

// newLeadClient returns a client of baseURL with the stack's token and a
// quick back-off; opts may set more.
func (s *stack) newLeadClient(t *testing.T, baseURL string, log *eventLog, opts client.Options) *client.Client {
	t.Helper()
	if opts.BackoffBase == 0 {
		opts.BackoffBase, opts.BackoffMax = 50*time.Millisecond, 500*time.Millisecond
	}
	if log != nil {
		opts.Events = log.add
	}
	c, err := client.New(baseURL, s.token, &opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// requireSameRequest checks that every POST through p carried one key and
// the very same bytes, and returns the key and the POSTs.
func requireSameRequest(t *testing.T, p *httpfault.Proxy, body string) (string, []httpfault.Request) {
	t.Helper()
	var posts []httpfault.Request
	for _, r := range p.Requests() {
		if r.Method == http.MethodPost {
			posts = append(posts, r)
		}
	}
	if len(posts) == 0 {
		t.Fatal("no POST went through the proxy")
	}
	key := posts[0].Header.Get("Idempotency-Key")
	for i, r := range posts {
		if r.Header.Get("Idempotency-Key") != key || !bytes.Equal(r.Body, []byte(body)) || r.Path != "/v1/leads" {
			t.Fatalf("POST %d: key %q path %s body %s; want key %q and body %s", i, r.Header.Get("Idempotency-Key"), r.Path, r.Body, key, body)
		}
	}
	return key, posts
}

// requireExactlyOnce checks that key made one lead, one CRM record and one
// notification delivered once, and that res is its stored final response.
func requireExactlyOnce(t *testing.T, s *stack, key string, res *client.Result) {
	t.Helper()
	status, stored := relStored(t, s, key)
	if res.Key != key || res.StatusCode != status || !bytes.Equal(res.Body, stored) || res.Status != client.StateCompleted {
		t.Fatalf("result %d %s for key %s (%s); stored %d %s", res.StatusCode, res.Body, res.Key, key, status, stored)
	}
	if d := relRequireOneOfEach(t, s, key); d != 1 {
		t.Fatalf("notification deliveries: %d, want 1", d)
	}
	if n := s.count(`SELECT count(*) FROM leads`); n != 1 {
		t.Fatalf("%d leads, want 1", n)
	}
}

// The api commits the first POST and its answer is lost (the connection is
// dropped); the first poll meets a gateway's 502. The client retries with
// the same key and bytes and gets the lead's final response.
func TestClientLostResponse(t *testing.T) {
	t.Parallel()
	s, p := newClientStack(t)
	p.Script(http.MethodPost, "/v1/leads", httpfault.Fault{Forward: true, Drop: true})
	p.Script(http.MethodGet, "/v1/operations/", httpfault.Fault{Status: http.StatusBadGateway, Body: "<html>bad gateway</html>"})
	c := s.newLeadClient(t, p.URL(), nil, client.Options{MaxWait: 5 * time.Second})

	ctx, cancel := context.WithTimeout(t.Context(), clientPatience)
	defer cancel()
	body := leadBody(101)
	res, err := c.Submit(ctx, []byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	key, posts := requireSameRequest(t, p, body)
	if len(posts) < 2 || posts[0].Fault == nil || posts[0].Status != 0 {
		t.Fatalf("POSTs %+v: want the first one dropped, then a retry", posts)
	}
	if posts[1].Status != http.StatusAccepted && posts[1].Status != http.StatusCreated || posts[1].ResponseHeader.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry answered %d replayed=%q, want the committed claim replayed", posts[1].Status, posts[1].ResponseHeader.Get("Idempotent-Replayed"))
	}
	requireExactlyOnce(t, s, key, res)
}

// The api's database is cut while the client submits: the api answers 503
// with Retry-After, the client waits as told and retries with the same key
// and bytes, and the lead is stored once the database is back.
func TestClientDatabaseCut(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	db, proxied := relProxy(t, s)
	s.startAPI("DATABASE_URL="+proxied, "REQUEST_TIMEOUT=2s")
	s.startWorker() // straight to the database
	p := newHTTPFault(t, s.apiURL)

	db.Cut()
	unavailable := make(chan struct{})
	var once sync.Once
	log := &eventLog{on: func(e client.Event) {
		if e.Kind == client.EventRetry && e.StatusCode == http.StatusServiceUnavailable {
			once.Do(func() { close(unavailable) })
		}
	}}
	c := s.newLeadClient(t, p.URL(), log, client.Options{MaxWait: 5 * time.Second})
	body := leadBody(102)
	type outcome struct {
		res *client.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), clientPatience)
		defer cancel()
		res, err := c.Submit(ctx, []byte(body), nil)
		done <- outcome{res, err}
	}()
	select {
	case <-unavailable:
	case o := <-done:
		t.Fatalf("Submit ended while the database was cut: %+v, %v", o.res, o.err)
	case <-time.After(clientPatience):
		t.Fatal("no 503 while the database was cut")
	}
	time.Sleep(time.Second) // a retry or two more against the cut
	db.Restore()
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	key, posts := requireSameRequest(t, p, body)
	unavailables := 0
	for _, r := range posts {
		if r.Status == http.StatusServiceUnavailable {
			unavailables++
			if r.ResponseHeader.Get("Retry-After") == "" {
				t.Fatal("503 without Retry-After")
			}
		}
	}
	if unavailables == 0 {
		t.Fatalf("POSTs %+v: no 503", posts)
	}
	for _, e := range log.all() {
		if e.Kind == client.EventRetry && e.StatusCode == http.StatusServiceUnavailable && e.Delay < time.Second {
			t.Fatalf("retried %s after a 503 with Retry-After", e.Delay)
		}
	}
	requireExactlyOnce(t, s, key, o.res)
}

// Something in front of the api answers 429 with Retry-After twice: the
// client waits as told each time, then its request reaches the api.
func TestClientRateLimited(t *testing.T) {
	t.Parallel()
	s, p := newClientStack(t)
	limited := httpfault.Fault{
		Status: http.StatusTooManyRequests,
		Header: http.Header{"Retry-After": {"1"}, "Content-Type": {"application/json"}},
		Body:   `{"error":{"code":"rate_limited","message":"slow down"}}`,
	}
	p.Script(http.MethodPost, "/v1/leads", limited, limited)
	log := &eventLog{}
	c := s.newLeadClient(t, p.URL(), log, client.Options{MaxWait: 5 * time.Second})

	ctx, cancel := context.WithTimeout(t.Context(), clientPatience)
	defer cancel()
	body := leadBody(103)
	res, err := c.Submit(ctx, []byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	key, posts := requireSameRequest(t, p, body)
	// The claim answers 202, or 201 when the lead finished within the
	// client's Prefer: wait.
	if len(posts) != 3 || posts[0].Status != 429 || posts[1].Status != 429 ||
		(posts[2].Status != http.StatusAccepted && posts[2].Status != http.StatusCreated) {
		t.Fatalf("POSTs %+v: want two 429s, then the claim", posts)
	}
	retries := 0
	for _, e := range log.all() {
		if e.Kind == client.EventRetry {
			retries++
			if e.StatusCode != 429 || e.Delay < time.Second {
				t.Fatalf("retry %+v: want after Retry-After's second", e)
			}
		}
	}
	if retries != 2 {
		t.Fatalf("%d retries, want 2", retries)
	}
	requireExactlyOnce(t, s, key, res)
}

// The connection hangs after the api committed the POST, and again on a
// poll: each attempt is abandoned after the client's per-attempt time-out
// and retried with the same key and bytes.
func TestClientHungConnection(t *testing.T) {
	t.Parallel()
	s, p := newClientStack(t)
	// The CRM is slow enough that the lead is still processing when the
	// retried POST is answered: the client goes on to poll.
	s.fake.Script(fake.CRMUpsert, fake.Fault{Delay: 5 * time.Second})
	p.Script(http.MethodPost, "/v1/leads", httpfault.Fault{Forward: true, Hang: true})
	p.Script(http.MethodGet, "/v1/operations/", httpfault.Fault{Hang: true})
	log := &eventLog{}
	c := s.newLeadClient(t, p.URL(), log, client.Options{Timeout: time.Second, MaxWait: time.Second})

	ctx, cancel := context.WithTimeout(t.Context(), clientPatience)
	defer cancel()
	body := leadBody(104)
	res, err := c.Submit(ctx, []byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	key, posts := requireSameRequest(t, p, body)
	if len(posts) < 2 || posts[0].Fault == nil || posts[0].Status != 0 {
		t.Fatalf("POSTs %+v: want the first one held, then a retry", posts)
	}
	timeouts := 0
	for _, e := range log.all() {
		if e.Kind == client.EventRetry && e.StatusCode == 0 {
			timeouts++
		}
	}
	heldPolls := 0
	for _, r := range p.Requests() {
		if r.Method == http.MethodGet && r.Fault != nil {
			heldPolls++
		}
	}
	if timeouts < 2 || heldPolls != 1 {
		t.Fatalf("%d attempts timed out, %d polls held; want the POST's and the poll's", timeouts, heldPolls)
	}
	requireExactlyOnce(t, s, key, res)
}
