// Command api serves leadintake's HTTP API and its admin listener; `api
// migrate` applies the database migrations and exits; `api erase`, `api
// keys`, `api leads` and `api spam` are an operator's commands.
//
// Configuration comes from the environment; `api -h` lists it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/admin"
	"github.com/leadintake/leadintake/internal/console"
	"github.com/leadintake/leadintake/internal/service"
	"github.com/leadintake/leadintake/internal/tracing"
	"github.com/leadintake/leadintake/jobs"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/migrations"
	"github.com/leadintake/leadintake/operator"
	"github.com/leadintake/leadintake/store"
)

func main() { service.Main("api", run) }

// config is the api's environment.
type config struct {
	service.Common
	APIAddr   string `envconfig:"API_ADDR" default:":8080" desc:"public listener"`
	AdminAddr string `envconfig:"ADMIN_ADDR" default:"127.0.0.1:8081" desc:"operators' listener: /metrics, and River UI under /riverui/ and the console under /console/ (served only with ADMIN_USER and ADMIN_PASSWORD)"`
	// APIClients is parsed after the rest: a parse error must not quote
	// it (a hash list, or a token pasted by mistake).
	APIClients      string        `envconfig:"API_CLIENTS" desc:"comma-separated client_id=sha256hex(token) entries; required unless CLIENTS_FILE is set"`
	ClientsFile     string        `envconfig:"CLIENTS_FILE" desc:"path of the clients file (tokens, publishable keys, callbacks, webhook secrets, console logins); read again on SIGHUP"`
	PublicRateLimit string        `envconfig:"PUBLIC_RATE_LIMIT" default:"20/m" desc:"new submissions per publishable key and client IP, per api process (N/s, N/m, N/h)"`
	TrustedProxies  string        `envconfig:"TRUSTED_PROXIES" desc:"comma-separated CIDRs whose X-Forwarded-For is believed when finding a client IP"`
	AllowedSources  []string      `envconfig:"ALLOWED_SOURCES" default:"website,linkedin,referral,ads,event" desc:"allowed values of a lead's source; empty allows any"`
	MaxBodyBytes    int64         `envconfig:"MAX_BODY_BYTES" default:"65536" desc:"larger bodies get 413"`
	RequestTimeout  time.Duration `envconfig:"REQUEST_TIMEOUT" default:"5s" desc:"bound on one request's database work; past it 503"`
	JobMaxAttempts  int           `envconfig:"JOB_MAX_ATTEMPTS" default:"12" desc:"attempts of a lead job (set on each job the api enqueues)"`
	MaxWait         time.Duration `envconfig:"MAX_WAIT" default:"30s" desc:"the longest a Prefer: wait request is held"`
	DuplicateWindow time.Duration `envconfig:"DUPLICATE_WINDOW" default:"10m" desc:"a second enquiry of the same content and email under another key within this window is flagged as a possible duplicate; 0 turns it off"`
	service.PersonalData
}

func (c *config) validate() error {
	switch {
	case c.APIAddr == "":
		return errors.New("API_ADDR is set but empty (unset, it takes its default, :8080)")
	case c.AdminAddr == "":
		// Empty, net.Listen would take any port of every interface.
		return errors.New("ADMIN_ADDR is set but empty (unset, it takes its default, 127.0.0.1:8081)")
	case c.MaxBodyBytes <= 0:
		return errors.New("MAX_BODY_BYTES must be positive")
	case c.RequestTimeout <= 0:
		return errors.New("REQUEST_TIMEOUT must be positive")
	case c.JobMaxAttempts < 1:
		return errors.New("JOB_MAX_ATTEMPTS must be at least 1")
	case c.MaxWait <= 0:
		return errors.New("MAX_WAIT must be positive")
	case c.DuplicateWindow < 0:
		return errors.New("DUPLICATE_WINDOW must not be negative (0 turns it off)")
	case c.APIClients == "" && c.ClientsFile == "":
		return errors.New("API_CLIENTS or CLIENTS_FILE is required")
	}
	if _, err := c.PersonalData.Validate(); err != nil {
		return err
	}
	return c.Common.Validate()
}

