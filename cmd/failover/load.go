package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Shares of the load.
const (
	shareWait   = 0.4 // new leads sent with Prefer: wait
	sharePoll   = 0.3 // accepted leads polled with GET /v1/operations
	shareReplay = 0.2 // accepted leads sent again later, same key and body
)

// answer is one response the drill read.
type answer struct {
	method   string
	status   int
	code     string // the error body's code, if any
	replayed string
	leadID   string
	body     []byte
	sent     time.Time
	received time.Time
}

// submission is one key and everything the drill read of it.
type submission struct {
	key  string
	body string

	mu sync.Mutex
	// accepted is the first 202 or final response of a POST.
	accepted *answer
	// answers are the POSTs' and GETs' answers other than a 503 or a
	// transport error.
	answers []answer
	// notFound counts the polls answered 404 after the key was accepted.
	notFound int
}

func (s *submission) record(a answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers = append(s.answers, a)
	if a.method == http.MethodPost && s.accepted == nil && acceptedStatus(a) {
		s.accepted = &a
	}
}

// acceptedStatus: a 202, or a final response (completed, crm_rejected,
// downstream_unavailable).
func acceptedStatus(a answer) bool {
	switch a.status {
	case http.StatusAccepted, http.StatusCreated, http.StatusBadGateway:
		return true
	case http.StatusUnprocessableEntity:
		return a.code == "crm_rejected"
	}
	return false
}

// outage is one request the api could not serve: a 503 or a transport
// error.
type outage struct {
	sent, received time.Time
	status         int // 0 for a transport error
}

// load is the clients' side of a run.
type load struct {
	apiURL string
	client *http.Client
	seq    atomic.Int64
	// stopped is when the load stopped starting new leads; a key still
	// unanswered a while after gives up.
	stopped atomic.Pointer[time.Time]

	mu         sync.Mutex
	subs       []*submission
	byStatus   map[string]int // "POST 202", "GET 200", "POST error"...
	outages    []outage
	unexpected []string // answers that are neither served nor 503, shown
	waits      int
	polls      int
	replays    int
}

func newLoad(apiURL string) *load {
	return &load{
		apiURL: apiURL,
		client: &http.Client{
			// MAX_WAIT (30 s) and REQUEST_TIMEOUT (5 s) bound every answer.
			Timeout:   60 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
		},
		byStatus: map[string]int{},
	}
}

// run starts new leads at rate per second across clients concurrent
// callers until ctx ends, then waits for every caller to have its answers.
func (l *load) run(ctx context.Context, rate float64, clients int, seed uint64) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				l.submit(rng)
			}
		})
	}
	<-ctx.Done()
	now := time.Now()
	l.stopped.Store(&now)
	wg.Wait()
}

func (l *load) submit(rng *rand.Rand) {
	n := l.seq.Add(1)
	sub := &submission{
		key:  fmt.Sprintf("drill-%06d-%s", n, randomHex(4)),
		body: fmt.Sprintf(`{"email":"lead%d@example.com","source":"website","name":"Lead %d","company":"Company %d"}`, n, n, n%50),
	}
	l.mu.Lock()
	l.subs = append(l.subs, sub)
	l.mu.Unlock()

	wait := rng.Float64() < shareWait
	if wait {
		l.count(func() { l.waits++ })
	}
	if !l.sendUntilAnswered(sub, wait) {
		return
	}
	if rng.Float64() < sharePoll {
		l.count(func() { l.polls++ })
		l.poll(sub, rng.IntN(2) == 0)
	}
	if rng.Float64() < shareReplay {
		l.count(func() { l.replays++ })
		sleep(context.Background(), time.Duration(rng.Int64N(int64(2*time.Second))))
		l.sendUntilAnswered(sub, false)
	}
}

func (l *load) count(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f()
}

// giveUpAfter is how long after the load stopped a key is sent again.
const giveUpAfter = 2 * time.Minute

