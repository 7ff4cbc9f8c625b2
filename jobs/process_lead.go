package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/downstream"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

// Retentions when Config leaves them zero: a finished key is kept a week,
// a finished lead's personal data thirty days.
const (
	DefaultKeyRetention  = 7 * 24 * time.Hour
	DefaultLeadRetention = 30 * 24 * time.Hour
)

// Enricher is the enrichment service: *downstream.Client, or
// downstream.Simulator.
type Enricher interface {
	Enrich(ctx context.Context, req *downstream.EnrichmentRequest) (*destination.Enrichment, error)
}

// Config is what the jobs share.
type Config struct {
	Store *store.Store
	// Enrichment is the enrichment service.
	Enrichment Enricher
	// Destinations are the CRMs and notification channels in force.
	Destinations *Destinations
	// KeyRetention is how long a finished key is kept. Default
	// DefaultKeyRetention.
	KeyRetention time.Duration
	// LeadRetention is how long a finished lead keeps its personal data.
	// Default DefaultLeadRetention.
	LeadRetention time.Duration
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Metrics may be nil.
	Metrics *Metrics
	// Calls count the calls to the downstreams; may be nil.
	Calls *downstream.Metrics
	// Callers are the clients in force: the callback of each, and the
	// secret its deliveries are signed with.
	Callers *callers.Holder
	// Callbacks delivers the callbacks; CallbackMaxAge is how long a
	// delivery is retried (default a day).
	Callbacks      *downstream.Callbacks
	CallbackMaxAge time.Duration
	// CallbacksPerClient bounds the deliveries to one client's callback
	// that this process makes at once (default DefaultCallbacksPerClient):
	// a client's slow or hanging receiver holds at most that many of the
	// callback workers, and its other deliveries wait without holding one.
	CallbacksPerClient int
	// AwaitRecheck is how long an amendment waits, at most, before it
	// checks again whether the key it supersedes has finished (it is woken
	// at once when that key finishes). Default a minute.
	AwaitRecheck time.Duration
	// Outages configure the downstreams' shared state: outages, holds and
	// rate limits.
	Outages Outages
	// HashKey keys the hashes of requests (PII_HASH_KEY): the clean-up
	// keys the fingerprints of keys kept before they were keyed. Without
	// it, those are left as they are.
	HashKey lead.HashKey
	// CleanupBatch is the rows one statement of the clean-up deletes,
	// erases or keys (default 1000); CleanupBatches the statements of one
	// kind in one round (default 100). A round that leaves work goes on at
	// once, as a new round.
	CleanupBatch, CleanupBatches int
}

// withDefaults fills in what cfg leaves unset.
func (cfg Config) withDefaults() Config {
	if cfg.KeyRetention <= 0 {
		cfg.KeyRetention = DefaultKeyRetention
	}
	if cfg.LeadRetention <= 0 {
		cfg.LeadRetention = DefaultLeadRetention
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.AwaitRecheck <= 0 {
		cfg.AwaitRecheck = time.Minute
	}
	if cfg.CallbackMaxAge <= 0 {
		cfg.CallbackMaxAge = DefaultCallbackMaxAge
	}
	if cfg.Callbacks == nil {
		cfg.Callbacks = downstream.NewCallbacks(0, nil)
	}
	cfg.Outages = cfg.Outages.withDefaults()
	if cfg.CallbacksPerClient <= 0 {
		cfg.CallbacksPerClient = DefaultCallbacksPerClient
	}
	if cfg.CleanupBatch <= 0 {
		cfg.CleanupBatch = defaultCleanupBatch
	}
	if cfg.CleanupBatches <= 0 {
		cfg.CleanupBatches = defaultCleanupBatches
	}
	return cfg
}

// dbTimeout bounds the database writes of a run. They run on a context
// detached from the job's: a recovery point must be saved, and a lead
// finished, even when the job's time is up or the worker is stopping.
const dbTimeout = 10 * time.Second

func dbContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), dbTimeout)
}

// ProcessLeadWorker takes one lead through its life (lead.Next): each call's
// result is saved before the next call starts (an upsert's with the next
// save, the run's hold checked before the notification), so a retried job
// resumes where the last attempt stopped; the final response and the
// lead's last state are recorded in one transaction (store.Finish).
type ProcessLeadWorker struct {
	river.WorkerDefaults[ProcessLeadArgs]
	cfg Config
	// retryAt holds, per job, the time a downstream asked the next attempt
	// to wait for (Retry-After), from Work to NextRetry of the same
	// attempt: River asks NextRetry after Work returns, with nothing of
	// Work's error.
	retryAt retryTimes
	// gate admits the calls to the downstreams, and reports their results.
	gate *gate
}

