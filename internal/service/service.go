// Package service is how every leadintake binary runs: the thin main, the
// configuration read from the environment (Config, Usage), the logger, the
// database pool, the metrics registry, the clients read again on SIGHUP
// (Process.WatchClients), and the listeners and background work that run
// until the process is told to stop (Process).
package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/leadintake/leadintake/internal/tracing"
)

// RunFunc is a binary's whole program: its arguments (the program's name
// first) and where it writes. It reads its configuration from the
// process's environment (Config).
type RunFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Main runs run for the process. When it fails, Main exits with one line
// "name: error" on stderr: with status 2 for a *UsageError (and its usage
// after the line), 1 for any other error. SIGINT and SIGTERM cancel run's
// context. SIGHUP never ends the process: from Main's first line on, it is
// logged and ignored, unless the process reads it as "read the clients file
// again" (OnHangup).
func Main(name string, run RunFunc) {
	// Never stopped: a SIGHUP while the process exits must not change its
	// exit status.
	ctx, _ := catchHangups(context.Background(), os.Stderr)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	if err == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	var usage *UsageError
	if errors.As(err, &usage) {
		if usage.Usage != "" {
			fmt.Fprintf(os.Stderr, "usage: %s\n", usage.Usage)
		}
		os.Exit(2)
	}
	os.Exit(1)
}

// UsageError is a command used wrongly: bad or missing flags or
// arguments. Main exits 2 for it, and prints Usage.
type UsageError struct {
	Msg   string
	Usage string
}

func (e *UsageError) Error() string { return e.Msg }

// IsHelp reports whether arg asks for the usage.
func IsHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// Common is the environment every serving process reads.
type Common struct {
	DatabaseURL     string        `envconfig:"DATABASE_URL" required:"true" desc:"PostgreSQL URL (pool_max_conns, connect_timeout... may be set in it)"`
	AdminUser       string        `envconfig:"ADMIN_USER" desc:"HTTP basic auth user of the admin listener"`
	AdminPassword   string        `envconfig:"ADMIN_PASSWORD" desc:"HTTP basic auth password of the admin listener"`
	MetricsUser     string        `envconfig:"METRICS_USER" desc:"HTTP basic auth user that may read /metrics on the admin listener and nothing else: a scrape credential apart from ADMIN_USER's"`
	MetricsPassword string        `envconfig:"METRICS_PASSWORD" desc:"METRICS_USER's password"`
	ShutdownTimeout time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"30s" desc:"graceful-stop budget"`
	LogFormat       string        `envconfig:"LOG_FORMAT" default:"json" desc:"json or text"`
	LogLevel        string        `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
	Tracing
}

// Tracing are the OpenTelemetry variables a serving process honours. The
// SDK reads them itself (every other OTEL_ variable of the SDK and the
// OTLP exporter too); they are here for the usage table, as text, so that
// a value is the SDK's to judge (see internal/tracing).
type Tracing struct {
	OTLPEndpoint        string `envconfig:"OTEL_EXPORTER_OTLP_ENDPOINT" desc:"OTLP/HTTP collector base URL (such as http://jaeger:4318); set, traces are exported"`
	OTLPTracesEndpoint  string `envconfig:"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" desc:"OTLP/HTTP traces URL, in full (.../v1/traces); set, traces are exported"`
	TracesExporter      string `envconfig:"OTEL_TRACES_EXPORTER" desc:"otlp exports traces (to localhost:4318 without an endpoint), none exports none; unset, traces are exported only with an endpoint"`
	TracesSampler       string `envconfig:"OTEL_TRACES_SAMPLER" desc:"the SDK's sampler; unset parentbased_always_on (parentbased_traceidratio with OTEL_TRACES_SAMPLER_ARG samples a share of new traces)"`
	TracesSamplerArg    string `envconfig:"OTEL_TRACES_SAMPLER_ARG" desc:"the sampler's argument: the ratio of traceidratio samplers, 0 to 1"`
	ServiceName         string `envconfig:"OTEL_SERVICE_NAME" desc:"the service of the process's spans; unset leadintake-api or leadintake-worker"`
	SDKDisabled         string `envconfig:"OTEL_SDK_DISABLED" desc:"true exports no traces or metrics, whatever the other OTEL_ variables say"`
	MetricsExporter     string `envconfig:"OTEL_METRICS_EXPORTER" desc:"otlp exports the pool's statistics and statement durations over OTLP/HTTP too (/metrics serves Prometheus either way); unset, only with OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"`
	OTLPMetricsEndpoint string `envconfig:"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT" desc:"OTLP/HTTP metrics URL, in full (.../v1/metrics); set, metrics are exported"`
	OTLPHeaders         string `envconfig:"OTEL_EXPORTER_OTLP_HEADERS" desc:"headers of every OTLP export (such as a collector's API key): comma-separated key=value, values percent-encoded; malformed, a configuration error that never shows the value"`
	OTLPTracesHeaders   string `envconfig:"OTEL_EXPORTER_OTLP_TRACES_HEADERS" desc:"headers of the traces' exports, as OTEL_EXPORTER_OTLP_HEADERS"`
	OTLPMetricsHeaders  string `envconfig:"OTEL_EXPORTER_OTLP_METRICS_HEADERS" desc:"headers of the metrics' exports, as OTEL_EXPORTER_OTLP_HEADERS"`
}

