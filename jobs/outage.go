package jobs

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// Defaults of Outages.
const (
	DefaultProbeInterval  = 30 * time.Second
	DefaultDeliveryMaxAge = 72 * time.Hour
	// DefaultOutageFailures is how many transient failures in a row, of at
	// least two leads, make a downstream down: a downstream failing a third
	// of its calls at random goes that long without a success once in some
	// ten thousand runs, and then the next probe, a PROBE_INTERVAL later,
	// ends the outage it was taken for.
	DefaultOutageFailures = 8
)

// Outages configure how the worker treats each downstream as state shared
// by every worker of the database (store.Admit, store.ReportFailure): its
// outages, its holds (a Retry-After for everyone) and its rate limit.
type Outages struct {
	// ProbeInterval is PROBE_INTERVAL: while a downstream is down, at most
	// one call a ProbeInterval probes it, across all workers. Default
	// DefaultProbeInterval.
	ProbeInterval time.Duration
	// DeliveryMaxAge is DELIVERY_MAX_AGE: a lead held back by a downstream
	// longer than this after its claim (or its latest re-open) ends as at
	// the end of its attempts. Default DefaultDeliveryMaxAge.
	DeliveryMaxAge time.Duration
	// Limits are the *_RATE_LIMIT, by downstream (store.DownstreamCRM...);
	// a downstream without one has no limit.
	Limits map[string]store.Limit
	// Failures is how many transient failures in a row, of at least two
	// leads, make a downstream down. Default DefaultOutageFailures.
	Failures int
}

func (o Outages) withDefaults() Outages {
	o.ProbeInterval = cmp.Or(o.ProbeInterval, DefaultProbeInterval)
	o.DeliveryMaxAge = cmp.Or(o.DeliveryMaxAge, DefaultDeliveryMaxAge)
	o.Failures = cmp.Or(o.Failures, DefaultOutageFailures)
	return o
}

// Bounds of the waits of a call.
const (
	// inProcessWait: a call the rate limit books this soon waits in the
	// job, holding its worker; one booked later snoozes until then.
	inProcessWait = 2 * time.Second
	// maxBookAhead: a call is booked in the rate limit at most this far
	// ahead (the enrichment, optional, at most optionalMaxWait).
	maxBookAhead    = 10 * time.Minute
	optionalMaxWait = time.Minute
	// downWait bounds the snooze of a lead waiting for a downstream that
	// is down: a recovery (or the periodic WakeWaiting) wakes it sooner.
	downWait = time.Hour
	// sharedWait is the least a lead waits after a failure that other
	// leads share (lead.HoldShared) before it calls again: by then the
	// outage, if it is one, is found, or a success has shown the failures
	// to be the leads' own.
	sharedWait = time.Second
	// stateFresh is how long a worker trusts what it last read of a
	// downstream's state: a call to a downstream known to be up, without a
	// rate limit, is made without asking the database.
	stateFresh = time.Second
	// leaseLife is how long a worker spends tokens it leased from a
	// downstream's rate limit (store.AdmitOpts.Lease) on its next calls,
	// without asking the database; what is left then is not used.
	leaseLife = time.Second
	// maxLease bounds the tokens one admission leases.
	maxLease = 64
)

// leaseOf is how many tokens an admission to a downstream with the limit l
// takes at once (when its bucket holds at least twice as many): a tenth of
// the burst, and at most what a tenth of leaseLife refills, so that the
// tokens a lease leaves unused are a small part of the budget.
func leaseOf(l store.Limit) int {
	if l.IsZero() {
		return 1
	}
	perLife := float64(l.N) * leaseLife.Seconds() / l.Per.Seconds() / 10
	return max(1, min(maxLease, l.N/10, int(perLife)))
}

// gate is a worker process's side of the downstreams' shared state: it
// admits calls (store.Admit), reports their results (store.Report*), and
// remembers for a moment what it last learnt of each downstream, so that a
// healthy downstream without a rate limit costs no statement per call.
type gate struct {
	store *store.Store
	o     Outages
	// dests have the destinations' rate limits; nil for none.
	dests *Destinations

	mu   sync.Mutex
	seen map[string]seenState
	// leased are the tokens of each downstream's rate limit this worker
	// leased and has not spent yet.
	leased map[string]lease
}

