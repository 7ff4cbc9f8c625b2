// Package standin is what every stand-in for a service leadintake calls
// shares: the ways it misbehaves on demand, and the control API that
// scripts them. The generic fake downstream (downstream/fake) and the
// vendors' stand-ins (HubSpot, Salesforce, Pipedrive, Slack, Teams) are
// built on it, so that a test or the soak makes any of them lose an answer,
// fail, throttle or hang the same way.
//
// A stand-in names its targets (one kind of request each: "upsert",
// "token", ...). Each target has a queue of scripted faults (Kit.Script),
// consumed one per request, and a persistent random mix (Kit.SetChaos) that
// applies once the queue is empty. A Fault answers with an error status
// (with the vendor's headers and body if given), waits, hangs until the
// client gives up, or drops the connection before or after applying the
// request: the last one is the classic lost answer, where the vendor has
// the record and the caller does not know it.
package standin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fault is how a stand-in misbehaves on one request. Its parts take effect
// in this order: Delay; then Hang, DropBeforeApply or Status, which end the
// request without applying it; otherwise the request is applied as usual
// and then HangAfterApply or DropAfterApply withhold the answer. The zero
// Fault is normal behaviour.
type Fault struct {
	// Status, when non-zero, answers with this status code instead of
	// processing the request.
	Status int
	// Body is the body sent with Status; by default {"error":"injected
	// fault"}.
	Body string
	// RetryAfter, when set, is sent with Status as the Retry-After header
	// (seconds or an HTTP date, as given).
	RetryAfter string
	// Header holds more headers sent with Status (a vendor's rate-limit
	// headers).
	Header map[string]string
	// Delay waits this long before anything else. It ends early when the
	// client gives up (the connection is then dropped) or the stand-in is
	// closed (the request then proceeds).
	Delay time.Duration
	// Hang never answers: the request blocks until the client gives up or
	// the stand-in is closed, then its connection is closed. Nothing is
	// applied.
	Hang bool
	// HangAfterApply applies the request, then hangs like Hang: the
	// time-out whose request did take effect.
	HangAfterApply bool
	// DropBeforeApply closes the connection without applying or
	// answering.
	DropBeforeApply bool
	// DropAfterApply applies the request, then closes the connection
	// without answering: the lost answer.
	DropAfterApply bool
}

// String names the fault for the logs; "" for normal behaviour.
func (f Fault) String() string {
	var parts []string
	if f.Delay > 0 {
		parts = append(parts, "delay "+f.Delay.String())
	}
	switch {
	case f.Hang:
		parts = append(parts, "hang")
	case f.DropBeforeApply:
		parts = append(parts, "drop_before_apply")
	case f.Status != 0:
		parts = append(parts, "status "+strconv.Itoa(f.Status))
	case f.HangAfterApply:
		parts = append(parts, "hang_after_apply")
	case f.DropAfterApply:
		parts = append(parts, "drop_after_apply")
	}
	return strings.Join(parts, ", ")
}

// Chaos is a persistent random mix of faults for one target, drawn for each
// request that no scripted fault is left for. Each request fails, hangs or
// is dropped with the given probabilities (they must add up to at most 1);
// hangs and drops come before or after applying the request with equal
// chance. The zero Chaos is normal behaviour.
//
// The draws come from a generator seeded with Seed and the target,
// restarted by SetChaos: a target's requests, sent one after the other,
// meet the same faults every run.
type Chaos struct {
	// FailRate is the share of requests answered with FailStatus.
	FailRate float64
	// FailStatus is the status of failed requests; default 503.
	FailStatus int
	// RetryAfter, when set, is sent with every failure as Retry-After.
	RetryAfter string
	// HangRate is the share of requests that hang (see Fault.Hang).
	HangRate float64
	// DropRate is the share of requests whose connection is dropped.
	DropRate float64
	// DelayMax, when positive, delays every request by a uniform random
	// duration below it.
	DelayMax time.Duration
	// Seed seeds the generator; zero is a seed like any other.
	Seed uint64
}

