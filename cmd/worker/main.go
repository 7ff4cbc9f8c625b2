// Command worker runs leadintake's River workers: lead processing, the
// periodic clean-up of expired keys and the reconciler, until SIGTERM or
// SIGINT; then it stops fetching, lets running jobs finish within
// SHUTDOWN_TIMEOUT, and exits 0.
//
// Configuration comes from the environment; `worker -h` lists it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/leadintake/leadintake/downstream"
	"github.com/leadintake/leadintake/internal/admin"
	"github.com/leadintake/leadintake/internal/process"
	"github.com/leadintake/leadintake/jobs"
)

func main() {
	if err := run(context.Background(), os.Args, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// config is the worker's environment. envconfig reads it from the process
// environment, so tests that need other settings start the binary with them.
type config struct {
	DatabaseURL        string        `envconfig:"DATABASE_URL" required:"true" desc:"PostgreSQL URL (pool_max_conns, connect_timeout... may be set in it)"`
	AdminAddr          string        `envconfig:"ADMIN_ADDR" default:"127.0.0.1:8082" desc:"operators' listener: /metrics"`
	AdminUser          string        `envconfig:"ADMIN_USER" desc:"HTTP basic auth user of the admin listener"`
	AdminPassword      string        `envconfig:"ADMIN_PASSWORD" desc:"HTTP basic auth password of the admin listener"`
	EnrichmentURL      string        `envconfig:"ENRICHMENT_URL" desc:"enrichment endpoint (POST); required unless SIMULATE_DOWNSTREAM"`
	CRMURL             string        `envconfig:"CRM_URL" desc:"CRM base URL (PUT/POST/GET .../leads); required unless SIMULATE_DOWNSTREAM"`
	NotifyURL          string        `envconfig:"NOTIFY_URL" desc:"notification endpoint (POST); required unless SIMULATE_DOWNSTREAM"`
	EnrichmentToken    string        `envconfig:"ENRICHMENT_TOKEN" desc:"sent as Authorization: Bearer to the enrichment service"`
	CRMToken           string        `envconfig:"CRM_TOKEN" desc:"sent as Authorization: Bearer to the CRM"`
	NotifyToken        string        `envconfig:"NOTIFY_TOKEN" desc:"sent as Authorization: Bearer to the notification service"`
	CRMMode            string        `envconfig:"CRM_MODE" default:"upsert" desc:"upsert (PUT by external reference) or create (POST, look-up before any re-create)"`
	DownstreamTimeout  time.Duration `envconfig:"DOWNSTREAM_TIMEOUT" default:"10s" desc:"per downstream HTTP call"`
	JobMaxAttempts     int           `envconfig:"JOB_MAX_ATTEMPTS" default:"12" desc:"attempts of one lead job before its key is finished as failed"`
	RetryBaseDelay     time.Duration `envconfig:"RETRY_BASE_DELAY" default:"1s" desc:"first back-off between attempts (doubles, with jitter)"`
	RetryMaxDelay      time.Duration `envconfig:"RETRY_MAX_DELAY" default:"10m" desc:"longest back-off between attempts"`
	JobTimeout         time.Duration `envconfig:"JOB_TIMEOUT" default:"60s" desc:"bound on one attempt of a lead job"`
	RescueStuckAfter   time.Duration `envconfig:"RESCUE_STUCK_AFTER" default:"5m" desc:"a running job whose worker vanished is retried after this long (at least JOB_TIMEOUT)"`
	KeyRetention       time.Duration `envconfig:"KEY_RETENTION" default:"168h" desc:"how long a finished key is kept after it finished"`
	CleanupInterval    time.Duration `envconfig:"CLEANUP_INTERVAL" default:"1h" desc:"how often expired keys are deleted"`
	ReconcileInterval  time.Duration `envconfig:"RECONCILE_INTERVAL" default:"1m" desc:"how often needs_reconciliation keys are looked up again and orphaned keys finished"`
	WorkerConcurrency  int           `envconfig:"WORKER_CONCURRENCY" default:"50" desc:"lead jobs worked at once by this process"`
	ShutdownTimeout    time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"30s" desc:"graceful-stop budget"`
	SimulateDownstream bool          `envconfig:"SIMULATE_DOWNSTREAM" default:"false" desc:"make no downstream calls; derive deterministic stand-in results (demos)"`
	LogFormat          string        `envconfig:"LOG_FORMAT" default:"json" desc:"json or text"`
	LogLevel           string        `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
}

func (c *config) validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"DOWNSTREAM_TIMEOUT", c.DownstreamTimeout}, {"JOB_TIMEOUT", c.JobTimeout},
		{"RETRY_BASE_DELAY", c.RetryBaseDelay}, {"KEY_RETENTION", c.KeyRetention},
		{"CLEANUP_INTERVAL", c.CleanupInterval}, {"RECONCILE_INTERVAL", c.ReconcileInterval},
		{"SHUTDOWN_TIMEOUT", c.ShutdownTimeout},
	} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be positive", d.name)
		}
	}
	switch {
	case c.CRMMode != jobs.CRMModeUpsert && c.CRMMode != jobs.CRMModeCreate:
		return fmt.Errorf("CRM_MODE: %q is not one of upsert, create", c.CRMMode)
	case !c.SimulateDownstream && (c.EnrichmentURL == "" || c.CRMURL == "" || c.NotifyURL == ""):
		return errors.New("ENRICHMENT_URL, CRM_URL and NOTIFY_URL are required unless SIMULATE_DOWNSTREAM=true")
	case c.RetryMaxDelay < c.RetryBaseDelay:
		return errors.New("RETRY_MAX_DELAY must be at least RETRY_BASE_DELAY")
	case c.RescueStuckAfter < c.JobTimeout:
		return errors.New("RESCUE_STUCK_AFTER must be at least JOB_TIMEOUT")
	case c.JobMaxAttempts < 1:
		return errors.New("JOB_MAX_ATTEMPTS must be at least 1")
	case c.WorkerConcurrency < 1:
		return errors.New("WORKER_CONCURRENCY must be at least 1")
	case (c.AdminUser == "") != (c.AdminPassword == ""):
		return errors.New("set both ADMIN_USER and ADMIN_PASSWORD, or neither")
	}
	return nil
}

