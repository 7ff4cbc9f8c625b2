package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Shares of the submissions that get each treatment.
const (
	shareDuplicate   = 0.15 // sent 2 or 3 times at once
	shareRetry       = 0.30 // sent again later (reformatted half the time)
	shareChanged     = 0.05 // the key is sent again with another payload
	sharePoll        = 0.20 // polled with GET /v1/operations
	shareSharedKey   = 0.05 // the other tenant uses the same key
	shareDropRequest = 0.10 // each request: the client gives up mid-request
	sharePage        = 0.12 // sent by a web page, with the publishable key
	shareWaitPost    = 0.15 // each POST: with Prefer: wait
	shareWaitPoll    = 0.50 // each poll: with Prefer: wait
	shareAmend       = 0.10 // amended under a new key (Supersedes)
	shareAmendAgain  = 0.30 // an amendment amended in turn
)

// loadStats counts what the clients did and saw.
type loadStats struct {
	submissions, requests, retries, duplicates, dropped, changed, polls atomic.Int64
	sharedKeys, unavailable, transportErrors, throttled                 atomic.Int64
	pages, amendments, waitPosts, waitPolls, rateLimited, erasures      atomic.Int64

	mu       sync.Mutex
	byStatus map[int]int
}

func (s *loadStats) status(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byStatus == nil {
		s.byStatus = map[int]int{}
	}
	s.byStatus[code]++
}

// answer is one response the soak received.
type answer struct {
	status   int
	replayed string
	body     []byte
	leadID   string
	sent     time.Time
	received time.Time
	// afterDrain marks the checks' own requests, after the chaos.
	afterDrain bool
	// waited is the wait the api said it applied (Preference-Applied), in
	// seconds; 0 without Prefer: wait.
	waited int
	// allowOrigin is the answer's Access-Control-Allow-Origin.
	allowOrigin string
}

// waitAnswer is the answer to a request that asked to wait (POST or GET
// with Prefer: wait), as the client saw it: what state it said the key was
// in, and when.
type waitAnswer struct {
	method   string
	status   int
	state    string // "processing", "needs_reconciliation" or a final state
	body     []byte // the final response's body, for a final answer
	waited   int
	sent     time.Time
	received time.Time
}

// unfinished reports whether the answer said the key was not finished.
func (w waitAnswer) unfinished() bool {
	return w.state == "processing" || w.state == "needs_reconciliation"
}

// submission is one logical submission: a client's key and its payload, and
// everything the soak saw of it.
type submission struct {
	client string
	key    string
	lead   *leadFields
	// page: sent by a web page, with the publishable key and its origin.
	page bool
	// supersedes is the key this one amends (""); root is the first
	// submission of its amendment chain (itself for none) and depth its
	// place along it (0 for the first).
	supersedes string
	root       *submission
	depth      int

	mu sync.Mutex
	// accepted: a 202 or a final response came back.
	accepted bool
	answers  []answer
	// blind are requests of the key that got no answer the soak could
	// read (dropped, failed, or a 503), which may still have been applied.
	blind []answer
	// polled are the lead ids GET /v1/operations named.
	polled []string
	// waits are the answers to its requests with Prefer: wait.
	waits []waitAnswer
	// acceptedAt is when its first 202 or final answer arrived.
	acceptedAt time.Time
	// amended: an amendment of it was sent. erasing: its email was chosen
	// for an erasure; the two exclude each other, so that an erasure
	// touches no amendment chain.
	amended, erasing bool
	// erasedAt is when the soak's erasure of its email returned (zero
	// until then); erasedVia says how ("admin" or "cli").
	erasedAt  time.Time
	erasedVia string
}

func (s *submission) id() string { return s.client + "/" + s.key }

func (s *submission) record(a answer, blind bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if blind {
		s.blind = append(s.blind, a)
		return
	}
	s.answers = append(s.answers, a)
	switch a.status {
	case http.StatusAccepted, http.StatusCreated, http.StatusUnprocessableEntity, http.StatusBadGateway:
		if !s.accepted {
			s.acceptedAt = a.received
		}
		s.accepted = true
	}
}

