package intake

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/spam"
	"github.com/leadintake/leadintake/store"
)

// Defaults of HandlerOpts.
const (
	DefaultMaxBodyBytes   = 64 << 10
	DefaultRequestTimeout = 5 * time.Second
)

// HandlerOpts configure NewHandler.
type HandlerOpts struct {
	// Store claims keys; its Jobs (store.UseJobs) enqueue the claimed
	// leads' jobs.
	Store *store.Store
	// Callers are the clients in force (swapped when the clients file is
	// read again).
	Callers *callers.Holder
	Decode  lead.DecodeOpts
	// MaxBodyBytes bounds a body; larger ones get 413. Default
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// RequestTimeout bounds one request's database work; past it 503.
	// Default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger receives one line per request. Default: discard.
	Logger *slog.Logger
	// Metrics may be nil.
	Metrics *Metrics
	// Waiters holds the requests that ask to wait (Prefer: wait); MaxWait
	// bounds the wait. Defaults: a set of DefaultMaxWaiters, which nothing
	// wakes but its poll, and DefaultMaxWait.
	Waiters *Waiters
	MaxWait time.Duration
	// PublicRateLimit bounds the new submissions of one publishable key
	// from one address, per api process; zero for DefaultPublicRateLimit.
	PublicRateLimit RateLimit
	// TrustedProxies are the peers whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	// HashKey keys the hash of each lead's email, kept to find the lead
	// for an erasure (PII_HASH_KEY), and of its content, kept to find a
	// possible duplicate. Required.
	HashKey lead.HashKey
	// Spam verifies the captchas of the publishable keys whose policy has
	// one; default a Verifier bounded by half of RequestTimeout (each
	// verification is bounded so, whatever the Verifier's own bound).
	Spam *spam.Verifier
	// KeyRetention is how long a quarantined key is kept (KEY_RETENTION);
	// default a week.
	KeyRetention time.Duration
}

// DefaultPublicRateLimit is PUBLIC_RATE_LIMIT's default: 20 a minute.
var DefaultPublicRateLimit = RateLimit{N: 20, Per: time.Minute}

// NewHandler returns the public HTTP API.
func NewHandler(opts *HandlerOpts) *echo.Echo {
	o := *opts
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Waiters == nil {
		o.Waiters = NewWaiters(0)
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.Spam == nil {
		o.Spam = spam.NewVerifier(o.RequestTimeout / 2)
	}
	if o.KeyRetention <= 0 {
		o.KeyRetention = 7 * 24 * time.Hour
	}
	if o.PublicRateLimit.N <= 0 {
		o.PublicRateLimit = DefaultPublicRateLimit
	}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(o.Logger)
	e.Use(
		traceRoute,
		dropUnfitRequestID,
		middleware.RequestIDWithConfig(middleware.RequestIDConfig{TargetHeader: echo.HeaderXRequestID}),
		observe(o.Logger, o.Metrics),
		middleware.RecoverWithConfig(middleware.RecoverConfig{
			DisableStackAll: true,
			LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
				o.Logger.ErrorContext(c.Request().Context(), "panic", slog.String("error", err.Error()), slog.String("stack", string(stack)))
				return err
			},
		}),
		refuseUnknownMethods,
		browsers(o.Callers),
	)
	addRoutes(e, &o)
	return e
}