// lease is tokens of a rate limit taken ahead, to spend until expires.
type lease struct {
	tokens  int
	expires time.Time
}

// spendLeased spends a leased token of the downstream name, if one is left
// and the downstream was seen healthy a moment ago.
func (g *gate) spendLeased(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, l := g.seen[name], g.leased[name]
	if !s.healthy || time.Since(s.at) >= stateFresh || l.tokens <= 0 || !time.Now().Before(l.expires) {
		return false
	}
	l.tokens--
	g.leased[name] = l
	return true
}

// addLeased adds n tokens of the downstream name to those left to spend,
// all of them for leaseLife from now.
func (g *gate) addLeased(name string, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.leased[name]
	if !time.Now().Before(l.expires) {
		l.tokens = 0
	}
	g.leased[name] = lease{tokens: l.tokens + n, expires: time.Now().Add(leaseLife)}
}

// seenState is what a worker last learnt of a downstream.
type seenState struct {
	// healthy: up, holding nothing, and no failure in a row since its last
	// success (whose count a success must otherwise reset).
	healthy bool
	at      time.Time
}

func newGate(st *store.Store, o Outages, dests *Destinations) *gate {
	return &gate{store: st, o: o.withDefaults(), dests: dests, seen: map[string]seenState{}, leased: map[string]lease{}}
}

// limit is the rate limit of the downstream name: the environment's
// (ENRICHMENT_RATE_LIMIT), or its destination's.
func (g *gate) limit(name string) store.Limit {
	if l, ok := g.o.Limits[name]; ok || g.dests == nil {
		return l
	}
	return g.dests.Limit(name)
}

func (g *gate) note(name string, healthy bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seen[name] = seenState{healthy: healthy, at: time.Now()}
}

func (g *gate) healthy(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.seen[name]
	return ok && s.healthy && time.Since(s.at) < stateFresh
}

// admit decides whether a call to the downstream name may start now, and
// returns nil when it may (after waiting in the job for a call booked
// shortly ahead), or the hold that keeps it back: NotSent, with how long to
// wait. bookAt, when not zero, is when a call booked further ahead may
// start: the lead snoozes until then and keeps its booking.
func (g *gate) admit(ctx context.Context, name string) (f *lead.Failure, bookAt time.Time, err error) {
	limit := g.limit(name)
	if limit.IsZero() && g.healthy(name) || !limit.IsZero() && g.spendLeased(name) {
		return nil, time.Time{}, nil
	}
	ahead := maxBookAhead
	if name == store.DownstreamEnrichment {
		ahead = optionalMaxWait
	}
	adm, err := g.store.Admit(ctx, name, store.AdmitOpts{ProbeInterval: g.o.ProbeInterval, Limit: limit, MaxAhead: ahead, Lease: leaseOf(limit)})
	if err != nil {
		return nil, time.Time{}, err
	}
	g.note(name, adm.Clean)
	if adm.Go && adm.Wait == 0 && adm.Tokens > 1 {
		g.addLeased(name, adm.Tokens-1)
	}
	switch {
	case !adm.Go && adm.Hold == lead.HoldDown:
		// A recovery wakes the lead, and so does its turn to probe.
		return &lead.Failure{Transient: true, Hold: adm.Hold, NotSent: true, RetryAfter: downWait}, time.Time{}, nil
	case !adm.Go:
		return &lead.Failure{Transient: true, Hold: adm.Hold, NotSent: true, RetryAfter: adm.Wait}, time.Time{}, nil
	case adm.Wait > inProcessWait:
		return &lead.Failure{Transient: true, Hold: lead.HoldRate, NotSent: true, RetryAfter: adm.Wait}, time.Now().Add(adm.Wait), nil
	}
	return nil, time.Time{}, sleep(ctx, adm.Wait)
}