// finalSeen reports whether a final answer of the key came back.
func (s *submission) finalSeen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.answers {
		if a.status != http.StatusAccepted {
			return true
		}
	}
	return false
}

// chainRoot is the first submission of the submission's amendment chain.
func (s *submission) chainRoot() *submission {
	if s.root == nil {
		return s
	}
	return s.root
}

// leadFields is a lead's members, encoded in any order and spacing.
type leadFields struct {
	members []member
}

type member struct {
	name  string
	value any
}

var sources = []string{"website", "linkedin", "referral", "ads", "event"}

func newLead(rng *rand.Rand, n int64) *leadFields {
	domains := []string{"example.com", "acme.test", "globex.example", "quiet.nodata"}
	l := &leadFields{members: []member{
		{"email", fmt.Sprintf("lead%d@%s", n, domains[rng.IntN(len(domains))])},
		{"source", sources[rng.IntN(len(sources))]},
		{"name", fmt.Sprintf("Lead %d", n)},
	}}
	if rng.IntN(2) == 0 {
		l.members = append(l.members, member{"company", fmt.Sprintf("Company %d", n%97)})
	}
	if rng.IntN(3) == 0 {
		l.members = append(l.members, member{"phone", fmt.Sprintf("+44 20 7946 %04d", n%10000)})
	}
	if rng.IntN(3) == 0 {
		l.members = append(l.members, member{"message", "Please call me back about order " + strconv.FormatInt(n, 10)})
	}
	if rng.IntN(4) == 0 {
		l.members = append(l.members, member{"utm", map[string]string{"campaign": "soak", "medium": "chaos"}})
	}
	if rng.IntN(2) == 0 {
		l.members = append(l.members, member{"consent", rng.IntN(2) == 0})
	}
	return l
}

// changed returns the same lead with another email: another payload.
func (l *leadFields) changed() *leadFields {
	c := &leadFields{members: append([]member(nil), l.members...)}
	c.members[0] = member{"email", "changed-" + l.members[0].value.(string)}
	return c
}

// amended returns the lead as the visitor changed it: the same email,
// another name and message.
func (l *leadFields) amended(n int64) *leadFields {
	c := &leadFields{}
	for _, m := range l.members {
		if m.name != "name" && m.name != "message" {
			c.members = append(c.members, m)
		}
	}
	c.members = append(c.members, member{"name", fmt.Sprintf("Lead %d, amended", n)},
		member{"message", fmt.Sprintf("Changed my mind: amendment %d", n)})
	return c
}

// email is the lead's email.
func (l *leadFields) email() string { return l.members[0].value.(string) }

// encode writes the lead as JSON; with rng, in a shuffled order with white
// space: the same payload, the same fingerprint.
func (l *leadFields) encode(rng *rand.Rand) string {
	members := append([]member(nil), l.members...)
	space := ""
	if rng != nil {
		rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
		space = []string{" ", "\n", "\t", "  "}[rng.IntN(4)]
	}
	var b strings.Builder
	b.WriteString("{" + space)
	for i, m := range members {
		if i > 0 {
			b.WriteString("," + space)
		}
		name, _ := json.Marshal(m.name)
		value, _ := json.Marshal(m.value)
		b.Write(name)
		b.WriteString(space + ":" + space)
		b.Write(value)
	}
	b.WriteString(space + "}")
	return b.String()
}

// load is the clients' side of a phase.
type load struct {
	p       *phase
	s       *stack
	client  *http.Client
	seq     atomic.Int64
	mu      sync.Mutex
	subs    []*submission
	byID    map[string]*submission
	wg      sync.WaitGroup
	sem     chan struct{}
	endedAt atomic.Pointer[time.Time]
}

func newLoad(p *phase, s *stack) *load {
	return &load{
		p: p, s: s,
		client: &http.Client{
			// No request may take this long: REQUEST_TIMEOUT bounds the
			// api's database work to 3 s.
			Timeout:   30 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
		},
		byID: map[string]*submission{},
		sem:  make(chan struct{}, 128),
	}
}