// NewProcessLeadWorker returns the worker.
func NewProcessLeadWorker(cfg Config) *ProcessLeadWorker {
	cfg = cfg.withDefaults()
	return &ProcessLeadWorker{cfg: cfg, gate: newGate(cfg.Store, cfg.Outages, cfg.Destinations)}
}

// NextRetry honours a downstream's Retry-After (capped at an hour, even past
// the retry policy's maximum); otherwise the client's retry policy applies.
func (w *ProcessLeadWorker) NextRetry(job *river.Job[ProcessLeadArgs]) time.Time {
	return w.retryAt.take(job.ID)
}

// Work runs one attempt at the lead.
func (w *ProcessLeadWorker) Work(ctx context.Context, job *river.Job[ProcessLeadArgs]) error {
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("lead_id", job.Args.LeadID.String())) // the job's span (Traced)
	dctx, cancel := dbContext(ctx)
	l, err := w.cfg.Store.Lead(dctx, job.Args.LeadID)
	cancel()
	if errors.Is(err, store.ErrNotFound) {
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	r := &leadRun{w: w, job: job, lead: l}
	if l.Enrichment != nil {
		r.enrichment = &destination.Enrichment{}
		if err := json.Unmarshal(l.Enrichment, r.enrichment); err != nil {
			return fmt.Errorf("lead %s: enrichment: %w", l.ID, err)
		}
	}
	return r.loop(ctx)
}

// leadRun is one attempt at one lead.
type leadRun struct {
	w    *ProcessLeadWorker
	job  *river.Job[ProcessLeadArgs]
	lead *store.Lead
	// enrichment is the enrichment's answer; fresh is set until it is
	// saved.
	enrichment *destination.Enrichment
	fresh      bool
	// calls are the downstream calls made since the last save, for the
	// delivery log.
	calls []store.Call
	// bookedFor and bookedAt are a call booked ahead in a rate limit, to
	// be saved with the wait until then.
	bookedFor string
	bookedAt  time.Time
}