const usageHeader = `Usage: worker

Runs the River workers (lead processing, clean-up of expired keys,
reconciliation) until SIGTERM or SIGINT.

Environment:
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	for _, a := range args[1:] {
		switch a {
		case "-h", "-help", "--help", "help":
			return process.Usage(stdout, usageHeader, &config{})
		default:
			return fmt.Errorf("unknown argument %q (try -h)", a)
		}
	}

	var cfg config
	if err := envconfig.Process("", &cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	logger, err := process.NewLogger(stdout, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return work(ctx, &cfg, logger)
}

func work(ctx context.Context, cfg *config, logger *slog.Logger) error {
	// A job holds a connection only while it reads or writes its lead, not
	// during downstream calls, so the pool is smaller than the concurrency.
	pool, err := process.OpenPool(ctx, cfg.DatabaseURL, process.PoolOpts{
		MaxConns:        int32(min(cfg.WorkerConcurrency+5, 20)),
		ApplicationName: "leadintake-worker",
	})
	if err != nil {
		return err
	}
	defer pool.Close()

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := jobs.NewMetrics(registry)

	var ds jobs.Downstream = downstream.Simulator{}
	if !cfg.SimulateDownstream {
		client, err := downstream.NewClient(downstream.Config{
			EnrichmentURL: cfg.EnrichmentURL, CRMURL: cfg.CRMURL, NotifyURL: cfg.NotifyURL,
			EnrichmentToken: cfg.EnrichmentToken, CRMToken: cfg.CRMToken, NotifyToken: cfg.NotifyToken,
			Timeout: cfg.DownstreamTimeout,
			Metrics: downstream.NewMetrics(registry),
		})
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		ds = client
	} else {
		logger.Warn("SIMULATE_DOWNSTREAM is set: no downstream call is made, results are stand-ins")
	}

	jobsCfg := jobs.Config{
		Pool: pool, Downstream: ds, CRMMode: cfg.CRMMode, KeyRetention: cfg.KeyRetention,
		Logger: logger, Metrics: metrics,
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, jobs.NewProcessLeadWorker(jobsCfg))
	river.AddWorker(workers, jobs.NewCleanupWorker(jobsCfg))
	river.AddWorker(workers, jobs.NewReconcileWorker(jobsCfg))

	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		// River reports routine counts at info level: warnings and up only.
		Logger: process.RiverLogger(logger, cfg.LogLevel),
		Queues: map[string]river.QueueConfig{
			river.QueueDefault:    {MaxWorkers: cfg.WorkerConcurrency},
			jobs.QueueMaintenance: {MaxWorkers: 2},
		},
		Workers: workers,
		PeriodicJobs: []*river.PeriodicJob{
			river.NewPeriodicJob(river.PeriodicInterval(cfg.CleanupInterval),
				func() (river.JobArgs, *river.InsertOpts) { return jobs.CleanupArgs{}, nil },
				&river.PeriodicJobOpts{ID: "cleanup_keys", RunOnStart: true}),
			river.NewPeriodicJob(river.PeriodicInterval(cfg.ReconcileInterval),
				func() (river.JobArgs, *river.InsertOpts) { return jobs.ReconcileArgs{}, nil },
				&river.PeriodicJobOpts{ID: "reconcile_keys", RunOnStart: true}),
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
		return fmt.Errorf("river client: %w", err)
	}
	registry.MustRegister(newJobEventCollector(riverClient))

	adminHandler, err := admin.NewHandler(ctx, &admin.Opts{Gatherer: registry, User: cfg.AdminUser, Password: cfg.AdminPassword})
	if err != nil {
		return err
	}
	adminLn, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("ADMIN_ADDR: %w", err)
	}
	adminServer := process.NewServer(adminHandler, process.ServerOpts{Logger: logger})
	adminDone := make(chan error, 1)
	go func() { adminDone <- process.Serve(ctx, adminServer, adminLn, cfg.ShutdownTimeout) }()

	// Cancelling ctx (a signal) starts River's soft stop: no new jobs;
	// running ones get SoftStopTimeout, then their contexts are cancelled.
	if err := riverClient.Start(ctx); err != nil {
		return fmt.Errorf("river start: %w", err)
	}
	logger.Info("worker started", slog.String("admin_addr", adminLn.Addr().String()),
		slog.String("crm_mode", cfg.CRMMode), slog.Int("concurrency", cfg.WorkerConcurrency),
		slog.Bool("simulate_downstream", cfg.SimulateDownstream))

	<-riverClient.Stopped()
	err = <-adminDone
	logger.Info("worker stopped")
	return err
}
