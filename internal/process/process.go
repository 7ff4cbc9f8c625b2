// Package process holds what both leadintake binaries do the same way: the
// logger, the database pool, and serving HTTP until the process is told to
// stop.
package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/kelseyhightower/envconfig"
)

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
}

// OpenPool parses a PostgreSQL URL and returns a pool. It does not wait for
// the database: a process starts, and reports unready, while the database is
// down. A connection attempt gives up after 5 s unless the URL sets
// connect_timeout.
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
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database pool: %w", err)
	}
	return pool, nil
}

// urlSets reports whether a URL or key=value connection string sets param.
func urlSets(databaseURL, param string) bool {
	if u, err := url.Parse(databaseURL); err == nil && u.Scheme != "" {
		return u.Query().Has(param)
	}
	return strings.Contains(databaseURL, param+"=")
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

// Usage prints header and the table of the environment variables of spec,
// an envconfig specification, with their defaults.
func Usage(w io.Writer, header string, spec any) error {
	fmt.Fprint(w, header)
	tw := tabwriter.NewWriter(w, 1, 0, 4, ' ', 0)
	if err := envconfig.Usagef("", spec, tw, envconfig.DefaultTableFormat); err != nil {
		return err
	}
	return tw.Flush()
}
