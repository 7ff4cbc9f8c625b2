package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
)

// chaosStats counts what the chaos did.
type chaosStats struct {
	mu            sync.Mutex
	workerKills   int
	restartErrors []string
	dbCuts        int
	dbBlackholes  int
	dbOutage      time.Duration
	// dbDown are the api's database outages, for the record of waits.
	dbDown        []window
	downstreamMix []string // the chaos rounds, for the record
	outages       []*outage
	// vendors is the destinations phase's chaos of the vendors.
	vendors vendorStats
}

// window is a span of time.
type window struct{ from, to time.Time }

// dbDownDuring reports whether the api's database was cut or blackholed
// at some moment of [from, to].
func (s *chaosStats) dbDownDuring(from, to time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.dbDown {
		if !w.to.Before(from) && !w.from.After(to) {
			return true
		}
	}
	return false
}

// chaos runs the three kinds of chaos until ctx is done, then stops them:
// the proxy forwards again, both workers run, the fake behaves.
func (p *phase) chaos(ctx context.Context, s *stack, rng *rand.Rand) {
	var wg sync.WaitGroup
	seeds := [3]uint64{rng.Uint64(), rng.Uint64(), rng.Uint64()}
	wg.Go(func() { p.killWorkers(ctx, s, rand.New(rand.NewPCG(seeds[0], 1))) })
	wg.Go(func() { p.cutDatabase(ctx, s, rand.New(rand.NewPCG(seeds[1], 2))) })
	wg.Go(func() { p.breakDownstream(ctx, s, rand.New(rand.NewPCG(seeds[2], 3))) })
	wg.Wait()
}

// sleep waits d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// killWorkers kills one worker at a time with SIGKILL, at random intervals,
// and starts it again after a moment; a job it was running is rescued by
// the other worker after RESCUE_STUCK_AFTER (by River's rescuer, which runs
// on the leader every 30 s).
func (p *phase) killWorkers(ctx context.Context, s *stack, rng *rand.Rand) {
	for sleep(ctx, between(rng, 5*time.Second, 15*time.Second)) {
		i := rng.IntN(len(s.workers))
		w := s.workers[i]
		w.Kill()
		p.stats.mu.Lock()
		p.stats.workerKills++
		p.stats.mu.Unlock()
		p.out.f("  chaos: worker %d killed", i+1)
		sleep(ctx, between(rng, 500*time.Millisecond, 3*time.Second))
		p.restartWorker(s, i)
	}
}

