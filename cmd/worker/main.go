// Command worker runs leadintake's River workers: lead processing, callback
// deliveries, and the periodic rounds (the clean-up, the reconciler, the
// orphan finisher, the wake-up of leads waiting for a downstream), until
// SIGTERM or SIGINT; then it stops fetching, lets running jobs finish
// within SHUTDOWN_TIMEOUT, and exits 0.
//
// Configuration comes from the environment; `worker -h` lists it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/destination/generic"
	"github.com/leadintake/leadintake/downstream"
	"github.com/leadintake/leadintake/internal/admin"
	"github.com/leadintake/leadintake/internal/service"
	"github.com/leadintake/leadintake/jobs"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

func main() { service.Main("worker", run) }

// config is the worker's environment.
type config struct {
	service.Common
	AdminAddr          string        `envconfig:"ADMIN_ADDR" default:"127.0.0.1:8082" desc:"operators' listener: /metrics"`
	EnrichmentURL      string        `envconfig:"ENRICHMENT_URL" desc:"enrichment endpoint (POST); required unless SIMULATE_DOWNSTREAM"`
	CRMURL             string        `envconfig:"CRM_URL" desc:"CRM base URL (PUT/POST/GET .../leads): the destination crm, of every client without its own; required while a client uses it, unless SIMULATE_DOWNSTREAM"`
	NotifyURL          string        `envconfig:"NOTIFY_URL" desc:"notification endpoint (POST): the destination notification, of every client without its own; required while a client uses it, unless SIMULATE_DOWNSTREAM"`
	EnrichmentToken    string        `envconfig:"ENRICHMENT_TOKEN" desc:"sent as Authorization: Bearer to the enrichment service"`
	CRMToken           string        `envconfig:"CRM_TOKEN" desc:"sent as Authorization: Bearer to the CRM"`
	NotifyToken        string        `envconfig:"NOTIFY_TOKEN" desc:"sent as Authorization: Bearer to the notification service"`
	CRMMode            string        `envconfig:"CRM_MODE" default:"upsert" desc:"upsert (PUT by external reference) or create (POST, look-up before any re-create)"`
	DownstreamTimeout  time.Duration `envconfig:"DOWNSTREAM_TIMEOUT" default:"10s" desc:"per downstream HTTP call"`
	JobMaxAttempts     int           `envconfig:"JOB_MAX_ATTEMPTS" default:"12" desc:"attempts of one lead job before its key is finished as failed"`
	RetryBaseDelay     time.Duration `envconfig:"RETRY_BASE_DELAY" default:"1s" desc:"first back-off between attempts (doubles, with jitter)"`
	RetryMaxDelay      time.Duration `envconfig:"RETRY_MAX_DELAY" default:"10m" desc:"longest back-off between attempts"`
	JobTimeout         time.Duration `envconfig:"JOB_TIMEOUT" default:"60s" desc:"bound on one attempt of a lead job"`
	RescueStuckAfter   time.Duration `envconfig:"RESCUE_STUCK_AFTER" default:"5m" desc:"a running job whose worker vanished is retried after this long (at least JOB_TIMEOUT + 10s)"`
	CleanupInterval    time.Duration `envconfig:"CLEANUP_INTERVAL" default:"1h" desc:"how often expired keys are deleted"`
	ReconcileInterval  time.Duration `envconfig:"RECONCILE_INTERVAL" default:"1m" desc:"how often needs_reconciliation keys are looked up again and orphaned keys finished"`
	WorkerConcurrency  int           `envconfig:"WORKER_CONCURRENCY" default:"100" desc:"lead jobs worked at once by this process"`
	SimulateDownstream bool          `envconfig:"SIMULATE_DOWNSTREAM" default:"false" desc:"make no downstream calls; derive deterministic stand-in results (demos)"`
	ClientsFile        string        `envconfig:"CLIENTS_FILE" desc:"path of the clients file: the worker reads the clients' callbacks, destinations and owners from it; read again on SIGHUP"`
	CallbackMaxAge     time.Duration `envconfig:"CALLBACK_MAX_AGE" default:"24h" desc:"how long a callback delivery is retried"`
	ProbeInterval      time.Duration `envconfig:"PROBE_INTERVAL" default:"30s" desc:"while a downstream is down, how often one call probes it, across all workers of the database"`
	DeliveryMaxAge     time.Duration `envconfig:"DELIVERY_MAX_AGE" default:"72h" desc:"how long a lead may wait for a downstream that is down, after its claim or latest re-open, before it is finished as at the end of its attempts"`
	EnrichmentLimit    string        `envconfig:"ENRICHMENT_RATE_LIMIT" desc:"calls to the enrichment service per period across all workers (N/s, N/m, N/h or N/<duration> such as 100/10s); unset for no limit"`
	CRMLimit           string        `envconfig:"CRM_RATE_LIMIT" desc:"calls to the CRM per period across all workers (as ENRICHMENT_RATE_LIMIT)"`
	NotifyLimit        string        `envconfig:"NOTIFY_RATE_LIMIT" desc:"calls to the notification service per period across all workers (as ENRICHMENT_RATE_LIMIT)"`
	service.PersonalData
}