// loop runs the lead's actions until one ends the attempt. lead.Next
// decides each action and when the state is saved before it; a call goes
// to its downstream only when the downstream's shared state admits it.
func (r *leadRun) loop(ctx context.Context) (err error) {
	in := lead.Input{
		Key: r.lead.KeyState, LastAttempt: r.job.Attempt >= r.job.MaxAttempts,
		DeliveryExpired: time.Since(r.lead.DeliverySince) >= r.w.cfg.Outages.DeliveryMaxAge,
		Now:             time.Now().Unix(),
	}
	r.destinations(&in, r.lead.State)
	defer func() {
		// The calls no save took with it.
		if len(r.calls) > 0 {
			dctx, cancel := dbContext(ctx)
			defer cancel()
			err = errors.Join(err, r.w.cfg.Store.LogCalls(dctx, r.calls))
		}
	}()
	s := r.lead.State
	// lastErr is the last call's error; failed the last failure of the
	// attempt, kept through the calls that succeed after it (a channel's
	// failure, then the next channel's success): a retry returns it, so
	// that River retries the job rather than completing it.
	var lastErr, failed error
	for {
		act, next := lead.Next(s, in)
		if act.Kind.Calls() {
			held, err := r.admit(ctx, next, act)
			if err != nil {
				return err
			}
			if held != nil {
				in.Note(&lead.Result{Action: act, Failure: held})
				lastErr = nil
				continue
			}
		}
		if next != s {
			r.noteGivenUp(ctx, s, next, lastErr)
		}
		switch act.Save {
		case lead.SaveNone:
		case lead.SaveCheck:
			dctx, cancel := dbContext(ctx)
			err := r.w.cfg.Store.Holds(dctx, &r.lead.Run)
			cancel()
			if err != nil {
				return r.saveFailed(ctx, err)
			}
		default:
			owner, err := r.save(ctx, next, act)
			if err != nil {
				return r.saveFailed(ctx, err)
			}
			if act.Assign {
				next.Owner, next.OwnerDecided = owner, true
			}
			in.Held = true
		}
		if next.ChannelsSet != s.ChannelsSet {
			r.destinations(&in, next)
		}
		s = next
		switch act.Kind {
		case lead.ActSkip:
			return nil
		case lead.ActStop:
			// River makes the job available again, without spending an
			// attempt.
			return lastErr
		case lead.ActRetry:
			if act.RetryAfter > 0 {
				r.w.retryAt.set(r.job.ID, time.Now().Add(act.RetryAfter))
			}
			retry := cmp.Or(failed, errHeldBack)
			r.w.cfg.Logger.InfoContext(ctx, "lead attempt failed; will retry", r.attrs(slog.String("error", retry.Error()))...)
			return retry
		case lead.ActFinish, lead.ActReconcile:
			return r.finish(ctx, s, act, lastErr)
		case lead.ActAwaitSuperseded:
			// No attempt is spent; the superseded key's finish wakes the
			// job at once, and it looks again after AwaitRecheck whatever
			// happens.
			r.w.cfg.Logger.InfoContext(ctx, "amendment waits for the key it supersedes", r.attrs()...)
			return river.JobSnooze(r.w.cfg.AwaitRecheck)
		case lead.ActWait:
			// No attempt is spent. The wait ends at the lead's
			// DELIVERY_MAX_AGE at the latest, when it ends as at the end of
			// its attempts; a recovery of the downstream wakes it sooner.
			name, _, _ := r.destinationOf(s, act.Waits, act.Channel)
			wait := max(min(act.RetryAfter, time.Until(r.lead.DeliverySince.Add(r.w.cfg.Outages.DeliveryMaxAge))), time.Second)
			r.w.cfg.Logger.InfoContext(ctx, "lead waits for a downstream", r.attrs(slog.String("downstream", name), slog.Duration("wait", wait))...)
			return river.JobSnooze(wait)
		}
		var res *lead.Result
		res, lastErr = r.call(ctx, s, act)
		if lastErr != nil {
			failed = lastErr
		}
		in.Note(res)
	}
}

// errHeldBack is the error of an attempt to be retried whose calls were
// all held back or succeeded (its destinations' holds, not a call, ended
// it): a job's attempt that returns nil is completed.
var errHeldBack = errors.New("the lead's calls were held back; another attempt follows")

// destinations sets what in needs of the lead's destinations: its CRM's
// (its own, or its client's now) and its channels' capabilities.
func (r *leadRun) destinations(in *lead.Input, s lead.State) {
	dests := r.w.cfg.Destinations
	set := dests.Set()
	in.CRMDestination = set.CRMOf(r.lead.ClientID)
	name := cmp.Or(s.CRMDestination, in.CRMDestination)
	if crm, _, err := dests.CRM(name); err == nil {
		in.CRM = crm.Capabilities()
	}
	in.Channels = set.NotifyOf(r.lead.ClientID)
	names := in.Channels
	if s.ChannelsSet {
		names = nil
		for _, c := range s.Channels {
			names = append(names, c.Name)
		}
	}
	for i, n := range names[:min(len(names), lead.MaxChannels)] {
		in.ChannelCaps[i] = lead.ChannelCapabilities{}
		if ch, _, err := dests.Channel(n); err == nil {
			in.ChannelCaps[i] = ch.Capabilities()
		}
	}
}

// admit asks the gate whether the call of act may start, and returns nil
// when it may, or the hold that keeps it back (logged as not sent). A call
// this lead booked ahead in a rate limit starts at its time, without asking
// again.
func (r *leadRun) admit(ctx context.Context, s lead.State, act lead.Action) (*lead.Failure, error) {
	name, step, kind := r.destinationOf(s, act.Kind, act.Channel)
	if r.lead.BookedFor == name {
		r.lead.BookedFor = "" // used, whatever comes of it
		if wait := time.Until(r.lead.BookedAt); wait > inProcessWait {
			// Woken before its time: it snoozes again, keeping the booking.
			r.bookedFor, r.bookedAt = name, r.lead.BookedAt
			return &lead.Failure{Transient: true, Hold: lead.HoldRate, NotSent: true, RetryAfter: wait}, nil
		} else if err := sleep(ctx, wait); err != nil {
			return &lead.Failure{Transient: true, Uncertain: true, Stopping: true}, nil
		}
		return nil, nil
	}
	dctx, cancel := dbContext(ctx)
	held, bookAt, err := r.w.gate.admit(dctx, name)
	cancel()
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return &lead.Failure{Transient: true, Uncertain: true, Stopping: true}, nil
	}
	if err != nil {
		return nil, err
	}
	if held != nil {
		if !bookAt.IsZero() {
			r.bookedFor, r.bookedAt = name, bookAt
		}
		r.calls = append(r.calls, store.Call{
			LeadID: r.lead.ID, Step: step, Destination: name, Kind: kind, Attempt: r.job.Attempt, StartedAt: time.Now(), Outcome: store.CallNotSent,
		})
	}
	return held, nil
}