// Validate checks the rates, the delay and the status.
func (c Chaos) Validate() error {
	for _, r := range []float64{c.FailRate, c.HangRate, c.DropRate} {
		if r < 0 || r > 1 {
			return fmt.Errorf("chaos: rate %v is outside [0, 1]", r)
		}
	}
	if sum := c.FailRate + c.HangRate + c.DropRate; sum > 1 {
		return fmt.Errorf("chaos: the rates add up to %v, more than 1", sum)
	}
	if c.DelayMax < 0 {
		return errors.New("chaos: negative delay")
	}
	if c.FailStatus != 0 && (c.FailStatus < 100 || c.FailStatus > 599) {
		return fmt.Errorf("chaos: status %d is not an HTTP status", c.FailStatus)
	}
	return nil
}

// IsZero reports whether c is normal behaviour.
func (c Chaos) IsZero() bool {
	return c.FailRate == 0 && c.HangRate == 0 && c.DropRate == 0 && c.DelayMax == 0
}

// ParseChaos parses the text form of a Chaos: comma-separated key=value
// pairs among fail, hang, drop (rates), delay (DelayMax, a Go duration),
// status (FailStatus), retry_after and seed, e.g.
// "fail=0.1,hang=0.01,drop=0.05,delay=200ms". An empty string is the zero
// Chaos.
func ParseChaos(s string) (Chaos, error) {
	var c Chaos
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, val, ok := strings.Cut(item, "=")
		if !ok {
			return Chaos{}, fmt.Errorf("chaos: %q is not key=value", item)
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		var err error
		switch key {
		case "fail":
			c.FailRate, err = strconv.ParseFloat(val, 64)
		case "hang":
			c.HangRate, err = strconv.ParseFloat(val, 64)
		case "drop":
			c.DropRate, err = strconv.ParseFloat(val, 64)
		case "delay":
			c.DelayMax, err = time.ParseDuration(val)
		case "status":
			c.FailStatus, err = strconv.Atoi(val)
		case "retry_after":
			c.RetryAfter = val
		case "seed":
			c.Seed, err = strconv.ParseUint(val, 10, 64)
		default:
			return Chaos{}, fmt.Errorf("chaos: unknown key %q (want fail, hang, drop, delay, status, retry_after or seed)", key)
		}
		if err != nil {
			return Chaos{}, fmt.Errorf("chaos: %s: %w", key, err)
		}
	}
	if err := c.Validate(); err != nil {
		return Chaos{}, err
	}
	return c, nil
}

// queue is the misbehaviour planned for one target.
type queue struct {
	script []Fault
	chaos  Chaos
	rng    *rand.Rand
}

// next returns the fault for the target's next request: the first scripted
// one, else a draw from the chaos mix.
func (q *queue) next() Fault {
	if len(q.script) > 0 {
		f := q.script[0]
		q.script = q.script[1:]
		return f
	}
	if q.rng == nil {
		return Fault{}
	}
	// The same number of draws for every request keeps the sequence of
	// faults a function of the seed and the request count alone.
	c := q.chaos
	kind, after := q.rng.Float64(), q.rng.IntN(2) == 1
	var delay time.Duration
	if c.DelayMax > 0 {
		delay = time.Duration(q.rng.Int64N(int64(c.DelayMax)))
	}
	f := Fault{Delay: delay}
	switch {
	case kind < c.FailRate:
		f.Status, f.RetryAfter = c.FailStatus, c.RetryAfter
		if f.Status == 0 {
			f.Status = http.StatusServiceUnavailable
		}
	case kind < c.FailRate+c.HangRate:
		f.Hang, f.HangAfterApply = !after, after
	case kind < c.FailRate+c.HangRate+c.DropRate:
		f.DropBeforeApply, f.DropAfterApply = !after, after
	}
	return f
}

// Kit is a stand-in's misbehaviour: the faults planned for each of its
// targets, and what ends hung requests. Its methods are safe for
// concurrent use. The zero Kit is not usable: call New.
type Kit struct {
	targets   []string
	closeOnce sync.Once
	closed    chan struct{}

	mu     sync.Mutex
	queues map[string]*queue
}

// New returns a Kit for a stand-in with the given targets.
func New(targets ...string) *Kit {
	return &Kit{targets: targets, closed: make(chan struct{}), queues: map[string]*queue{}}
}

// Targets returns the stand-in's targets, in the order given to New.
func (k *Kit) Targets() []string { return append([]string(nil), k.targets...) }

// Known reports whether target is one of the stand-in's.
func (k *Kit) Known(target string) bool {
	for _, t := range k.targets {
		if t == target {
			return true
		}
	}
	return false
}