// limits parses the *_RATE_LIMIT variables, by downstream.
func (c *config) limits() (map[string]destination.Limit, error) {
	out := map[string]destination.Limit{}
	for _, v := range []struct{ name, downstream, value string }{
		{"ENRICHMENT_RATE_LIMIT", store.DownstreamEnrichment, c.EnrichmentLimit},
		{"CRM_RATE_LIMIT", store.DownstreamCRM, c.CRMLimit},
		{"NOTIFY_RATE_LIMIT", store.DownstreamNotification, c.NotifyLimit},
	} {
		if v.value == "" {
			continue
		}
		l, err := destination.ParseLimit(v.value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.name, err)
		}
		out[v.downstream] = l
	}
	return out, nil
}

// envDestinations are the destinations the environment configures: crm
// (CRM_URL) and notification (NOTIFY_URL), of kind http; one whose URL is
// not set is left out.
func (c *config) envDestinations() []*destination.Config {
	limits, _ := c.limits() // checked by validate
	var out []*destination.Config
	if c.CRMURL != "" {
		out = append(out, &destination.Config{Name: callers.DefaultCRM, Kind: generic.Kind, RateLimit: limits[store.DownstreamCRM],
			Values: map[string]string{"url": c.CRMURL, "token": c.CRMToken, "mode": c.CRMMode}})
	}
	if c.NotifyURL != "" {
		out = append(out, &destination.Config{Name: callers.DefaultNotification, Kind: generic.Kind, RateLimit: limits[store.DownstreamNotification],
			Values: map[string]string{"url": c.NotifyURL, "token": c.NotifyToken}})
	}
	return out
}

// checkClients judges a set of clients against the environment: a client
// that falls back to the environment's CRM or notification needs its URL.
func (c *config) checkClients(set *callers.Set) error {
	if c.SimulateDownstream {
		return nil
	}
	if c.CRMURL == "" && set.UsesDefault(callers.DefaultCRM) {
		return errors.New("CRM_URL is required: a client has no crm of its own in the clients file")
	}
	if c.NotifyURL == "" && set.UsesDefault(callers.DefaultNotification) {
		return errors.New("NOTIFY_URL is required: a client has no notify of its own in the clients file")
	}
	return nil
}

// rescueMargin is how much longer than JOB_TIMEOUT a job must be left
// running before it counts as stuck: an attempt past its time-out still
// writes its last results (each write bounded by 10 s), and a job rescued
// meanwhile would run twice.
const rescueMargin = 10 * time.Second