// run starts new submissions at the phase's rate until ctx is done, then
// waits for those under way to get their answers.
func (l *load) run(ctx context.Context, rng *rand.Rand) {
	interval := time.Duration(float64(time.Second) / l.p.rate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		select {
		case l.sem <- struct{}{}:
		default:
			l.p.load.throttled.Add(1)
			continue
		}
		seed := rng.Uint64()
		l.wg.Go(func() {
			defer func() { <-l.sem }()
			l.submit(rand.New(rand.NewPCG(seed, 7)))
		})
	}
	now := time.Now()
	l.endedAt.Store(&now)
	l.wg.Wait()
}

func (l *load) register(client, key string, lead *leadFields) *submission {
	return l.add(&submission{client: client, key: key, lead: lead})
}

func (l *load) add(sub *submission) *submission {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.subs = append(l.subs, sub)
	l.byID[sub.id()] = sub
	l.p.load.submissions.Add(1)
	return sub
}

// submissions returns every logical submission so far.
func (l *load) submissions() []*submission {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*submission(nil), l.subs...)
}

// submit is one logical submission and what the client does with it.
func (l *load) submit(rng *rand.Rand) {
	n := l.seq.Add(1)
	key := fmt.Sprintf("soak-%d-%06d-%s", l.p.index, n, randomHex(3))
	tenants := l.p.tenants
	client := tenants[rng.IntN(len(tenants))]
	page := rng.Float64() < sharePage
	if page {
		client = pageClient
		l.p.load.pages.Add(1)
	}
	sub := l.add(&submission{client: client, key: key, lead: newLead(rng, n), page: page})

	copies := 1
	if rng.Float64() < shareDuplicate {
		copies = 2 + rng.IntN(2)
		l.p.load.duplicates.Add(int64(copies - 1))
	}
	var wg sync.WaitGroup
	for c := range copies {
		seed := rng.Uint64()
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(c)))
			var enc *rand.Rand
			if c > 0 {
				enc = r
			}
			l.sendUntilAnswered(sub, sub.lead.encode(enc), r, c > 0)
		})
	}
	wg.Wait()

	if rng.Float64() < shareSharedKey && !page {
		// The other tenant, the same key, its own payload: a submission of
		// its own.
		other := tenants[(indexOf(tenants, client)+1)%len(tenants)]
		twin := l.register(other, key, newLead(rng, n+1_000_000))
		l.p.load.sharedKeys.Add(1)
		l.sendUntilAnswered(twin, twin.lead.encode(nil), rng, false)
	}
	if rng.Float64() < sharePoll {
		l.poll(sub, rng)
	}
	if rng.Float64() < shareChanged {
		sleep(context.Background(), between(rng, 0, 2*time.Second))
		l.sendChanged(sub, rng)
	}
	if rng.Float64() < shareRetry {
		sleep(context.Background(), between(rng, 0, 5*time.Second))
		var enc *rand.Rand
		if rng.IntN(2) == 0 {
			enc = rng
		}
		l.sendUntilAnswered(sub, sub.lead.encode(enc), rng, true)
	}
	if rng.Float64() < shareAmend {
		l.amend(sub, n, rng)
	}
}

// amend sends an amendment of an accepted submission under a new key with
// Supersedes, as a visitor who changed the enquiry before its outcome was
// known; now and then the amendment is amended in turn.
func (l *load) amend(sub *submission, n int64, rng *rand.Rand) {
	for depth := 1; depth <= 2; depth++ {
		sub.mu.Lock()
		ok := sub.accepted && !sub.erasing && !sub.amended
		if ok {
			sub.amended = true
		}
		sub.mu.Unlock()
		if !ok {
			return
		}
		sleep(context.Background(), between(rng, 0, 2*time.Second))
		root := sub.chainRoot()
		key := fmt.Sprintf("soak-%d-%06d-a%d-%s", l.p.index, n, depth, randomHex(3))
		next := l.add(&submission{
			client: sub.client, key: key, lead: sub.lead.amended(n*10 + int64(depth)), page: sub.page,
			supersedes: sub.key, root: root, depth: sub.depth + 1,
		})
		l.p.load.amendments.Add(1)
		l.sendUntilAnswered(next, next.lead.encode(nil), rng, false)
		if rng.Float64() < sharePoll {
			l.poll(next, rng)
		}
		if rng.Float64() >= shareAmendAgain {
			return
		}
		sub = next
	}
}