// migrateConfig is the environment of `api migrate`.
type migrateConfig struct {
	DatabaseURL string `envconfig:"DATABASE_URL" required:"true" desc:"PostgreSQL URL"`
	LogFormat   string `envconfig:"LOG_FORMAT" default:"json" desc:"json or text"`
	LogLevel    string `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
}

// commandList is every command of api: its usage lines (the commands'
// own, which they print for -h), and what it does.
var commandList = []struct{ usage, does string }{
	{"api", "serve the HTTP API on API_ADDR and the admin listener on ADMIN_ADDR"},
	{migrateUsage, "apply every migration (River's and leadintake's) and exit"},
	{eraseUsage, "erase the personal data of the client's leads of that address"},
	{keysUsage, "list and show keys, and settle a key awaiting reconciliation"},
	{leadsUsage, "re-open failed keys, as a retry of each would"},
	{spamUsage, "list and look at quarantined enquiries, and release them"},
	{auditUsage, "list what operators did (releases, redrives, settles, erasures, looks), by whom"},
	{hashPasswordUsage, "print the bcrypt hash of a console password read from stdin"},
}

// usageHeader is what `api -h` prints before the table of the environment.
func usageHeader() string {
	var b strings.Builder
	b.WriteString("Usage: api [migrate | erase | keys | leads | spam | audit | hash-password] [-h]\n\n")
	for _, c := range commandList {
		for _, line := range strings.Split(c.usage, "\n") {
			fmt.Fprintf(&b, "  %s\n", strings.TrimSpace(line))
		}
		fmt.Fprintf(&b, "                %s\n", c.does)
	}
	b.WriteString(`
Each command prints its usage for -h.

Environment (of api; the commands read DATABASE_URL, PII_HASH_KEY, the
retentions, API_CLIENTS and CLIENTS_FILE from it):
`)
	return b.String()
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 1 {
		switch a := args[1]; {
		case service.IsHelp(a):
			return service.Usage(stdout, usageHeader(), &config{})
		case a == "migrate":
			return runMigrate(ctx, args[2:], stdout)
		case a == "erase":
			return runErase(ctx, args[2:], stdout)
		case a == "keys":
			return runKeys(ctx, args[2:], stdout)
		case a == "leads":
			return runLeads(ctx, args[2:], stdout, stderr)
		case a == "spam":
			return runSpam(ctx, args[2:], stdout, stderr)
		case a == "audit":
			return runAudit(ctx, args[2:], stdout)
		case a == "hash-password":
			return runHashPassword(args[2:], os.Stdin, stdout)
		default:
			return &service.UsageError{Msg: fmt.Sprintf("unknown argument %q (try -h)", a)}
		}
	}

	var cfg config
	if err := service.Config(&cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	rateLimit, err := intake.ParseRateLimit(cfg.PublicRateLimit)
	if err != nil {
		return fmt.Errorf("config: PUBLIC_RATE_LIMIT: %w", err)
	}
	trusted, err := intake.ParseTrustedProxies(cfg.TrustedProxies)
	if err != nil {
		return fmt.Errorf("config: TRUSTED_PROXIES: %w", err)
	}
	source := callers.Source{APIClients: cfg.APIClients, Path: cfg.ClientsFile, Check: func(set *callers.Set) error {
		// The audit names ADMIN_USER and the clients file's operators
		// alike: two people must not share a name.
		if _, ok := set.Operator(cfg.AdminUser); ok && cfg.AdminUser != "" {
			return errors.New("CLIENTS_FILE: an operator has the name of ADMIN_USER; give one of them another")
		}
		return nil
	}}
	clients, err := source.Load()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return serve(ctx, &cfg, &limits{rate: rateLimit, trusted: trusted}, source, callers.NewHolder(clients), stdout)
}

// limits are the parsed PUBLIC_RATE_LIMIT and TRUSTED_PROXIES.
type limits struct {
	rate    intake.RateLimit
	trusted []netip.Prefix
}

// migrateHelp is what `api migrate -h` prints before its environment.
const migrateHelp = `usage: ` + migrateUsage + `

Applies every migration (River's and leadintake's) and exits 0; safe to run
again, and concurrent runs wait for each other.

Environment:
`

func runMigrate(ctx context.Context, args []string, stdout io.Writer) error {
	switch {
	case len(args) == 1 && service.IsHelp(args[0]):
		return service.Usage(stdout, migrateHelp, &migrateConfig{})
	case len(args) > 0:
		return &service.UsageError{Msg: fmt.Sprintf("migrate takes no argument, not %q", args[0]), Usage: migrateUsage}
	}
	var cfg migrateConfig
	if err := service.Config(&cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	logger, err := service.NewLogger(stdout, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	pool, err := service.OpenPool(ctx, cfg.DatabaseURL, service.PoolOpts{MaxConns: 4, ApplicationName: "leadintake-migrate"})
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

func serve(ctx context.Context, cfg *config, lim *limits, source callers.Source, clients *callers.Holder, stdout io.Writer) error {
	p, err := service.Start(ctx, &cfg.Common, stdout, service.PoolOpts{MaxConns: 16, ApplicationName: "leadintake-api"})
	if err != nil {
		return err
	}
	p.WatchClients(source, clients)
	// An insert-only River client: no queues, never started. Its
	// FetchCooldown bounds how often an insert also notifies the workers
	// (River's default, 100 ms, would leave most jobs of a steady trickle
	// waiting for the workers' poll).
	riverClient, err := river.NewClient(riverpgxv5.New(p.Pool), &river.Config{
		FetchCooldown: 5 * time.Millisecond,
		Logger:        service.RiverLogger(p.Logger, cfg.LogLevel),
		MaxAttempts:   cfg.JobMaxAttempts,
	})
	if err != nil {
		return p.Abort(fmt.Errorf("river client: %w", err))
	}

	st := store.New(p.Pool)
	st.UseJobs(jobs.NewQueue(riverClient, clients))
	st.FlagDuplicates(cfg.DuplicateWindow)
	// Concurrent claims of new keys commit together, with their jobs
	// inserted by one InsertManyTx.
	if err := st.GroupClaims(store.GroupOpts{}); err != nil {
		return p.Abort(err)
	}
	hashKey, _ := cfg.PersonalData.Validate() // checked at start
	p.Registry.MustRegister(intake.NewKeyStateCollector(st, p.Logger))
	ops := &operator.Operator{
		Store: st, River: riverClient, HashKey: hashKey, Callers: clients, KeyRetention: cfg.KeyRetention,
		Erased: jobs.NewErasedCounter(p.Registry),
	}
	// Requests that ask to wait are woken by the finishing transactions'
	// notifications, heard on one connection of this process.
	waiters := intake.NewWaiters(intake.DefaultMaxWaiters)
	waiters.Register(p.Registry)
	listenCfg := p.Pool.Config().ConnConfig.Copy()
	p.Go(func(ctx context.Context) error {
		store.Listen(ctx, listenCfg, store.ListenOpts{Finished: waiters.Finished, Up: waiters.Listening})
		return nil
	})
	api := intake.NewHandler(&intake.HandlerOpts{
		Store:           st,
		Callers:         clients,
		PublicRateLimit: lim.rate,
		TrustedProxies:  lim.trusted,
		Decode:          lead.DecodeOpts{AllowedSources: nonEmpty(cfg.AllowedSources)},
		MaxBodyBytes:    cfg.MaxBodyBytes,
		RequestTimeout:  cfg.RequestTimeout,
		Logger:          p.Logger,
		Metrics:         intake.NewMetrics(p.Registry),
		Waiters:         waiters,
		MaxWait:         cfg.MaxWait,
		HashKey:         hashKey,
		KeyRetention:    cfg.KeyRetention,
	})
	consoleHandler, err := console.NewHandler(&console.Opts{
		Operator: ops, Logger: p.Logger.With(slog.String("component", "console")),
	})
	if err != nil {
		return p.Abort(err)
	}
	adminHandler, err := admin.NewHandler(p.Context(), &admin.Opts{
		Gatherer:        p.Registry,
		User:            cfg.AdminUser,
		Password:        cfg.AdminPassword,
		MetricsUser:     cfg.MetricsUser,
		MetricsPassword: cfg.MetricsPassword,
		RiverClient:     riverClient,
		Erase: func(ctx context.Context, clientID, email string) (int, error) {
			return ops.Erase(ctx, operator.AdminAPI, clientID, email)
		},
		Redrive: func(ctx context.Context, p *store.RedriveParams) (*store.Redriven, error) {
			return ops.Redrive(ctx, operator.AdminAPI, p)
		},
		Console:      consoleHandler,
		ConsoleLogin: console.NewLogins(clients, nil).Check,
		Logger:       p.Logger.With(slog.String("component", "admin")),
		Addr:         cfg.AdminAddr,
	})
	if err != nil {
		return p.Abort(err)
	}

	const readTimeout = 30 * time.Second
	// Every request but the probes is a span, the child of its
	// traceparent (see internal/tracing).
	apiServer := service.NewServer(tracing.Handler(api, "/healthz", "/readyz"), service.ServerOpts{
		ReadTimeout:  readTimeout,
		WriteTimeout: readTimeout + cfg.RequestTimeout + cfg.MaxWait + 5*time.Second,
		Logger:       p.Logger,
	})
	// On stop, held requests are answered at once, as their keys stand.
	apiServer.RegisterOnShutdown(waiters.Stop)
	apiAddr, err := p.Listen("API_ADDR", cfg.APIAddr, apiServer)
	if err != nil {
		return p.Abort(err)
	}
	adminAddr, err := p.Listen("ADMIN_ADDR", cfg.AdminAddr, admin.NewServer(adminHandler, p.Logger))
	if err != nil {
		return p.Abort(err)
	}
	p.Logger.Info("api listening", slog.String("addr", apiAddr.String()), slog.String("admin_addr", adminAddr.String()),
		slog.Bool("riverui", cfg.AdminUser != ""), slog.Bool("console", cfg.AdminUser != ""))
	err = p.Wait()
	p.Logger.Info("api stopped")
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