func (c *config) validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"DOWNSTREAM_TIMEOUT", c.DownstreamTimeout}, {"JOB_TIMEOUT", c.JobTimeout},
		{"RETRY_BASE_DELAY", c.RetryBaseDelay},
		{"CLEANUP_INTERVAL", c.CleanupInterval}, {"RECONCILE_INTERVAL", c.ReconcileInterval},
		{"CALLBACK_MAX_AGE", c.CallbackMaxAge}, {"PROBE_INTERVAL", c.ProbeInterval}, {"DELIVERY_MAX_AGE", c.DeliveryMaxAge},
	} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be positive", d.name)
		}
	}
	switch {
	case c.AdminAddr == "":
		// Empty, net.Listen would take any port of every interface.
		return errors.New("ADMIN_ADDR is set but empty (unset, it takes its default, 127.0.0.1:8082)")
	case c.CRMMode != string(lead.ModeUpsert) && c.CRMMode != string(lead.ModeCreate):
		return fmt.Errorf("CRM_MODE: %q is not one of upsert, create", c.CRMMode)
	case !c.SimulateDownstream && c.EnrichmentURL == "":
		return errors.New("ENRICHMENT_URL is required unless SIMULATE_DOWNSTREAM=true")
	case c.RetryMaxDelay < c.RetryBaseDelay:
		return errors.New("RETRY_MAX_DELAY must be at least RETRY_BASE_DELAY")
	case c.RescueStuckAfter < c.JobTimeout+rescueMargin:
		return fmt.Errorf("RESCUE_STUCK_AFTER must be at least JOB_TIMEOUT + %s: a job rescued while its attempt still writes would run twice", rescueMargin)
	case c.JobMaxAttempts < 1:
		return errors.New("JOB_MAX_ATTEMPTS must be at least 1")
	case c.WorkerConcurrency < 1:
		return errors.New("WORKER_CONCURRENCY must be at least 1")
	}
	if _, err := c.PersonalData.Validate(); err != nil {
		return err
	}
	if _, err := c.limits(); err != nil {
		return err
	}
	for _, d := range c.envDestinations() {
		if err := generic.Spec.Validate(d); err != nil {
			return fmt.Errorf("%s: %w", map[string]string{callers.DefaultCRM: "CRM_URL", callers.DefaultNotification: "NOTIFY_URL"}[d.Name], err)
		}
	}
	return c.Common.Validate()
}

