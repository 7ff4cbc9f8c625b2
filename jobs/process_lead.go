package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/leadintake/leadintake/downstream"
	"github.com/leadintake/leadintake/intake"
)

// CRM modes.
const (
	// CRMModeUpsert puts the lead under its external reference: safe to
	// repeat.
	CRMModeUpsert = "upsert"
	// CRMModeCreate posts the lead, and looks the reference up before it
	// ever posts again after an uncertain outcome.
	CRMModeCreate = "create"
)

// optionalStepAttempts is how many transient failures the enrichment or the
// notification may have before it is given up with a warning. Their
// failures never fail a lead, and never hold it back for long: a
// Retry-After longer than optionalStepMaxWait gives the step up at once.
const (
	optionalStepAttempts = 3
	optionalStepMaxWait  = time.Minute
)

// DefaultKeyRetention is the retention of a finished key when
// Config.KeyRetention is zero.
const DefaultKeyRetention = 7 * 24 * time.Hour

// withDefaults fills in what cfg leaves unset.
func (cfg Config) withDefaults() Config {
	if cfg.CRMMode == "" {
		cfg.CRMMode = CRMModeUpsert
	}
	if cfg.KeyRetention <= 0 {
		cfg.KeyRetention = DefaultKeyRetention
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// Downstream is what ProcessLead needs of the outside world:
// *downstream.Client, or downstream.Simulator.
type Downstream interface {
	Enrich(ctx context.Context, req *downstream.EnrichmentRequest) (*downstream.Enrichment, error)
	UpsertLead(ctx context.Context, lead *downstream.CRMLead) (string, error)
	CreateLead(ctx context.Context, lead *downstream.CRMLead) (string, error)
	LookupLead(ctx context.Context, externalRef string) (string, bool, error)
	Notify(ctx context.Context, n *downstream.Notification) error
}

// Config is what the lead jobs share.
type Config struct {
	Pool       *pgxpool.Pool
	Downstream Downstream
	// CRMMode is CRMModeUpsert (default) or CRMModeCreate.
	CRMMode string
	// KeyRetention is how long a finished key is kept. Default
	// DefaultKeyRetention.
	KeyRetention time.Duration
	Logger       *slog.Logger
	// Metrics may be nil.
	Metrics *Metrics
}

// ProcessLeadWorker takes one lead through enrichment, scoring, the CRM and
// the notification. Each step's result is saved before the next step starts,
// so a retried job resumes where the last attempt stopped; the final response
// is recorded in one transaction with the job's completion.
type ProcessLeadWorker struct {
	river.WorkerDefaults[ProcessLeadArgs]

	cfg      Config
	leads    *leadStore
	finisher *finisher
	// retryAt holds, per job id, the delay a downstream asked for with
	// Retry-After, from Work to NextRetry of the same attempt.
	retryAt sync.Map
}

// NewProcessLeadWorker returns the worker.
func NewProcessLeadWorker(cfg Config) *ProcessLeadWorker {
	cfg = cfg.withDefaults()
	return &ProcessLeadWorker{
		cfg:      cfg,
		leads:    &leadStore{pool: cfg.Pool},
		finisher: &finisher{pool: cfg.Pool, retention: cfg.KeyRetention},
	}
}

// NextRetry honours a downstream's Retry-After (capped at an hour, even past
// the retry policy's maximum); otherwise the client's retry policy applies.
func (w *ProcessLeadWorker) NextRetry(job *river.Job[ProcessLeadArgs]) time.Time {
	if at, ok := w.retryAt.LoadAndDelete(job.ID); ok {
		return at.(time.Time)
	}
	return time.Time{}
}

// Work processes the lead.
func (w *ProcessLeadWorker) Work(ctx context.Context, job *river.Job[ProcessLeadArgs]) error {
	l, err := w.leads.load(ctx, w.cfg.Pool, job.Args.LeadID)
	if errors.Is(err, pgx.ErrNoRows) {
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	r := &leadRun{w: w, job: job, lead: l, last: job.Attempt >= job.MaxAttempts}
	if l.KeyState == nil || *l.KeyState != intake.StateProcessing {
		// An earlier run finished it (and this job's completion was lost),
		// or the key expired and was deleted: nothing is left to do.
		return r.completeOnly(ctx)
	}
	return r.process(ctx)
}

// leadRun is one attempt at one lead.
type leadRun struct {
	w    *ProcessLeadWorker
	job  *river.Job[ProcessLeadArgs]
	lead *lead
	last bool
}

// errCRMRejected carries the CRM's final refusal.
type errCRMRejected struct{ err *downstream.Error }

func (e *errCRMRejected) Error() string { return "crm rejected the lead: " + e.err.Error() }

func (r *leadRun) process(ctx context.Context) error {
	l := r.lead
	if err := r.enrich(ctx); err != nil {
		return r.fail(ctx, err)
	}
	score, tier := Score(&l.Submission, l.enriched())
	if err := r.crm(ctx, score, tier); err != nil {
		return r.fail(ctx, err)
	}
	if err := r.notify(ctx, score, tier); err != nil {
		return r.fail(ctx, err)
	}
	v, err := completedVerdict(l, score, tier)
	if err != nil {
		return err
	}
	return r.finish(ctx, v)
}

// enrich runs the enrichment step unless an earlier attempt did. Its
// failures end in a warning, after a few transient ones.
func (r *leadRun) enrich(ctx context.Context) error {
	l := r.lead
	if l.EnrichmentOutcome != nil {
		return nil
	}
	data, err := r.w.cfg.Downstream.Enrich(ctx, &downstream.EnrichmentRequest{
		LeadID: l.ID.String(), Email: l.Submission.Email, Company: l.Submission.Company, Website: l.Submission.Website,
	})
	switch {
	case err == nil && data != nil:
		return r.w.leads.saveEnrichment(ctx, l, enrichData, data)
	case err == nil:
		return r.w.leads.saveEnrichment(ctx, l, enrichNoData, nil)
	case stopping(ctx):
		return err
	case retryOptionalStep(err, r.last, l.EnrichmentFailures):
		if cerr := r.w.leads.countFailure(ctx, l, "enrichment_failures"); cerr != nil {
			return cerr
		}
		return err
	default:
		r.w.cfg.Logger.WarnContext(ctx, "enrichment given up", r.attrs(slog.String("error", err.Error()))...)
		return r.w.leads.saveEnrichment(ctx, l, enrichUnavailable, nil)
	}
}

// retryOptionalStep reports whether an optional step's failure is worth
// another attempt: transient, not the job's last attempt, within the step's
// budget, and not asking for a wait longer than optionalStepMaxWait.
func retryOptionalStep(err error, last bool, failures int) bool {
	if !downstream.IsTransient(err) || last || failures+1 >= optionalStepAttempts {
		return false
	}
	de, ok := downstream.AsError(err)
	return !ok || de.RetryAfter <= optionalStepMaxWait
}

// crm runs the CRM step unless an earlier attempt got the CRM's acceptance.
func (r *leadRun) crm(ctx context.Context, score int, tier string) error {
	l := r.lead
	if l.CRMState == crmAccepted {
		return nil
	}
	rec := crmRecord(l, score, tier)
	ds := r.w.cfg.Downstream
	if r.w.cfg.CRMMode == CRMModeUpsert {
		id, err := ds.UpsertLead(ctx, rec)
		if err != nil {
			return crmError(err)
		}
		return r.w.leads.setCRM(ctx, l, crmAccepted, &id)
	}

	// Create mode: never post while an earlier post may have been applied,
	// by this lead or by an earlier one under the same reference (a retry
	// after the key expired).
	if l.CRMState == crmUncertain || (l.CRMState == crmPending && l.RefUsedBefore) {
		id, found, err := ds.LookupLead(ctx, l.ExternalRef)
		if err != nil {
			return transientOnly(err)
		}
		if found {
			return r.w.leads.setCRM(ctx, l, crmAccepted, &id)
		}
		// A definite 404: nothing was applied. The state stays uncertain
		// while the new post is in flight.
	} else if err := r.w.leads.setCRM(ctx, l, crmUncertain, nil); err != nil {
		// Written ahead of the post: a worker killed mid-call leaves the
		// lead uncertain, and the next attempt looks it up first.
		return err
	}
	id, err := ds.CreateLead(ctx, rec)
	if err == nil {
		return r.w.leads.setCRM(ctx, l, crmAccepted, &id)
	}
	if de, ok := downstream.AsError(err); ok && de.StatusCode == http.StatusConflict {
		// The CRM says the record exists: find it now.
		if id, found, lerr := ds.LookupLead(ctx, l.ExternalRef); lerr == nil && found {
			return r.w.leads.setCRM(ctx, l, crmAccepted, &id)
		}
		return err
	}
	if de, ok := downstream.AsError(err); ok && !de.Uncertain && !stopping(ctx) {
		// Certainly not applied (refused, or never sent).
		if serr := r.w.leads.setCRM(ctx, l, crmPending, nil); serr != nil {
			return serr
		}
	}
	return crmError(err)
}

// notify runs the notification step unless an earlier attempt did. Its
// failures end in a warning, after a few transient ones.
func (r *leadRun) notify(ctx context.Context, score int, tier string) error {
	l := r.lead
	if l.NotifyOutcome != nil {
		return nil
	}
	err := r.w.cfg.Downstream.Notify(ctx, &downstream.Notification{
		LeadID: l.ID.String(), ExternalRef: l.ExternalRef, Score: score, Tier: tier,
		Email: l.Submission.Email, Name: l.Submission.Name, Company: l.Submission.Company,
	})
	outcome := "sent"
	switch {
	case err == nil:
	case stopping(ctx):
		return err
	case retryOptionalStep(err, r.last, l.NotifyFailures):
		if cerr := r.w.leads.countFailure(ctx, l, "notify_failures"); cerr != nil {
			return cerr
		}
		return err
	default:
		r.w.cfg.Logger.WarnContext(ctx, "notification given up", r.attrs(slog.String("error", err.Error()))...)
		outcome = "failed"
	}
	// Saved by the finishing transaction, which follows at once.
	l.NotifyOutcome = &outcome
	return nil
}

// fail decides what a step's error means for the lead: a final refusal, a
// retry, or, on the last attempt, the end.
func (r *leadRun) fail(ctx context.Context, err error) error {
	var rejected *errCRMRejected
	switch {
	case stopping(ctx):
		// The worker is stopping: River makes the job available again,
		// without spending an attempt.
		return err
	case errors.As(err, &rejected):
		r.lead.CRMState = crmRejected
		v, verr := failedVerdict(r.lead, intake.CodeCRMRejected,
			fmt.Sprintf("the CRM refused the lead (HTTP %d)", rejected.err.StatusCode))
		if verr != nil {
			return verr
		}
		return r.finish(ctx, v)
	case !r.last:
		if de, ok := downstream.AsError(err); ok && de.RetryAfter > 0 {
			r.w.retryAt.Store(r.job.ID, time.Now().Add(de.RetryAfter))
		}
		r.w.cfg.Metrics.attempt("retry")
		r.w.cfg.Logger.InfoContext(ctx, "lead attempt failed; will retry", r.attrs(slog.String("error", err.Error()))...)
		return err
	case r.lead.CRMState == crmUncertain:
		return r.finish(ctx, reconciliationVerdict())
	default:
		v, verr := failedVerdict(r.lead, intake.CodeDownstreamUnavailable,
			fmt.Sprintf("the lead could not be delivered after %d attempts; retry with the same Idempotency-Key to try again", r.job.Attempt))
		if verr != nil {
			return verr
		}
		return r.finish(ctx, v)
	}
}

func (r *leadRun) finish(ctx context.Context, v *verdict) error {
	// Shown in River UI on the completed job.
	_ = river.RecordOutput(ctx, map[string]string{"outcome": v.outcome})
	score, _ := Score(&r.lead.Submission, r.lead.enriched())
	applied, err := r.w.finisher.finish(ctx, r.lead, v, r.completeJob)
	if err != nil {
		return err
	}
	if applied {
		r.w.cfg.Metrics.leadFinished(v.outcome)
		r.w.cfg.Logger.InfoContext(ctx, "lead finished", r.attrs(slog.String("outcome", v.outcome), slog.Int("score", score))...)
	}
	r.w.cfg.Metrics.attempt("finished")
	return nil
}

// completeOnly completes the job with nothing else to write.
func (r *leadRun) completeOnly(ctx context.Context) error {
	ctx, cancel := dbContext(ctx)
	defer cancel()
	tx, err := r.w.cfg.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := r.completeJob(ctx, tx); err != nil {
		return err
	}
	r.w.cfg.Metrics.attempt("nothing_to_do")
	return tx.Commit(ctx)
}

func (r *leadRun) completeJob(ctx context.Context, tx pgx.Tx) error {
	_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, r.job)
	return err
}

func (r *leadRun) attrs(extra ...any) []any {
	return append([]any{
		slog.String("lead_id", r.lead.ID.String()),
		slog.String("ref", r.lead.ExternalRef),
		slog.Int("attempt", r.job.Attempt),
		slog.Int64("job_id", r.job.ID),
	}, extra...)
}

// crmError turns a permanent CRM refusal into errCRMRejected; transient
// errors pass through.
func crmError(err error) error {
	if de, ok := downstream.AsError(err); ok && !de.Transient {
		return &errCRMRejected{err: de}
	}
	return err
}

// transientOnly makes any failure of a look-up transient: a look-up never
// decides the lead's fate, only whether it was created.
func transientOnly(err error) error {
	if de, ok := downstream.AsError(err); ok && !de.Transient {
		cp := *de
		cp.Transient = true
		return &cp
	}
	return err
}

// stopping reports whether ctx was cancelled (the worker is stopping), as
// opposed to the job's time-out, which is a failure of the attempt.
func stopping(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.Canceled)
}

func crmRecord(l *lead, score int, tier string) *downstream.CRMLead {
	s := &l.Submission
	return &downstream.CRMLead{
		ExternalRef: l.ExternalRef, LeadID: l.ID.String(),
		Email: s.Email, Source: s.Source, Name: s.Name, Company: s.Company, Phone: s.Phone,
		Website: s.Website, Message: s.Message, UTM: s.UTM, Consent: s.Consent,
		Score: score, Tier: tier, Enrichment: l.Enrichment,
	}
}