// Validate checks what Common holds beyond its types.
func (c *Common) Validate() error {
	switch {
	case c.ShutdownTimeout <= 0:
		return errors.New("SHUTDOWN_TIMEOUT must be positive")
	case (c.AdminUser == "") != (c.AdminPassword == ""):
		return errors.New("set both ADMIN_USER and ADMIN_PASSWORD, or neither")
	case (c.MetricsUser == "") != (c.MetricsPassword == ""):
		return errors.New("set both METRICS_USER and METRICS_PASSWORD, or neither")
	case c.MetricsUser != "" && c.MetricsUser == c.AdminUser && c.MetricsPassword == c.AdminPassword:
		// The scrape credential would open everything the admin one does.
		return errors.New("METRICS_USER and METRICS_PASSWORD are ADMIN_USER's and ADMIN_PASSWORD: the scrape credential must be another one")
	}
	if _, err := NewLogger(io.Discard, c.LogFormat, c.LogLevel); err != nil {
		return err
	}
	// The SDK would report a malformed value itself, quoting it.
	return tracing.ValidateHeaders(os.Getenv)
}

// NewLogger returns a structured logger writing one event per line to w:
// JSON unless format is "text"; level is debug, info, warn or error.
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("LOG_LEVEL: %q is not one of debug, info, warn, error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("LOG_FORMAT: %q is not one of json, text", format)
}

// PoolOpts are the defaults OpenPool applies where the URL says nothing.
type PoolOpts struct {
	// MaxConns is used unless the URL sets pool_max_conns.
	MaxConns int32
	// ApplicationName is used unless the URL sets application_name.
	ApplicationName string
	// RuntimeParams are PostgreSQL settings of every connection, each
	// used unless the URL sets it.
	RuntimeParams map[string]string
}

// OpenPool parses a PostgreSQL URL and returns a pool. It does not wait for
// the database: a process starts, and reports unready, while the database is
// down. A connection attempt gives up after 5 s unless the URL sets
// connect_timeout. With target_session_attrs=read-write (or primary), as
// a URL naming a primary and its standby sets it, a connection whose server
// stops taking writes is dropped from the pool.
func OpenPool(ctx context.Context, databaseURL string, opts PoolOpts) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", redact(err, databaseURL))
	}
	if opts.MaxConns > 0 && !urlSets(databaseURL, "pool_max_conns") {
		cfg.MaxConns = opts.MaxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if opts.ApplicationName != "" && cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = opts.ApplicationName
	}
	for k, v := range opts.RuntimeParams {
		if _, set := cfg.ConnConfig.RuntimeParams[k]; !set {
			cfg.ConnConfig.RuntimeParams[k] = v
		}
	}
	// Statements in a traced context are spans of it; their parameters
	// are never recorded.
	tracing.TracePool(cfg)
	if writable := urlParam(databaseURL, "target_session_attrs"); writable == "read-write" || writable == "primary" {
		// A connection is checked for a server that takes writes when it
		// is made; a server that stops taking them later (a primary fenced
		// or demoted in a failover) says so on the connection's next
		// answer. Such a connection is dropped, so that the next one finds
		// the new primary, rather than kept to fail every write (and read
		// what the new primary no longer holds) until it breaks.
		cfg.PrepareConn = func(_ context.Context, c *pgx.Conn) (bool, error) { return !readOnly(c.PgConn()), nil }
		cfg.AfterRelease = func(c *pgx.Conn) bool { return !readOnly(c.PgConn()) }
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database pool: %w", err)
	}
	return pool, nil
}