// save records the state before act (with a fresh enrichment answer, the
// calls made since the last save, and what the lead waits for), and, for
// an act that assigns, chooses the lead's owner and returns it.
func (r *leadRun) save(ctx context.Context, s lead.State, act lead.Action) (string, error) {
	p := store.SaveParams{State: s, Durable: act.Save == lead.SaveDurable, Calls: r.calls}
	if act.Assign {
		p.Assign = r.assignment(s)
	}
	if r.fresh {
		var err error
		if p.Enrichment, err = json.Marshal(r.enrichment); err != nil {
			return "", err
		}
	}
	if act.Kind == lead.ActWait {
		p.WaitingFor, _, _ = r.destinationOf(s, act.Waits, act.Channel)
		p.BookedFor, p.BookedAt = r.bookedFor, r.bookedAt
	}
	dctx, cancel := dbContext(ctx)
	defer cancel()
	if err := r.w.cfg.Store.Save(dctx, &r.lead.Run, p); err != nil {
		return "", err
	}
	r.fresh, r.calls = false, nil
	if p.Assign != nil {
		return p.Assign.Owner, nil
	}
	return "", nil
}

// saveFailed ends the attempt whose save failed: quietly when a later run
// holds the lead (this one must not act any more), with the error otherwise.
func (r *leadRun) saveFailed(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, store.ErrRunTaken):
		r.w.cfg.Logger.WarnContext(ctx, "a later run of the lead started; this one stops", r.attrs()...)
		return nil
	case errors.Is(err, store.ErrErased):
		r.w.cfg.Logger.InfoContext(ctx, "the lead's personal data was erased; its run stops", r.attrs()...)
		return nil
	}
	return err
}

// noteGivenUp logs an optional step given up.
func (r *leadRun) noteGivenUp(ctx context.Context, before, after lead.State, err error) {
	if before.Enrichment != lead.EnrichmentUnavailable && after.Enrichment == lead.EnrichmentUnavailable {
		r.w.cfg.Logger.WarnContext(ctx, "enrichment given up", r.attrs(slog.String("error", errString(err)))...)
	}
	for i, c := range after.Channels {
		if c.State == lead.ChannelFailed && before.Channels[i].State != lead.ChannelFailed {
			r.w.cfg.Logger.WarnContext(ctx, "notification given up", r.attrs(slog.String("destination", c.Name), slog.String("error", errString(err)))...)
		}
	}
}