// deadline is how long a submission keeps trying after the load ended.
const answerDeadline = 2 * time.Minute

// sendUntilAnswered sends body under the submission's key until an answer
// other than a 503 comes back: after a dropped connection or a 503, the
// client retries, as the contract asks.
func (l *load) sendUntilAnswered(sub *submission, body string, rng *rand.Rand, retry bool) {
	for attempt := 0; ; attempt++ {
		if retry || attempt > 0 {
			l.p.load.retries.Add(1)
		}
		if end := l.endedAt.Load(); end != nil && time.Since(*end) > answerDeadline {
			l.p.violate("answered", "%s: no answer within %s of the end of the load", sub.id(), answerDeadline)
			return
		}
		drop := rng.Float64() < shareDropRequest
		wait := 0
		if !drop && rng.Float64() < shareWaitPost {
			wait = 1 + rng.IntN(4)
			l.p.load.waitPosts.Add(1)
		}
		a, err := l.post(sub, body, drop, wait, rng)
		switch {
		case err != nil:
			sub.record(a, true)
			if drop && errors.Is(err, context.Canceled) {
				l.p.load.dropped.Add(1)
			} else {
				l.p.load.transportErrors.Add(1)
				if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout") {
					l.p.violate("no request hangs", "%s: POST got no answer within %s", sub.id(), l.client.Timeout)
				}
			}
			sleep(context.Background(), between(rng, 50*time.Millisecond, 500*time.Millisecond))
		case a.status == http.StatusServiceUnavailable, a.status == http.StatusTooManyRequests:
			// Unavailable, or the page past its rate limit: nothing was
			// stored for a new key; the client tries again.
			sub.record(a, true)
			sleep(context.Background(), between(rng, 500*time.Millisecond, 2*time.Second))
		default:
			sub.record(a, false)
			l.checkAnswer(sub, a)
			if a.waited > 0 {
				l.recordWait(sub, http.MethodPost, a)
			}
			return
		}
	}
}

// recordWait keeps the answer to a POST with Prefer: wait, with the state
// it told.
func (l *load) recordWait(sub *submission, method string, a answer) {
	w := waitAnswer{method: method, status: a.status, waited: a.waited, sent: a.sent, received: a.received}
	var v struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(a.body, &v)
	w.state = v.Status
	if a.status != http.StatusAccepted {
		w.body = a.body
	}
	sub.mu.Lock()
	sub.waits = append(sub.waits, w)
	sub.mu.Unlock()
}

// sendChanged sends another payload under the key: it must be refused as a
// reuse, and change nothing.
func (l *load) sendChanged(sub *submission, rng *rand.Rand) {
	l.p.load.changed.Add(1)
	body := sub.lead.changed().encode(rng)
	for range 100 {
		a, err := l.post(sub, body, false, 0, rng)
		if err != nil || a.status == http.StatusServiceUnavailable || a.status == http.StatusTooManyRequests {
			sleep(context.Background(), between(rng, 500*time.Millisecond, 2*time.Second))
			continue
		}
		if a.status != http.StatusUnprocessableEntity || !bytes.Contains(a.body, []byte(`"code":"idempotency_key_reused"`)) {
			l.p.violate("changed payloads are refused", "%s: a changed payload got %d %s", sub.id(), a.status, a.body)
		}
		return
	}
}

