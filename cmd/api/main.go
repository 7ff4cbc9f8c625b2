// Command api serves leadintake's HTTP API and its admin listener; `api
// migrate` applies the database migrations and exits.
//
// Configuration comes from the environment; `api -h` lists it.
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
	"strings"
	"syscall"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"golang.org/x/sync/errgroup"

	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/admin"
	"github.com/leadintake/leadintake/internal/process"
	"github.com/leadintake/leadintake/jobs"
	"github.com/leadintake/leadintake/migrations"
)

func main() {
	if err := run(context.Background(), os.Args, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(1)
	}
}

// config is the api's environment. envconfig reads it from the process
// environment (it cannot take another source), so tests that need other
// settings start the binary with them.
type config struct {
	DatabaseURL   string `envconfig:"DATABASE_URL" required:"true" desc:"PostgreSQL URL (pool_max_conns, connect_timeout... may be set in it)"`
	APIAddr       string `envconfig:"API_ADDR" default:":8080" desc:"public listener"`
	AdminAddr     string `envconfig:"ADMIN_ADDR" default:"127.0.0.1:8081" desc:"operators' listener: /metrics, and River UI under /riverui/"`
	AdminUser     string `envconfig:"ADMIN_USER" desc:"HTTP basic auth user of the admin listener; River UI is served only with ADMIN_USER and ADMIN_PASSWORD"`
	AdminPassword string `envconfig:"ADMIN_PASSWORD" desc:"HTTP basic auth password of the admin listener"`
	// APIClients is parsed after envconfig, whose errors quote the value:
	// a hash list, or a token pasted by mistake.
	APIClients      string        `envconfig:"API_CLIENTS" required:"true" desc:"comma-separated client_id=sha256hex(token) entries"`
	AllowedSources  []string      `envconfig:"ALLOWED_SOURCES" default:"website,linkedin,referral,ads,event" desc:"allowed values of a lead's source; empty allows any"`
	MaxBodyBytes    int64         `envconfig:"MAX_BODY_BYTES" default:"65536" desc:"larger bodies get 413"`
	RequestTimeout  time.Duration `envconfig:"REQUEST_TIMEOUT" default:"5s" desc:"bound on one request's database work; past it 503"`
	JobMaxAttempts  int           `envconfig:"JOB_MAX_ATTEMPTS" default:"12" desc:"attempts of a lead job (set on each job the api enqueues)"`
	ShutdownTimeout time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"30s" desc:"graceful-stop budget"`
	LogFormat       string        `envconfig:"LOG_FORMAT" default:"json" desc:"json or text"`
	LogLevel        string        `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
}

func (c *config) validate() error {
	switch {
	case c.MaxBodyBytes <= 0:
		return errors.New("MAX_BODY_BYTES must be positive")
	case c.RequestTimeout <= 0:
		return errors.New("REQUEST_TIMEOUT must be positive")
	case c.JobMaxAttempts < 1:
		return errors.New("JOB_MAX_ATTEMPTS must be at least 1")
	case c.ShutdownTimeout <= 0:
		return errors.New("SHUTDOWN_TIMEOUT must be positive")
	case (c.AdminUser == "") != (c.AdminPassword == ""):
		return errors.New("set both ADMIN_USER and ADMIN_PASSWORD, or neither")
	}
	return nil
}