// call runs the call of act, logs it (every request it made, in the
// delivery log), reports it to the destination's shared state, and
// classifies its result.
func (r *leadRun) call(ctx context.Context, s lead.State, act lead.Action) (*lead.Result, error) {
	l := r.lead
	res := &lead.Result{Action: act}
	name, step, kind := r.destinationOf(s, act.Kind, act.Channel)
	var (
		mu       sync.Mutex
		observed int
	)
	// A kind may report a call from a goroutine of its own (a token
	// fetched for several leads at once).
	ctx = destination.WithObserver(ctx, func(o destination.Observation) {
		mu.Lock()
		defer mu.Unlock()
		observed++
		r.calls = append(r.calls, store.Call{
			LeadID: l.ID, Step: o.Step, Destination: name, Kind: kind, Attempt: r.job.Attempt,
			StartedAt: o.StartedAt, Duration: o.Duration, Outcome: o.Outcome,
		})
	})
	start := time.Now()
	err := r.dispatch(ctx, s, act, res)
	mu.Lock()
	defer mu.Unlock()
	if observed == 0 {
		// No request went out (a destination not configured, a stand-in
		// that makes none): the call is logged as its result.
		outcome := strconv.Itoa(http.StatusOK)
		if err != nil {
			outcome = destination.OutcomeOf(0, err)
		}
		r.calls = append(r.calls, store.Call{
			LeadID: l.ID, Step: step, Destination: name, Kind: kind, Attempt: r.job.Attempt,
			StartedAt: start, Duration: time.Since(start), Outcome: outcome,
		})
	}
	r.w.cfg.Calls.Observe(name, targetOf(act.Kind), resultOf(res, err), time.Since(start))
	dctx, cancel := dbContext(ctx)
	defer cancel()
	f, recovered, rerr := r.w.gate.report(dctx, name, l.ID, failureOf(ctx, err), err)
	if rerr != nil {
		// The call's own result stands; the shared state learns of the
		// next one.
		r.w.cfg.Logger.WarnContext(ctx, "could not report a call to the destination's state", r.attrs(slog.String("error", rerr.Error()))...)
	}
	res.Failure = f
	if recovered {
		r.w.cfg.Logger.InfoContext(ctx, "destination recovered", slog.String("destination", name))
		if err := wakeWaiting(dctx, &r.w.cfg, name); err != nil {
			r.w.cfg.Logger.WarnContext(ctx, "could not wake the leads waiting for the destination; the periodic round will",
				slog.String("destination", name), slog.String("error", err.Error()))
		}
	}
	return res, err
}

// dispatch makes the call of act, and records its answer in res.
func (r *leadRun) dispatch(ctx context.Context, s lead.State, act lead.Action, res *lead.Result) error {
	l := r.lead
	if act.Kind == lead.ActEnrich {
		data, err := r.w.cfg.Enrichment.Enrich(ctx, &downstream.EnrichmentRequest{
			LeadID: l.ID.String(), Email: l.Lead.Email, Company: l.Lead.Company, Website: l.Lead.Website,
		})
		if err == nil && data != nil {
			r.enrichment, r.fresh, res.Found = data, true, true
		}
		return err
	}
	rec := r.record(s)
	if act.Kind.CRMStep() {
		crm, _, err := r.w.cfg.Destinations.CRM(cmp.Or(s.CRMDestination, r.w.cfg.Destinations.Set().CRMOf(l.ClientID)))
		if err != nil {
			return err
		}
		switch act.Kind {
		case lead.ActPrepare:
			res.Prepared, err = crm.Prepare(ctx, rec)
		case lead.ActUpsert, lead.ActCreate:
			res.CRMID, err = crm.Write(ctx, rec)
		case lead.ActLookup:
			res.CRMID, res.Found, err = crm.Lookup(ctx, rec)
		case lead.ActUpdate:
			res.CRMID, err = crm.Update(ctx, act.CRMID, rec)
		}
		return err
	}
	c := s.Channels[act.Channel]
	ch, _, err := r.w.cfg.Destinations.Channel(c.Name)
	if err != nil {
		return err
	}
	var receipt destination.Receipt
	switch act.Kind {
	case lead.ActNotify:
		receipt, err = ch.Send(ctx, rec, destination.Receipt(l.ChainReceipts[c.Name]))
	case lead.ActFind:
		receipt, res.Found, err = ch.Find(ctx, rec, time.Unix(c.Since, 0))
	default:
		return fmt.Errorf("no call for action %s", act.Kind)
	}
	res.Receipt = string(receipt)
	return err
}

// targetOf names the call of k in the metrics.
func targetOf(k lead.Kind) string {
	switch k {
	case lead.ActEnrich:
		return "enrichment"
	case lead.ActUpsert:
		return "crm_upsert"
	case lead.ActCreate:
		return "crm_create"
	case lead.ActLookup:
		return "crm_lookup"
	case lead.ActUpdate:
		return "crm_update"
	case lead.ActPrepare:
		return "crm_prepare"
	case lead.ActFind:
		return "notify_find"
	default:
		return "notify"
	}
}

// resultOf names a call's result in the metrics.
func resultOf(res *lead.Result, err error) string {
	switch c := destination.Classify(err); {
	case err == nil && !res.Found && (res.Action.Kind == lead.ActEnrich || res.Action.Kind == lead.ActLookup || res.Action.Kind == lead.ActFind):
		return "not_found"
	case err == nil:
		return "success"
	case c == destination.Unauthorized:
		return "unauthorized"
	case c == destination.Rejected:
		return "permanent"
	default:
		return "transient"
	}
}