// poll reads the operation of an accepted submission once, half the time
// with Prefer: wait.
func (l *load) poll(sub *submission, rng *rand.Rand) {
	sub.mu.Lock()
	accepted := sub.accepted
	sub.mu.Unlock()
	if !accepted {
		return
	}
	l.p.load.polls.Add(1)
	wait := 0
	if rng.Float64() < shareWaitPoll {
		wait = 1 + rng.IntN(3)
		l.p.load.waitPolls.Add(1)
	}
	g, err := l.get(sub, wait)
	if err != nil {
		l.p.load.transportErrors.Add(1)
		return
	}
	status, body := g.status, g.body
	l.p.load.status(status)
	l.checkPage(sub, g)
	switch status {
	case http.StatusOK:
		var op operation
		if err := json.Unmarshal(body, &op); err != nil {
			l.p.violate("answers are well formed", "%s: GET operation: %s", sub.id(), body)
			return
		}
		if op.Response != nil && sub.page {
			l.checkProjected(sub, "GET operation", op.Response.Body)
		}
		sub.mu.Lock()
		sub.polled = append(sub.polled, op.LeadID)
		if g.waited > 0 {
			w := waitAnswer{method: http.MethodGet, status: status, state: op.State, waited: g.waited, sent: g.sent, received: g.received}
			if op.Response != nil {
				w.status, w.body = op.Response.Status, op.Response.Body
			}
			sub.waits = append(sub.waits, w)
		}
		sub.mu.Unlock()
	case http.StatusServiceUnavailable:
	case http.StatusNotFound:
		l.p.violate("no accepted submission lost", "%s: accepted, and GET operation says 404", sub.id())
	default:
		l.p.violate("no 500s", "%s: GET operation: %d %s", sub.id(), status, body)
	}
}