// report records the result of a call of leadID to the downstream name, and
// returns its failure as the lead's life sees it: a transient failure while
// the downstream is down, one that holds every call (a 429 or 503 with a
// Retry-After), or one of a lead that another lead's failure came after,
// with no success between (store.Reported.Shared), is the downstream's
// (Failure.Hold). recovered is true when this success ended
// an outage.
func (g *gate) report(ctx context.Context, name string, leadID uuid.UUID, f *lead.Failure, err error) (_ *lead.Failure, recovered bool, rerr error) {
	if f != nil && f.Stopping {
		return f, false, nil
	}
	if f != nil && f.Unauthorized {
		next, err := g.store.ReportUnauthorized(ctx, name, g.o.ProbeInterval)
		if err != nil {
			return f, false, err
		}
		g.note(name, false)
		held := *f
		held.Hold, held.RetryAfter = lead.HoldUnauthorized, max(next, downWait)
		return &held, false, nil
	}
	if f == nil || !f.Transient {
		// An answer, even a refusal: the downstream is up.
		if g.healthy(name) {
			return f, false, nil
		}
		rep, err := g.store.ReportSuccess(ctx, name)
		if err != nil {
			return f, false, err
		}
		g.note(name, true)
		return f, rep.Recovered, nil
	}
	var holdFor time.Duration
	if de, ok := destination.AsError(err); ok && de.HoldAll && de.RetryAfter > 0 {
		holdFor = de.RetryAfter
	}
	rep, rerr := g.store.ReportFailure(ctx, name, leadID, holdFor, store.ReportOpts{Failures: g.o.Failures, ProbeInterval: g.o.ProbeInterval})
	if rerr != nil {
		return f, false, rerr
	}
	g.note(name, false)
	held := *f
	switch {
	case holdFor > 0:
		held.Hold, held.RetryAfter = lead.HoldCalls, rep.Held
	case rep.Down:
		held.Hold, held.RetryAfter = lead.HoldDown, downWait
	case rep.Shared:
		// Another lead failed after this lead's first failure, and nothing
		// succeeded: not this lead's failure to spend an attempt on (nor
		// one of the few an optional step is given up after).
		held.Hold, held.RetryAfter = lead.HoldShared, max(f.RetryAfter, sharedWait)
	default:
		return f, false, nil
	}
	return &held, false, nil
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WakeWaitingArgs are the arguments of the periodic job that wakes the
// leads waiting for a downstream: all of them once it is up again (in
// order of arrival), and, while it is down, the oldest of them when a probe
// is due, which probes it.
type WakeWaitingArgs struct{}

// Kind is the job's kind in River.
func (WakeWaitingArgs) Kind() string { return "wake_waiting_leads" }

// InsertOpts puts the job on the maintenance queue, one round at a time.
func (WakeWaitingArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: 3, UniqueOpts: oneRoundAtATime}
}

// wakeBatch bounds the leads one statement wakes; a round wakes batches
// until none is left.
const wakeBatch = 1000

// WakeWaitingWorker runs WakeWaitingArgs.
type WakeWaitingWorker struct {
	river.WorkerDefaults[WakeWaitingArgs]
	cfg Config
}

// NewWakeWaitingWorker returns the worker.
func NewWakeWaitingWorker(cfg Config) *WakeWaitingWorker {
	return &WakeWaitingWorker{cfg: cfg.withDefaults()}
}

// Work wakes the waiting leads of every downstream.
func (w *WakeWaitingWorker) Work(ctx context.Context, _ *river.Job[WakeWaitingArgs]) error {
	names, err := w.cfg.Store.DownstreamNames(ctx)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := wakeWaiting(ctx, &w.cfg, name); err != nil {
			return err
		}
	}
	return nil
}

// wakeWaiting wakes the leads waiting for the downstream name, a batch at a
// time, until none is left (or, while it is down, the one that probes).
func wakeWaiting(ctx context.Context, cfg *Config, name string) error {
	total := 0
	for ctx.Err() == nil {
		n, err := cfg.Store.WakeWaiting(ctx, name, wakeBatch)
		if err != nil {
			return err
		}
		total += n
		if n < wakeBatch {
			break
		}
	}
	if total > 0 {
		cfg.Logger.InfoContext(ctx, "leads waiting for a destination woken", slog.String("destination", name), slog.Int("count", total))
	}
	return nil
}

// ParseRateLimit reads a *_RATE_LIMIT: N/s, N/m, N/h or N/<duration> (such
// as 100/10s), N at least 1.
func ParseRateLimit(s string) (store.Limit, error) {
	l, err := destination.ParseLimit(s)
	return store.Limit{N: l.N, Per: l.Per}, err
}
