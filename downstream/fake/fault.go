package fake

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Target names one kind of request the fake serves; faults are scripted and
// requests counted per target. Its value is the name used by the control API.
type Target string

// The targets.
const (
	Enrichment Target = "enrichment" // POST /enrichment
	CRMUpsert  Target = "crm_upsert" // PUT /crm/leads/{external_ref}
	CRMCreate  Target = "crm_create" // POST /crm/leads
	CRMLookup  Target = "crm_lookup" // GET /crm/leads?external_ref=
	Notify     Target = "notify"     // POST /notify
	Callback   Target = "callback"   // POST /callbacks/{client}
)

// Targets returns every target, in a fixed order.
func Targets() []Target {
	return []Target{Enrichment, CRMUpsert, CRMCreate, CRMLookup, Notify, Callback}
}

// ParseTarget returns the target named s, or an error.
func ParseTarget(s string) (Target, error) {
	names := make([]string, 0, len(Targets()))
	for _, t := range Targets() {
		if string(t) == s {
			return t, nil
		}
		names = append(names, string(t))
	}
	return "", fmt.Errorf("unknown target %q (want one of %s)", s, strings.Join(names, ", "))
}

// Fault is how the fake misbehaves on one request. Its parts take effect in
// this order: Delay; then Hang, DropBeforeApply or Status, which end the
// request without applying it; otherwise the request is applied as usual
// (a record written, a notification or a callback recorded) and then
// HangAfterApply or DropAfterApply withhold the answer. The zero Fault is
// normal behaviour.
type Fault struct {
	// Status, when non-zero, answers with this status code instead of
	// processing the request.
	Status int
	// Body is the body sent with Status; by default {"error":"injected fault"}.
	Body string
	// RetryAfter, when set, is sent with Status as the Retry-After header
	// (seconds or an HTTP date, as given).
	RetryAfter string
	// Delay waits this long before anything else. It ends early when the
	// client gives up (the connection is then dropped) or the Server is
	// closed (the request then proceeds).
	Delay time.Duration
	// Hang never answers: the request blocks until the client gives up or
	// the Server is closed, then its connection is closed. Nothing is applied.
	Hang bool
	// HangAfterApply applies the request, then hangs like Hang: the
	// time-out whose request did take effect.
	HangAfterApply bool
	// DropBeforeApply closes the connection without applying or answering.
	DropBeforeApply bool
	// DropAfterApply applies the request, then closes the connection without
	// answering: the lost answer.
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
// restarted by SetChaos: a target's requests, sent one after the other, meet
// the same faults every run.
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

func (c Chaos) validate() error {
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

func (c Chaos) isZero() bool {
	return c.FailRate == 0 && c.HangRate == 0 && c.DropRate == 0 && c.DelayMax == 0
}

// ParseChaos parses the FAKE_CHAOS form of a Chaos: comma-separated key=value
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
	if err := c.validate(); err != nil {
		return Chaos{}, err
	}
	return c, nil
}

// faults is the misbehaviour planned for one target. The Server's mutex
// guards it.
type faults struct {
	script []Fault
	chaos  Chaos
	rng    *rand.Rand
}

// next returns the fault for the target's next request: the first scripted
// one, else a draw from the chaos mix.
func (fs *faults) next() Fault {
	if len(fs.script) > 0 {
		f := fs.script[0]
		fs.script = fs.script[1:]
		return f
	}
	if fs.rng == nil {
		return Fault{}
	}
	// The same number of draws for every request keeps the sequence of
	// faults a function of the seed and the request count alone.
	c := fs.chaos
	kind, after := fs.rng.Float64(), fs.rng.IntN(2) == 1
	var delay time.Duration
	if c.DelayMax > 0 {
		delay = time.Duration(fs.rng.Int64N(int64(c.DelayMax)))
	}
	f := Fault{Delay: delay}
	switch {
	case kind < c.FailRate:
		f.Status, f.RetryAfter = c.FailStatus, c.RetryAfter
		if f.Status == 0 {
			f.Status = 503
		}
	case kind < c.FailRate+c.HangRate:
		f.Hang, f.HangAfterApply = !after, after
	case kind < c.FailRate+c.HangRate+c.DropRate:
		f.DropBeforeApply, f.DropAfterApply = !after, after
	}
	return f
}