// destinationOf names the destination a call of kind (and channel) goes
// to, its step in the delivery log, and the destination's kind.
func (r *leadRun) destinationOf(s lead.State, k lead.Kind, channel int) (name, step, kind string) {
	dests := r.w.cfg.Destinations
	switch {
	case k == lead.ActEnrich:
		return store.DownstreamEnrichment, "enrichment", "http"
	case k.CRMStep():
		name = cmp.Or(s.CRMDestination, dests.Set().CRMOf(r.lead.ClientID))
		step = "crm"
		switch k {
		case lead.ActLookup:
			step = "crm_lookup"
		case lead.ActPrepare:
			step = "crm_person"
		}
		if _, c, err := dests.CRM(name); err == nil {
			kind = c.Kind
		}
		return name, step, kind
	default:
		name, step = s.Channels[channel].Name, "notification"
		if k == lead.ActFind {
			step = "notification_lookup"
		}
		if _, c, err := dests.Channel(name); err == nil {
			kind = c.Kind
		}
		return name, step, kind
	}
}

// failureOf classifies a call's error for the lead's life.
func failureOf(ctx context.Context, err error) *lead.Failure {
	var missing *errNoDestination
	switch {
	case err == nil:
		return nil
	case errors.Is(ctx.Err(), context.Canceled):
		// The worker is stopping, as opposed to the job's time-out, which
		// is a failure of the attempt.
		return &lead.Failure{Transient: true, Uncertain: true, Stopping: true}
	case errors.As(err, &missing):
		// Not configured (any more): the lead waits for it, as for a
		// destination that is down, until it is again.
		return &lead.Failure{Transient: true, Hold: lead.HoldDown, NotSent: true, RetryAfter: downWait}
	}
	return destination.FailureOf(err)
}

// record is the lead as its destinations are given it.
func (r *leadRun) record(s lead.State) *destination.Record {
	l := &r.lead.Lead
	score, tier := lead.Score(l, s.Enriched())
	rec := &destination.Record{
		LeadID: r.lead.ID.String(), ExternalRef: r.lead.ExternalRef, Lead: l,
		Score: score, Tier: string(tier), Enrichment: r.enrichment, Amendment: s.Amendment,
		Amends: amendsOf(r.lead), ChainCRMID: s.ChainCRMID, DuplicateOf: duplicateOf(r.lead),
		Prepared: s.CRMPrepared,
	}
	if s.Owner != "" {
		// The owner as the clients file names it now (its ids may have
		// changed since it was chosen); by name alone when it is gone.
		rec.Owner = &destination.Owner{Name: s.Owner}
		if o := r.w.cfg.Destinations.Set().Owner(r.lead.ClientID, s.Owner); o != nil {
			rec.Owner = o.Destination()
		}
	}
	return rec
}

// assignment is the pool the lead's owner is chosen from (store.Assign):
// the pool of its client's first rule that matches it now; a pool without
// owners when none matches, or all are away (the lead gets no owner).
func (r *leadRun) assignment(s lead.State) *store.Assign {
	_, tier := lead.Score(&r.lead.Lead, s.Enriched())
	pool, ok := r.w.cfg.Destinations.Set().PoolFor(r.lead.ClientID, &callers.Facts{Lead: &r.lead.Lead, Tier: string(tier), Enrichment: r.enrichment})
	if !ok {
		return &store.Assign{}
	}
	return &store.Assign{Pool: pool.Key, Owners: pool.Owners}
}