func (l *load) gaveUp() bool {
	end := l.stopped.Load()
	return end != nil && time.Since(*end) > giveUpAfter
}

// sendUntilAnswered POSTs the key until an answer other than a 503 or a
// transport error comes back, as the contract asks of a caller, and
// reports whether one did.
func (l *load) sendUntilAnswered(sub *submission, wait bool) bool {
	for !l.gaveUp() {
		header := http.Header{"Idempotency-Key": {sub.key}, "Content-Type": {"application/json"}}
		if wait {
			header.Set("Prefer", "wait=10")
		}
		a, ok := l.do(http.MethodPost, "/v1/leads", header, sub.body)
		if !ok {
			sleep(context.Background(), 200*time.Millisecond)
			continue
		}
		sub.record(a)
		return true
	}
	return false
}

// poll GETs the key's operation until an answer other than a 503 or a
// transport error comes back.
func (l *load) poll(sub *submission, wait bool) {
	for !l.gaveUp() {
		header := http.Header{}
		if wait {
			header.Set("Prefer", "wait=5")
		}
		a, ok := l.do(http.MethodGet, "/v1/operations/"+sub.key, header, "")
		if !ok {
			sleep(context.Background(), 200*time.Millisecond)
			continue
		}
		if a.status == http.StatusNotFound {
			sub.mu.Lock()
			sub.notFound++
			sub.mu.Unlock()
		}
		sub.record(a)
		return
	}
}

// do sends one request and reports whether the api served it (anything but
// a 503 or a transport error); it counts every answer.
func (l *load) do(method, path string, header http.Header, body string) (answer, bool) {
	req, err := http.NewRequest(method, l.apiURL+path, strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header = header
	req.Header.Set("Authorization", "Bearer "+token)
	a := answer{method: method, sent: time.Now()}
	resp, err := l.client.Do(req)
	if err == nil {
		a.body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	a.received = time.Now()
	if err != nil {
		l.mu.Lock()
		l.byStatus[method+" error"]++
		l.outages = append(l.outages, outage{sent: a.sent, received: a.received})
		if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout") {
			l.unexpected = append(l.unexpected, fmt.Sprintf("%s %s: no answer within %s", method, path, l.client.Timeout))
		}
		l.mu.Unlock()
		return a, false
	}
	a.status = resp.StatusCode
	a.replayed = resp.Header.Get("Idempotent-Replayed")
	var v struct {
		LeadID string `json:"lead_id"`
		Error  struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(a.body, &v) == nil {
		a.leadID = v.LeadID
		a.code = v.Error.Code // an error's, or a failed lead's
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byStatus[fmt.Sprintf("%s %d", method, a.status)]++
	if a.status == http.StatusServiceUnavailable {
		l.outages = append(l.outages, outage{sent: a.sent, received: a.received, status: a.status})
		if a.code != "store_unavailable" || resp.Header.Get("Retry-After") == "" {
			l.unexpected = append(l.unexpected, fmt.Sprintf("%s %s: 503 %s (Retry-After %q)", method, path, a.body, resp.Header.Get("Retry-After")))
		}
		return a, false
	}
	served := a.status < 500 || a.status == http.StatusBadGateway && acceptedStatus(a)
	if !served {
		l.outages = append(l.outages, outage{sent: a.sent, received: a.received, status: a.status})
	}
	if !served || method == http.MethodPost && !acceptedStatus(a) {
		l.unexpected = append(l.unexpected, fmt.Sprintf("%s %s: %d %s", method, path, a.status, a.body))
	}
	return a, true
}

// submissions returns every key so far.
func (l *load) submissions() []*submission {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*submission(nil), l.subs...)
}

// statusCounts formats the answers by method and status.
func (l *load) statusCounts() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := make([]string, 0, len(l.byStatus))
	for k := range l.byStatus {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, l.byStatus[k]))
	}
	return strings.Join(parts, ", ")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

// sleep waits d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