// post sends one POST /v1/leads; drop cancels it after a random short
// moment, as a client that gives up; wait > 0 asks to wait that many
// seconds (Prefer: wait).
func (l *load) post(sub *submission, body string, drop bool, wait int, rng *rand.Rand) (answer, error) {
	ctx := context.Background()
	if drop {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		time.AfterFunc(between(rng, 0, 10*time.Millisecond), cancel)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.s.apiURL+"/v1/leads", strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	authorize(req, sub)
	req.Header.Set("Idempotency-Key", sub.key)
	req.Header.Set("Content-Type", "application/json")
	if sub.supersedes != "" {
		req.Header.Set("Supersedes", sub.supersedes)
	}
	if wait > 0 {
		req.Header.Set("Prefer", fmt.Sprintf("wait=%d", wait))
	}
	a := answer{sent: time.Now()}
	l.p.load.requests.Add(1)
	resp, err := l.client.Do(req)
	if err != nil {
		a.received = time.Now()
		return a, err
	}
	defer resp.Body.Close()
	a.body, err = io.ReadAll(resp.Body)
	a.received = time.Now()
	if err != nil {
		return a, err
	}
	a.status = resp.StatusCode
	a.replayed = resp.Header.Get("Idempotent-Replayed")
	a.allowOrigin = resp.Header.Get("Access-Control-Allow-Origin")
	a.waited = preferenceApplied(resp.Header)
	l.p.load.status(a.status)
	if a.status == http.StatusServiceUnavailable || a.status == http.StatusTooManyRequests {
		if a.status == http.StatusTooManyRequests {
			l.p.load.rateLimited.Add(1)
		} else {
			l.p.load.unavailable.Add(1)
		}
		if resp.Header.Get("Retry-After") == "" {
			l.p.violate("503s carry Retry-After", "%s: %d without Retry-After", sub.id(), a.status)
		}
	}
	var v struct {
		LeadID string `json:"lead_id"`
	}
	if json.Unmarshal(a.body, &v) == nil {
		a.leadID = v.LeadID
	}
	return a, nil
}

// get reads the submission's operation; wait > 0 asks to wait that many
// seconds (Prefer: wait). The answer's status and body are those of the
// GET itself.
func (l *load) get(sub *submission, wait int) (answer, error) {
	req, err := http.NewRequest(http.MethodGet, l.s.apiURL+"/v1/operations/"+sub.key, nil)
	if err != nil {
		panic(err)
	}
	authorize(req, sub)
	if wait > 0 {
		req.Header.Set("Prefer", fmt.Sprintf("wait=%d", wait))
	}
	a := answer{sent: time.Now()}
	resp, err := l.client.Do(req)
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	a.body, err = io.ReadAll(resp.Body)
	a.received = time.Now()
	a.status = resp.StatusCode
	a.allowOrigin = resp.Header.Get("Access-Control-Allow-Origin")
	a.waited = preferenceApplied(resp.Header)
	return a, err
}

// operation is the body of GET /v1/operations/{key}.
type operation struct {
	State    string `json:"state"`
	LeadID   string `json:"lead_id"`
	Response *struct {
		Status int             `json:"status"`
		Body   json.RawMessage `json:"body"`
	} `json:"response"`
}

// authorize sets the request's credentials: the client's token, or the
// page's publishable key with its origin.
func authorize(req *http.Request, sub *submission) {
	if sub.page {
		req.Header.Set("Authorization", "Bearer "+publishableKey)
		req.Header.Set("Origin", pageOrigin)
		return
	}
	req.Header.Set("Authorization", "Bearer "+tokenOf(sub.client))
}

// preferenceApplied is the wait of Preference-Applied, in seconds; 0 when
// there is none.
func preferenceApplied(h http.Header) int {
	v, ok := strings.CutPrefix(h.Get("Preference-Applied"), "wait=")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(v)
	return n
}

// checkAnswer checks what can be checked of an answer at once.
func (l *load) checkAnswer(sub *submission, a answer) {
	l.checkPage(sub, a)
	// A new key that finished while its POST waited is answered with its
	// final response, and is no replay.
	finalReplayed := a.replayed == "true" || (a.waited > 0 && a.replayed == "false")
	switch a.status {
	case http.StatusAccepted:
		if a.leadID == "" || a.replayed == "" {
			l.p.violate("answers are well formed", "%s: 202 %s replayed=%q", sub.id(), a.body, a.replayed)
		}
	case http.StatusCreated, http.StatusBadGateway:
		if !finalReplayed || a.leadID == "" {
			l.p.violate("answers are well formed", "%s: %d %s replayed=%q", sub.id(), a.status, a.body, a.replayed)
		}
		if sub.page {
			l.checkProjected(sub, "POST", a.body)
		}
	case http.StatusUnprocessableEntity:
		// A crm_rejected, or an erasure's end; this client never sends a
		// changed payload through here.
		if !finalReplayed || !(bytes.Contains(a.body, []byte(`"crm_rejected"`)) || bytes.Contains(a.body, []byte(`"code":"erased"`))) {
			l.p.violate("answers are well formed", "%s: 422 %s replayed=%q", sub.id(), a.body, a.replayed)
		}
		if sub.page {
			l.checkProjected(sub, "POST", a.body)
		}
	default:
		if a.status >= 500 {
			l.p.violate("no 500s", "%s: %d %s", sub.id(), a.status, a.body)
		} else {
			l.p.violate("answers are well formed", "%s: unexpected %d %s", sub.id(), a.status, a.body)
		}
	}
}

// checkPage checks that an answer to a page carries its CORS header.
func (l *load) checkPage(sub *submission, a answer) {
	if sub.page && a.status != 0 && a.allowOrigin != pageOrigin {
		l.p.violate(invProjected, "%s: a %d to the page with Access-Control-Allow-Origin %q", sub.id(), a.status, a.allowOrigin)
	}
}

// checkProjected checks that a final response a page sees is projected:
// its status, lead id and error, nothing of the CRM, the score or the
// warnings.
func (l *load) checkProjected(sub *submission, what string, body []byte) {
	if err := projected(body); err != nil {
		l.p.violate(invProjected, "%s: %s: %v: %s", sub.id(), what, err, body)
	}
}

// projected reports what a page's view of a final response holds that it
// should not.
func projected(body []byte) error {
	var v map[string]json.RawMessage
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("not a JSON object")
	}
	for name, value := range v {
		switch name {
		case "status", "lead_id":
		case "error":
			var e map[string]json.RawMessage
			if err := json.Unmarshal(value, &e); err != nil {
				return fmt.Errorf("error is not an object")
			}
			for n := range e {
				if n != "code" && n != "message" {
					return fmt.Errorf("error member %q", n)
				}
			}
		default:
			return fmt.Errorf("member %q", name)
		}
	}
	if _, ok := v["status"]; !ok {
		return fmt.Errorf("no status")
	}
	if _, ok := v["lead_id"]; !ok {
		return fmt.Errorf("no lead_id")
	}
	return nil
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}