// readOnly reports whether the server of c takes no writes, as it last
// reported (PostgreSQL 14 and later report both settings on every change).
func readOnly(c *pgconn.PgConn) bool {
	return c.ParameterStatus("default_transaction_read_only") == "on" || c.ParameterStatus("in_hot_standby") == "on"
}

// urlSets reports whether a URL or key=value connection string sets param.
func urlSets(databaseURL, param string) bool {
	if u, err := url.Parse(databaseURL); err == nil && u.Scheme != "" {
		return u.Query().Has(param)
	}
	return strings.Contains(databaseURL, param+"=")
}

// urlParam returns the value a URL or key=value connection string gives
// param ("" for none).
func urlParam(databaseURL, param string) string {
	if u, err := url.Parse(databaseURL); err == nil && u.Scheme != "" {
		return u.Query().Get(param)
	}
	for _, field := range strings.Fields(databaseURL) {
		if v, ok := strings.CutPrefix(field, param+"="); ok {
			return strings.Trim(v, "'")
		}
	}
	return ""
}

// redact keeps a password in the URL out of an error message.
func redact(err error, databaseURL string) error {
	msg := err.Error()
	if u, perr := url.Parse(databaseURL); perr == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	return errors.New(msg)
}

// Process is a running serving process: what every binary has (a logger, a
// pool, a metrics registry) and the work it does until its context ends.
type Process struct {
	Logger   *slog.Logger
	Pool     *pgxpool.Pool
	Registry *prometheus.Registry

	common  *Common
	hangups *hangups // nil when SIGHUP is not caught (run in-process)
	// flush sends the spans still buffered (tracing.Setup).
	flush  func(context.Context) error
	group  *errgroup.Group
	ctx    context.Context
	cancel context.CancelFunc
}

// Start opens what a process needs: the logger (on stdout), the tracer
// provider (tracing.Setup, under the service name pool.ApplicationName
// unless OTEL_SERVICE_NAME is set), the pool and a registry holding the Go
// runtime's and the process's own metrics. The process's work stops when
// ctx ends; Wait waits for it.
func Start(ctx context.Context, c *Common, stdout io.Writer, pool PoolOpts) (*Process, error) {
	logger, err := NewLogger(stdout, c.LogFormat, c.LogLevel)
	if err != nil {
		return nil, err
	}
	flush, traced, err := tracing.Setup(ctx, pool.ApplicationName, tracing.Options{})
	if err != nil {
		return nil, err
	}
	if traced {
		logger.Info("traces exported", slog.String("service", pool.ApplicationName))
	}
	p, err := OpenPool(ctx, c.DatabaseURL, pool)
	if err != nil {
		return nil, errors.Join(err, flush(ctx))
	}
	// Exported only with an OTLP meter provider (OTEL_METRICS_EXPORTER);
	// the Prometheus metrics of /metrics are served in any case.
	if err := tracing.RecordPoolStats(p); err != nil {
		p.Close()
		return nil, errors.Join(err, flush(ctx))
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	hangups := hangupsOf(ctx)
	if hangups != nil {
		hangups.started(logger)
	}
	ctx, cancel := context.WithCancel(ctx)
	group, gctx := errgroup.WithContext(ctx)
	return &Process{Logger: logger, Pool: p, Registry: registry, common: c, hangups: hangups, group: group, ctx: gctx, cancel: cancel, flush: flush}, nil
}

// Context is done when the process is told to stop, or when any of its work
// failed.
func (p *Process) Context() context.Context { return p.ctx }

// Go runs fn as part of the process's work; its error stops the process.
func (p *Process) Go(fn func(ctx context.Context) error) {
	p.group.Go(func() error { return fn(p.ctx) })
}

// Listen opens addr for the listener named by variable (API_ADDR,
// ADMIN_ADDR), and serves srv on it as part of the process's work, until
// the process stops: then it shuts down gracefully within SHUTDOWN_TIMEOUT.
func (p *Process) Listen(variable, addr string, srv *http.Server) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", variable, err)
	}
	p.Go(func(ctx context.Context) error { return Serve(ctx, srv, ln, p.common.ShutdownTimeout) })
	return ln.Addr(), nil
}