// finish ends the lead as act says. The job's completion follows (River's
// completer, once Work returned): a job whose key is already finished does
// nothing when it runs again, so a crash between the two repeats nothing
// that acts.
func (r *leadRun) finish(ctx context.Context, s lead.State, act lead.Action, lastErr error) error {
	message := fmt.Sprintf("the lead could not be delivered after %d attempts; retry with the same Idempotency-Key to try again", r.job.Attempt)
	if act.Outcome == lead.OutcomeCRMRejected {
		message = "the CRM refused the lead"
		if de, ok := destination.AsError(lastErr); ok && (de.Status != 0 || de.Code != "") {
			message = "the CRM refused the lead (" + strings.TrimSpace(statusOf(de)+" "+de.Code) + ")"
		}
	}
	f := finishOf(r.lead, s, act, message, r.w.cfg.KeyRetention)
	// The finish is the lead's last save (lead.Next saves nothing before
	// it).
	f.Calls = r.calls
	if r.fresh {
		var err error
		if f.Enrichment, err = json.Marshal(r.enrichment); err != nil {
			return err
		}
	}
	// Shown in River UI on the completed job.
	_ = river.RecordOutput(ctx, map[string]string{"outcome": outcomeOf(act)})
	dctx, cancel := dbContext(ctx)
	defer cancel()
	done, err := r.w.cfg.Store.Finish(dctx, f)
	if err != nil {
		// The state is saved instead, as a recovery point: the next
		// attempt does not repeat a call whose result it holds (the
		// notification).
		if _, serr := r.save(ctx, s, lead.Action{Kind: act.Kind, Save: lead.SaveLazy}); serr != nil {
			r.w.cfg.Logger.WarnContext(ctx, "could not save the state of a lead whose finish failed", r.attrs(slog.String("error", serr.Error()))...)
		}
		return err
	}
	r.calls, r.fresh = nil, false
	if done.Applied {
		r.w.cfg.Metrics.leadFinished(outcomeOf(act))
		r.w.cfg.Logger.InfoContext(ctx, "lead finished", r.attrs(slog.String("outcome", outcomeOf(act)), slog.Int("score", f.Result.Score))...)
	}
	return nil
}

func (r *leadRun) attrs(extra ...any) []any {
	return append([]any{
		slog.String("lead_id", r.lead.ID.String()),
		slog.String("ref", r.lead.ExternalRef),
		slog.Int("attempt", r.job.Attempt),
		slog.Int64("job_id", r.job.ID),
	}, extra...)
}

// outcomeOf names how act ends a lead, in logs, metrics and River UI.
func outcomeOf(act lead.Action) string {
	if act.Kind == lead.ActReconcile {
		return string(lead.KeyNeedsReconciliation)
	}
	return string(act.Outcome)
}

// duplicateOf is the id of the earlier lead l may duplicate, empty for
// none.
func duplicateOf(l *store.Lead) string {
	if l.DuplicateOf == nil {
		return ""
	}
	return l.DuplicateOf.String()
}

// amendsOf is the id of the lead l amends, empty for none.
func amendsOf(l *store.Lead) string {
	if l.Amends == nil {
		return ""
	}
	return l.Amends.String()
}

// finishOf is how act ends l with state s: its key's final response (or
// reconciliation) and its result, fenced to the run that holds the lead.
// message explains a failure.
func finishOf(l *store.Lead, s lead.State, act lead.Action, message string, retention time.Duration) *store.Finish {
	score, tier := lead.Score(&l.Lead, s.Enriched())
	run := l.Run
	f := &store.Finish{
		LeadID: l.ID, ClientID: l.ClientID, Key: l.Key, From: l.KeyState.State, Run: &run, Retention: retention,
		Result: &store.Result{State: s, Score: score, Tier: tier},
	}
	id := l.ID.String()
	switch {
	case act.Kind == lead.ActReconcile:
		f.To = lead.KeyNeedsReconciliation
	case act.Outcome == lead.OutcomeCompleted:
		f.To = lead.KeyCompleted
		f.Response = response.NewCompleted(&response.Completed{
			LeadID: id, CRMID: s.CRMID, Score: score, Tier: string(tier),
			Notified: s.Notification == lead.NotificationSent, Warnings: s.Warnings(),
			Amends: amendsOf(l), Owner: s.Owner,
		})
	default:
		code := response.Code(act.Outcome)
		f.To, f.FailureCode = lead.KeyFailed, code
		f.Response = response.NewFailed(id, code, message)
	}
	return f
}

// statusOf names an answer's status in a final response: HTTP 422, or
// nothing when none came.
func statusOf(e *destination.Error) string {
	if e.Status == 0 {
		return ""
	}
	return "HTTP " + strconv.Itoa(e.Status)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// retryTimes holds the time of each job's next attempt that a downstream
// asked for, from Work to NextRetry.
type retryTimes struct {
	mu sync.Mutex
	at map[int64]time.Time
}

func (t *retryTimes) set(jobID int64, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at == nil {
		t.at = map[int64]time.Time{}
	}
	t.at[jobID] = at
}

// take returns and forgets the job's time; zero when there is none.
func (t *retryTimes) take(jobID int64) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	at := t.at[jobID]
	delete(t.at, jobID)
	return at
}