// Script queues faults for target: each of its next requests meets the
// next fault, before any chaos; then normal behaviour (or chaos) resumes.
func (k *Kit) Script(target string, faults ...Fault) {
	k.mu.Lock()
	defer k.mu.Unlock()
	q := k.queue(target)
	q.script = append(q.script, faults...)
}

// SetChaos sets target's random fault mix, replacing the previous one and
// restarting its generator from c.Seed and the target; the zero Chaos
// turns it off. It returns an error for a Chaos that Validate refuses.
func (k *Kit) SetChaos(target string, c Chaos) error {
	if err := c.Validate(); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	q := k.queue(target)
	q.chaos, q.rng = c, nil
	if !c.IsZero() {
		// The target is mixed in so that targets given one seed do not
		// fail in step.
		h := fnv.New64a()
		h.Write([]byte(target))
		q.rng = rand.New(rand.NewPCG(c.Seed, h.Sum64()))
	}
	return nil
}

// Next takes the fault for target's next request.
func (k *Kit) Next(target string) Fault {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.queue(target).next()
}

// Reset forgets every scripted fault and chaos mix.
func (k *Kit) Reset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.queues = map[string]*queue{}
}

func (k *Kit) queue(target string) *queue {
	q := k.queues[target]
	if q == nil {
		q = &queue{}
		k.queues[target] = q
	}
	return q
}

// Close ends every hung or delayed request at once, now and from now on;
// the stand-in otherwise keeps answering. It is safe to call more than
// once.
func (k *Kit) Close() { k.closeOnce.Do(func() { close(k.closed) }) }

// Answer is a stand-in's normal answer to a request.
type Answer struct {
	Status int
	Header http.Header
	// Body is written as is; JSON sets it from a value.
	Body []byte
}

// JSON is an answer of status with v encoded as its JSON body.
func JSON(status int, v any) Answer {
	b, _ := json.Marshal(v)
	return Answer{Status: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: append(b, '\n')}
}

// Before runs the part of f that comes before the request is applied: the
// delay, a hang, a drop or an error status. It returns true when the
// request goes on (to be applied, then After), and false when f answered
// it (status, 0 for no answer) or left it unanswered; outcome names what
// happened, for the logs.
func (k *Kit) Before(w http.ResponseWriter, r *http.Request, f Fault) (goOn bool, status int, outcome string) {
	if f.Delay > 0 && !k.sleep(r.Context(), f.Delay) {
		Drop(w)
		return false, 0, f.String() + " (client gave up)"
	}
	switch {
	case f.Hang:
		k.hang(w, r)
		return false, 0, f.String()
	case f.DropBeforeApply:
		Drop(w)
		return false, 0, f.String()
	case f.Status != 0:
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		for name, v := range f.Header {
			w.Header().Set(name, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.Status)
		if f.Body != "" {
			io.WriteString(w, f.Body)
		} else {
			io.WriteString(w, `{"error":"injected fault"}`+"\n")
		}
		return false, f.Status, f.String()
	}
	return true, 0, ""
}

// After writes a, the answer of a request that was applied, unless f
// withholds it (a hang or a drop after applying).
func (k *Kit) After(w http.ResponseWriter, r *http.Request, f Fault, a Answer) {
	switch {
	case f.HangAfterApply:
		k.hang(w, r)
	case f.DropAfterApply:
		Drop(w)
	default:
		for name, vs := range a.Header {
			w.Header()[name] = vs
		}
		w.WriteHeader(a.Status)
		w.Write(a.Body)
	}
}

// Serve wraps h, the normal behaviour of target, with its faults: h runs
// (applies the request) only when the fault lets it.
func (k *Kit) Serve(target string, h func(r *http.Request) Answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f := k.Next(target)
		if goOn, _, _ := k.Before(w, r, f); !goOn {
			return
		}
		k.After(w, r, f, h(r))
	}
}

func (k *Kit) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-k.closed:
		return true
	case <-ctx.Done():
		return false
	}
}

// hang holds the request until the client gives up or the Kit is closed,
// then closes the connection without an answer.
func (k *Kit) hang(w http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-k.closed:
	}
	Drop(w)
}

// Drop closes the request's connection without answering. HTTP/1.x
// connections are hijacked and closed; elsewhere (HTTP/2) the handler
// aborts, which resets the stream.
func Drop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