// OnHangup runs fn, as part of the process's work, each time the process
// receives SIGHUP (to read the clients file again), and once at once when
// one came while the process started; SIGHUPs that come while fn runs are
// answered by one more run. It does nothing in a process that does not
// catch SIGHUP (run called in-process, not through Main).
func (p *Process) OnHangup(fn func()) {
	if p.hangups == nil {
		return
	}
	reload := make(chan struct{}, 1)
	if p.hangups.handle(reload) {
		reload <- struct{}{}
	}
	p.Go(func(ctx context.Context) error {
		defer p.hangups.stopping()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-reload:
				fn()
			}
		}
	})
}

// Wait waits for the process's work to end, closes the pool, and sends the
// spans still buffered, within SHUTDOWN_TIMEOUT.
func (p *Process) Wait() error {
	err := p.group.Wait()
	if p.hangups != nil {
		p.hangups.stopping()
	}
	p.cancel()
	p.Pool.Close()
	fctx, cancel := context.WithTimeout(context.Background(), p.common.ShutdownTimeout)
	defer cancel()
	if ferr := p.flush(fctx); ferr != nil {
		p.Logger.Warn("spans not flushed", slog.String("error", ferr.Error()))
	}
	return err
}

// Abort stops the process's work because its start failed with err, waits
// for it, and returns err.
func (p *Process) Abort(err error) error {
	p.cancel()
	return errors.Join(err, p.Wait())
}

// Limits every listener of both binaries applies to a request's headers: all
// of them within HeaderTimeout (else the connection is dropped), at most
// MaxHeaderBytes (else 431).
const (
	HeaderTimeout  = 10 * time.Second
	MaxHeaderBytes = 1 << 20
)

// ServerOpts are what NewServer leaves to the listener.
type ServerOpts struct {
	// ReadTimeout and WriteTimeout bound a whole request and its answer;
	// zero means none beyond the header limits.
	ReadTimeout, WriteTimeout time.Duration
	// Logger receives the server's own errors, at warn level.
	Logger *slog.Logger
}

// NewServer returns an http.Server for handler with the header limits every
// listener applies, and connections kept idle for at most two minutes.
func NewServer(handler http.Handler, opts ServerOpts) *http.Server {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: HeaderTimeout,
		ReadTimeout:       opts.ReadTimeout,
		WriteTimeout:      opts.WriteTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// Serve serves srv on ln until ctx is done, then shuts it down gracefully:
// no new connections, requests in flight finish within shutdownTimeout. It
// returns nil after a clean shutdown.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, shutdownTimeout time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("shut down %s: %w", ln.Addr(), err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// RiverLogger returns the logger for River: the same handler as logger,
// tagged component=river, at warn level and up unless level is debug (River
// reports routine job counts at info level every few seconds).
func RiverLogger(logger *slog.Logger, level string) *slog.Logger {
	min := slog.LevelWarn
	if level == "debug" {
		min = slog.LevelDebug
	}
	return slog.New(&minLevelHandler{Handler: logger.Handler(), min: min}).With(slog.String("component", "river"))
}

type minLevelHandler struct {
	slog.Handler
	min slog.Level
}

func (h *minLevelHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h *minLevelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &minLevelHandler{Handler: h.Handler.WithAttrs(attrs), min: h.min}
}

func (h *minLevelHandler) WithGroup(name string) slog.Handler {
	return &minLevelHandler{Handler: h.Handler.WithGroup(name), min: h.min}
}