func (p *phase) restartWorker(s *stack, i int) {
	w := s.workers[i]
	if err := w.Restart(); err != nil {
		p.stats.mu.Lock()
		p.stats.restartErrors = append(p.stats.restartErrors, err.Error())
		p.stats.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := w.Addr(ctx, "admin_addr"); err != nil {
		p.stats.mu.Lock()
		p.stats.restartErrors = append(p.stats.restartErrors, err.Error())
		p.stats.mu.Unlock()
	}
}

// cutDatabase takes the api's database away for a few seconds at random
// intervals: every connection closed and new ones refused (Cut), or
// nothing answering at all (Blackhole).
func (p *phase) cutDatabase(ctx context.Context, s *stack, rng *rand.Rand) {
	for sleep(ctx, between(rng, 8*time.Second, 20*time.Second)) {
		blackhole := rng.IntN(2) == 0
		kind := "cut"
		if blackhole {
			kind = "blackholed"
			s.proxy.Blackhole()
		} else {
			s.proxy.Cut()
		}
		d := between(rng, 2*time.Second, 5*time.Second)
		p.out.f("  chaos: the api's database %s for %s", kind, d.Round(100*time.Millisecond))
		start := time.Now()
		sleep(ctx, d)
		s.proxy.Restore()
		p.stats.mu.Lock()
		p.stats.dbDown = append(p.stats.dbDown, window{start, time.Now()})
		if blackhole {
			p.stats.dbBlackholes++
		} else {
			p.stats.dbCuts++
		}
		p.stats.dbOutage += time.Since(start)
		p.stats.mu.Unlock()
	}
	s.proxy.Restore()
}

// Failure statuses the downstream answers with, drawn per target and round:
// mostly transient; now and then a 400, a refusal for good.
var failStatuses = []int{503, 503, 500, 502, 429, 408, 400}

// breakDownstream gives every target a random mix of failures, hangs and
// drops, changed every few seconds, until ctx is done; then turns it off.
// While an outage holds (p.quiet), the CRM and the notification service
// are left to it.
func (p *phase) breakDownstream(ctx context.Context, s *stack, rng *rand.Rand) {
	defer func() {
		p.chaosMu.Lock()
		defer p.chaosMu.Unlock()
		for _, target := range fake.Targets() {
			_ = s.fake.SetChaos(target, fake.Chaos{})
		}
	}()
	for round := 0; ; round++ {
		p.chaosMu.Lock()
		quiet := p.quiet
		// Every fourth round is a storm on the CRM: most calls fail, so
		// that leads run out of attempts (with a low -attempts) and create
		// mode's look-ups cannot settle.
		// (The destinations phase's CRMs are the vendors': no storm on the
		// environment's, which no tenant of it uses.)
		storm := round%4 == 2 && !quiet && !p.vendors
		var mix []string
		for _, target := range fake.Targets() {
			c := fake.Chaos{
				FailRate:   0.08,
				FailStatus: failStatuses[rng.IntN(len(failStatuses))],
				HangRate:   0.03,
				DropRate:   0.06,
				DelayMax:   20 * time.Millisecond,
				Seed:       rng.Uint64(),
			}
			if storm && strings.HasPrefix(string(target), "crm") {
				c.FailRate, c.HangRate, c.DropRate = 0.45, 0.1, 0.2
				if c.FailStatus == 400 {
					c.FailStatus = 503
				}
			}
			if c.FailStatus == 400 && target == fake.Callback {
				// A receiver's 400 refuses the callback for good: its
				// delivery is given up at once, as the contract says. This
				// receiver refuses nothing for good, so that every finish
				// must reach it.
				c.FailStatus = 503
			}
			if c.FailStatus == 400 && !storm {
				// Refusals for good stay rare: they end the lead.
				c.FailRate = 0.02
				if round%3 != 0 {
					c.FailStatus = 503
				}
			}
			if (c.FailStatus == 503 || c.FailStatus == 429) && rng.IntN(3) == 0 {
				c.RetryAfter = "1"
			}
			if quiet && slices.Contains(quietTargets, target) {
				mix = append(mix, fmt.Sprintf("%s:outage", target))
				continue
			}
			if err := s.fake.SetChaos(target, c); err != nil {
				panic(err) // the rates above are valid
			}
			mix = append(mix, fmt.Sprintf("%s:%d", target, c.FailStatus))
		}
		p.chaosMu.Unlock()
		if storm {
			mix = append(mix, "storm")
			p.out.f("  chaos: a storm on the CRM for 10s")
		}
		p.stats.mu.Lock()
		p.stats.downstreamMix = append(p.stats.downstreamMix, strings.Join(mix, " "))
		p.stats.mu.Unlock()
		if !sleep(ctx, 10*time.Second) {
			return
		}
	}
}

// faultLog reads the fake downstream's log: one event per request, with
// the fault it met, so that faults can be counted by kind and target, and
// deliveries whose answer was withheld traced to their reference.
type faultLog struct {
	mu       sync.Mutex
	byKind   map[string]int
	byTarget map[string]int
	// unanswered counts, per notification reference, deliveries that were
	// applied and not answered (hang or drop after apply).
	unanswered map[string]int
	requests   int
}

func newFaultLog() *faultLog {
	return &faultLog{byKind: map[string]int{}, byTarget: map[string]int{}, unanswered: map[string]int{}}
}

func (l *faultLog) logger() *slog.Logger { return slog.New(faultHandler{l}) }

type faultHandler struct{ l *faultLog }

func (h faultHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h faultHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h faultHandler) WithGroup(string) slog.Handler            { return h }

func (h faultHandler) Handle(_ context.Context, r slog.Record) error {
	var method, path, ref, fault string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "method":
			method = a.Value.String()
		case "path":
			path = a.Value.String()
		case "external_ref":
			ref = a.Value.String()
		case "fault":
			fault = a.Value.String()
		}
		return true
	})
	kind := faultKind(fault)
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	h.l.requests++
	if kind == "" {
		return nil
	}
	h.l.byKind[kind]++
	h.l.byTarget[targetOf(method, path)]++
	if path == "/notify" && (kind == "hang_after_apply" || kind == "drop_after_apply") {
		h.l.unanswered[ref]++
	}
	return nil
}

// faultKind names the fault of a fake's log event ("" for none, or for a
// mere delay): "status 503", "hang", "drop_after_apply"...
func faultKind(fault string) string {
	if fault == "" {
		return ""
	}
	gaveUp := strings.HasSuffix(fault, " (client gave up)")
	var kind string
	for part := range strings.SplitSeq(strings.TrimSuffix(fault, " (client gave up)"), ", ") {
		if !strings.HasPrefix(part, "delay ") {
			kind = part
		}
	}
	switch {
	case kind != "":
		return kind
	case gaveUp:
		return "delay past the client's time-out"
	}
	return ""
}

func targetOf(method, path string) string {
	switch {
	case path == "/enrichment":
		return string(fake.Enrichment)
	case path == "/notify":
		return string(fake.Notify)
	case path == "/callbacks/{client}":
		return string(fake.Callback)
	case method == "PUT":
		return string(fake.CRMUpsert)
	case method == "POST":
		return string(fake.CRMCreate)
	default:
		return string(fake.CRMLookup)
	}
}

// snapshot returns the counts, sorted by name, for the report.
func (l *faultLog) snapshot() (byKind, byTarget []kv, requests int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return sorted(l.byKind), sorted(l.byTarget), l.requests
}

func (l *faultLog) unansweredDeliveries(ref string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unanswered[ref]
}

type kv struct {
	k string
	v int
}

func sorted(m map[string]int) []kv {
	out := make([]kv, 0, len(m))
	for k, v := range m {
		out = append(out, kv{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].k < out[j].k })
	return out
}