const usageHeader = `Usage: worker
       worker destinations check [--json] [NAME...]

Runs the River workers (lead processing, clean-up of expired keys,
reconciliation) until SIGTERM or SIGINT. "destinations check" checks the
destinations (the environment's and the clients file's): one call each
that changes nothing.

Environment:
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		checking bool
		check    []string
	)
	if len(args) > 1 {
		switch {
		case service.IsHelp(args[1]):
			return service.Usage(stdout, usageHeader, &config{})
		case args[1] == "destinations" && len(args) > 2 && args[2] == "check":
			checking, check = true, args[3:]
		default:
			return &service.UsageError{Msg: fmt.Sprintf("unknown argument %q (try -h)", args[1])}
		}
	}
	var cfg config
	if err := service.Config(&cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	dcfg := downstream.Config{EnrichmentURL: cfg.EnrichmentURL, EnrichmentToken: cfg.EnrichmentToken, Timeout: cfg.DownstreamTimeout}
	if !cfg.SimulateDownstream {
		if err := dcfg.Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	source := callers.Source{Path: cfg.ClientsFile, Check: cfg.checkClients}
	clients, err := source.Load()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	holder := callers.NewHolder(clients)
	dests, err := cfg.destinations(holder)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if checking {
		return checkDestinations(ctx, dests, check, stdout, cfg.DownstreamTimeout)
	}
	return work(ctx, &cfg, dcfg, source, holder, dests, stdout)
}

// destinations builds the destinations in force: the environment's and
// the clients file's (stand-ins for all of them under SIMULATE_DOWNSTREAM).
func (c *config) destinations(holder *callers.Holder) (*jobs.Destinations, error) {
	opts := jobs.DestinationsOpts{Env: c.envDestinations(), Callers: holder, Timeout: c.DownstreamTimeout}
	if c.SimulateDownstream {
		opts.Simulate = downstream.Simulator{}.Destination
	}
	return jobs.NewDestinations(opts)
}

func work(ctx context.Context, cfg *config, dcfg downstream.Config, source callers.Source, clients *callers.Holder, dests *jobs.Destinations, stdout io.Writer) error {
	// A job holds a connection only while it reads or writes its lead, not
	// during downstream calls, so the pool is smaller than the concurrency.
	p, err := service.Start(ctx, &cfg.Common, stdout, service.PoolOpts{
		MaxConns:        int32(min(cfg.WorkerConcurrency+5, 20)),
		ApplicationName: "leadintake-worker",
		// plan_cache_mode: the worker's statements are the same few, on
		// arrays of the leads of a group (unnest($1::uuid[]), = ANY($1)),
		// and PostgreSQL's choice between a cached generic plan and a
		// custom one per execution picks the custom one for them (it costs
		// a group of 1 against the generic plan's guess of 10 rows): every
		// execution was planned again, a few ms of the server's CPU per
		// lead. Force the generic plan, planned once a connection.
		RuntimeParams: map[string]string{"synchronous_commit": "off", "plan_cache_mode": "force_generic_plan"},
	})
	if err != nil {
		return err
	}
	dmetrics := downstream.NewMetrics(p.Registry)
	var enricher jobs.Enricher = downstream.Simulator{}
	if cfg.SimulateDownstream {
		p.Logger.Warn("SIMULATE_DOWNSTREAM is set: no downstream call is made, results are stand-ins")
	} else {
		client, err := downstream.NewClient(dcfg)
		if err != nil {
			return p.Abort(err)
		}
		enricher = client
	}
	metrics := jobs.NewMetrics(p.Registry)
	limits, _ := cfg.limits() // checked at start
	st := store.New(p.Pool)
	if err := dests.Refresh(p.Context(), st); err != nil {
		return p.Abort(err)
	}
	p.WatchClients(source, clients, func() {
		ctx, cancel := context.WithTimeout(p.Context(), 10*time.Second)
		defer cancel()
		if err := dests.Refresh(ctx, st); err != nil {
			p.Logger.Error("destinations: could not record the new ones' state", slog.String("error", err.Error()))
		}
	})
	// The saves and finishes of concurrent leads go together.
	if err := st.GroupRuns(store.GroupOpts{}); err != nil {
		return p.Abort(err)
	}
	jobsCfg := jobs.Config{
		Store: st, Enrichment: enricher, Destinations: dests, Calls: dmetrics,
		KeyRetention: cfg.KeyRetention, LeadRetention: cfg.LeadRetention,
		Logger: p.Logger, Metrics: metrics, AwaitRecheck: cfg.ReconcileInterval,
		Callers: clients, Callbacks: downstream.NewCallbacks(cfg.DownstreamTimeout, dmetrics), CallbackMaxAge: cfg.CallbackMaxAge,
		Outages: jobs.Outages{ProbeInterval: cfg.ProbeInterval, DeliveryMaxAge: cfg.DeliveryMaxAge,
			Limits: enrichmentLimit(limits)},
		HashKey: lead.HashKey(cfg.PIIHashKey), // checked by validate
	}
	p.Registry.MustRegister(jobs.NewPendingCallbacksCollector(jobsCfg.Store), jobs.NewDownstreamsCollector(jobsCfg.Store))
	workers := river.NewWorkers()
	river.AddWorker(workers, jobs.NewProcessLeadWorker(jobsCfg))
	river.AddWorker(workers, jobs.NewCleanupWorker(jobsCfg))
	river.AddWorker(workers, jobs.NewReconcileWorker(jobsCfg))
	river.AddWorker(workers, jobs.NewFinishOrphansWorker(jobsCfg))
	river.AddWorker(workers, jobs.NewDeliverCallbackWorker(jobsCfg))
	river.AddWorker(workers, jobs.NewWakeWaitingWorker(jobsCfg))
	periodic := func(every time.Duration, args river.JobArgs) *river.PeriodicJob {
		return river.NewPeriodicJob(river.PeriodicInterval(every),
			func() (river.JobArgs, *river.InsertOpts) { return args, nil },
			&river.PeriodicJobOpts{ID: args.Kind(), RunOnStart: true})
	}

	riverClient, err := river.NewClient(riverpgxv5.New(p.Pool), &river.Config{
		// River reports routine counts at info level: warnings and up only.
		Logger: service.RiverLogger(p.Logger, cfg.LogLevel),
		Queues: map[string]river.QueueConfig{
			river.QueueDefault:    {MaxWorkers: cfg.WorkerConcurrency},
			jobs.QueueMaintenance: {MaxWorkers: 3},
			jobs.QueueCallbacks:   {MaxWorkers: 20},
		},
		Workers: workers,
		// A lead's job continues the trace of the request that claimed or
		// re-opened its key.
		Middleware: []rivertype.Middleware{&jobs.Traced{}},
		PeriodicJobs: []*river.PeriodicJob{
			periodic(cfg.CleanupInterval, jobs.CleanupArgs{}),
			periodic(cfg.ReconcileInterval, jobs.ReconcileArgs{}),
			periodic(cfg.ReconcileInterval, jobs.FinishOrphansArgs{}),
			periodic(cfg.ProbeInterval, jobs.WakeWaitingArgs{}),
		},
		MaxAttempts:          cfg.JobMaxAttempts,
		RetryPolicy:          &jobs.RetryPolicy{Base: cfg.RetryBaseDelay, Max: cfg.RetryMaxDelay},
		JobTimeout:           cfg.JobTimeout,
		RescueStuckJobsAfter: cfg.RescueStuckAfter,
		SoftStopTimeout:      cfg.ShutdownTimeout,
		// A burst must not wait for the default one-second poll: jobs are
		// fetched on insert notifications, at most every FetchCooldown, and
		// polled for every FetchPollInterval otherwise.
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		return p.Abort(fmt.Errorf("river client: %w", err))
	}
	jobsCfg.Store.UseJobs(jobs.NewQueue(riverClient, clients))
	metrics.CountJobEvents(riverClient)
	p.Registry.MustRegister(jobs.NewQueuesCollector(riverClient, river.QueueDefault, jobs.QueueMaintenance, jobs.QueueCallbacks))

	adminHandler, err := admin.NewHandler(p.Context(), &admin.Opts{
		Gatherer: p.Registry, User: cfg.AdminUser, Password: cfg.AdminPassword, Logger: p.Logger, Ready: st.Ready,
		MetricsUser: cfg.MetricsUser, MetricsPassword: cfg.MetricsPassword, Addr: cfg.AdminAddr,
	})
	if err != nil {
		return p.Abort(err)
	}
	adminAddr, err := p.Listen("ADMIN_ADDR", cfg.AdminAddr, admin.NewServer(adminHandler, p.Logger))
	if err != nil {
		return p.Abort(err)
	}
	// The end of the process's context (a signal) starts River's soft stop:
	// no new jobs; running ones get SoftStopTimeout, then their contexts
	// are cancelled.
	if err := riverClient.Start(p.Context()); err != nil {
		return p.Abort(fmt.Errorf("river start: %w", err))
	}
	p.Go(func(context.Context) error {
		<-riverClient.Stopped()
		return nil
	})
	p.Logger.Info("worker started", slog.String("admin_addr", adminAddr.String()),
		slog.Int("destinations", len(dests.Configs())), slog.Int("concurrency", cfg.WorkerConcurrency),
		slog.Bool("simulate_downstream", cfg.SimulateDownstream))
	err = p.Wait()
	p.Logger.Info("worker stopped")
	return err
}

// enrichmentLimit is ENRICHMENT_RATE_LIMIT as the worker's gate takes it
// (the destinations carry their own).
func enrichmentLimit(limits map[string]destination.Limit) map[string]store.Limit {
	out := map[string]store.Limit{}
	if l, ok := limits[store.DownstreamEnrichment]; ok {
		out[store.DownstreamEnrichment] = store.Limit{N: l.N, Per: l.Per}
	}
	return out
}