// migrateConfig is the environment of `api migrate`.
type migrateConfig struct {
	DatabaseURL string `envconfig:"DATABASE_URL" required:"true" desc:"PostgreSQL URL"`
	LogFormat   string `envconfig:"LOG_FORMAT" default:"json" desc:"json or text"`
	LogLevel    string `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
}

const usageHeader = `Usage: api [migrate]

  api           serve the HTTP API on API_ADDR and the admin listener on ADMIN_ADDR
  api migrate   apply every migration (River's and leadintake's) and exit

Environment:
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	cmd := ""
	for _, a := range args[1:] {
		switch a {
		case "-h", "-help", "--help", "help":
			return process.Usage(stdout, usageHeader, &config{})
		case "migrate":
			cmd = a
		default:
			return fmt.Errorf("unknown argument %q (try -h)", a)
		}
	}
	if cmd == "migrate" {
		return runMigrate(ctx, stdout)
	}

	var cfg config
	if err := envconfig.Process("", &cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	clients, err := intake.ParseClients(cfg.APIClients)
	if err != nil {
		return fmt.Errorf("config: API_CLIENTS: %w", err)
	}
	logger, err := process.NewLogger(stdout, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return serve(ctx, &cfg, clients, logger)
}

func runMigrate(ctx context.Context, stdout io.Writer) error {
	var cfg migrateConfig
	if err := envconfig.Process("", &cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	logger, err := process.NewLogger(stdout, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	pool, err := process.OpenPool(ctx, cfg.DatabaseURL, process.PoolOpts{MaxConns: 4, ApplicationName: "leadintake-migrate"})
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Migrate(ctx, pool, logger); err != nil {
		return err
	}
	logger.Info("migrations applied")
	return nil
}

func serve(ctx context.Context, cfg *config, clients intake.Clients, logger *slog.Logger) error {
	pool, err := process.OpenPool(ctx, cfg.DatabaseURL, process.PoolOpts{MaxConns: 16, ApplicationName: "leadintake-api"})
	if err != nil {
		return err
	}
	defer pool.Close()

	// An insert-only River client: no queues, never started. Its
	// FetchCooldown bounds how often an insert also notifies the workers
	// (River's default, 100 ms, would leave most jobs of a steady trickle
	// waiting for the workers' poll).
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown: 5 * time.Millisecond,
		Logger:        process.RiverLogger(logger, cfg.LogLevel),
		MaxAttempts:   cfg.JobMaxAttempts,
	})
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	store := intake.NewStore(pool, jobs.Enqueuer(riverClient))
	registry.MustRegister(intake.NewKeyStateCollector(store, logger))

	api := intake.NewHandler(&intake.HandlerOpts{
		Store:          store,
		Clients:        clients,
		Decode:         intake.DecodeOpts{AllowedSources: nonEmpty(cfg.AllowedSources)},
		MaxBodyBytes:   cfg.MaxBodyBytes,
		RequestTimeout: cfg.RequestTimeout,
		Logger:         logger,
		Metrics:        intake.NewMetrics(registry),
	})

	adminHandler, err := admin.NewHandler(ctx, &admin.Opts{
		Gatherer:    registry,
		User:        cfg.AdminUser,
		Password:    cfg.AdminPassword,
		RiverClient: riverClient,
		Logger:      logger.With(slog.String("component", "riverui")),
	})
	if err != nil {
		return err
	}

	apiLn, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("API_ADDR: %w", err)
	}
	adminLn, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		apiLn.Close()
		return fmt.Errorf("ADMIN_ADDR: %w", err)
	}
	logger.Info("api listening", slog.String("addr", apiLn.Addr().String()), slog.String("admin_addr", adminLn.Addr().String()),
		slog.Bool("riverui", cfg.AdminUser != ""))

	const readTimeout = 30 * time.Second
	apiServer := process.NewServer(api, process.ServerOpts{
		ReadTimeout:  readTimeout,
		WriteTimeout: readTimeout + cfg.RequestTimeout + 5*time.Second,
		Logger:       logger,
	})
	adminServer := process.NewServer(adminHandler, process.ServerOpts{Logger: logger})

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return process.Serve(gctx, apiServer, apiLn, cfg.ShutdownTimeout) })
	g.Go(func() error { return process.Serve(gctx, adminServer, adminLn, cfg.ShutdownTimeout) })
	err = g.Wait()
	logger.Info("api stopped")
	return err
}

// nonEmpty drops empty entries, so that ALLOWED_SOURCES="" allows any source.
func nonEmpty(list []string) []string {
	var out []string
	for _, s := range list {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
