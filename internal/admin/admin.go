// Package admin is the operators' listener: Prometheus metrics on /metrics,
// River UI under /riverui/, the operator console under /console/ (package
// console) and erasures and redrives on request (POST /admin/erasures,
// /admin/redrives) behind HTTP basic auth, with cross-site browser writes
// refused and wrong credentials slowed down per address.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"golang.org/x/time/rate"
	"riverqueue.com/riverui"

	"github.com/leadintake/leadintake/internal/service"
	"github.com/leadintake/leadintake/operator"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

// RiverUIPrefix is where River UI is mounted.
const RiverUIPrefix = "/riverui"

// The admin listener's time-outs, beyond the header limits of every
// listener (service.NewServer): what it is sent (River UI's requests, an
// erasure: a few kilobytes) has arrived within ReadTimeout, or the request
// fails; its answer is written within WriteTimeout, or the connection is
// closed. An erasure's own work is bounded well within WriteTimeout
// (erasureTimeout), so that its outcome is told rather than cut off.
const (
	ReadTimeout    = 15 * time.Second
	WriteTimeout   = time.Minute
	erasureTimeout = 45 * time.Second
)

// NewServer returns the http.Server of an admin listener serving handler:
// the header limits of every listener, and the admin listener's time-outs.
func NewServer(handler http.Handler, logger *slog.Logger) *http.Server {
	return service.NewServer(handler, service.ServerOpts{ReadTimeout: ReadTimeout, WriteTimeout: WriteTimeout, Logger: logger})
}

// Opts configure NewHandler.
type Opts struct {
	// Gatherer serves /metrics. Required.
	Gatherer prometheus.Gatherer
	// User and Password protect River UI (and /metrics when set). River UI is
	// served only when both are set.
	User, Password string
	// RiverClient is what River UI reads and acts through; nil serves no UI.
	RiverClient *river.Client[pgx.Tx]
	// Erase, when set (and User and Password too), serves POST
	// /admin/erasures: it erases the personal data of the client's leads
	// of one email address, and returns how many, or
	// operator.ErrUnknownClient for a client not in force.
	Erase func(ctx context.Context, clientID, email string) (int, error)
	// Redrive, when set (and User and Password too), serves POST
	// /admin/redrives: it re-opens failed keys as a retry of each would
	// (operator.Redrive).
	Redrive func(ctx context.Context, p *store.RedriveParams) (*store.Redriven, error)
	// Console, when set (and User and Password too), is served under
	// /console/, behind basic auth that takes User and Password (role
	// operator) and every login ConsoleLogin takes, and that hands the
	// login on in the request's context (operator.ActorFrom).
	Console      http.Handler
	ConsoleLogin func(user, password string) (operator.Role, bool)
	Logger       *slog.Logger
	// Now is the clock of the limit on wrong credentials; nil for
	// time.Now.
	Now func() time.Time
	// Ready, when set, serves GET /healthz (200 while the process runs)
	// and GET /readyz (200 when Ready returns nil, else 503), without
	// credentials, for a process whose admin listener is its only one
	// (the worker's).
	Ready func(ctx context.Context) error
}

// readyTimeout bounds one look of /readyz.
const readyTimeout = 3 * time.Second

// NewHandler returns the admin handler. With River UI, ctx bounds the UI's
// background work (River UI requires Start).
func NewHandler(ctx context.Context, o *Opts) (http.Handler, error) {
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	auth := func(h http.Handler) http.Handler { return h }
	// One budget of wrong credentials per address, whatever they were
	// tried on.
	guesses := newGuessLimiter(o.Now)
	if o.User != "" && o.Password != "" {
		auth = func(h http.Handler) http.Handler { return basicAuth(o.User, o.Password, guesses, h) }
	}
	mux.Handle("GET /metrics", auth(promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{})))
	if o.Ready != nil {
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, "ok\n")
		})
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			defer cancel()
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if err := o.Ready(ctx); err != nil {
				logger.WarnContext(ctx, "not ready", slog.String("error", err.Error()))
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, "not ready\n")
				return
			}
			_, _ = io.WriteString(w, "ready\n")
		})
	}

	if o.RiverClient != nil && o.User != "" && o.Password != "" {
		ui, err := riverui.NewHandler(&riverui.HandlerOpts{
			Endpoints:                riverui.NewEndpoints(o.RiverClient, nil),
			JobListHideArgsByDefault: true,
			Logger:                   logger,
			Prefix:                   RiverUIPrefix,
		})
		if err != nil {
			return nil, fmt.Errorf("river ui: %w", err)
		}
		if err := ui.Start(ctx); err != nil {
			return nil, fmt.Errorf("river ui: start: %w", err)
		}
		mux.Handle(RiverUIPrefix+"/", auth(ui))
		mux.Handle(RiverUIPrefix, http.RedirectHandler(RiverUIPrefix+"/", http.StatusMovedPermanently))
	}
	if o.Erase != nil && o.User != "" && o.Password != "" {
		mux.Handle("POST /admin/erasures", auth(handleErasure(o.Erase, logger)))
	}
	if o.Redrive != nil && o.User != "" && o.Password != "" {
		mux.Handle("POST /admin/redrives", auth(handleRedrive(o.Redrive, logger)))
	}
	if o.Console != nil && o.User != "" && o.Password != "" {
		mux.Handle("/console/", loginAuth(o.User, o.Password, o.ConsoleLogin, guesses, o.Console))
		mux.Handle("/console", http.RedirectHandler("/console/", http.StatusMovedPermanently))
	}
	// A browser holding the operator's basic auth must not be steered into
	// River UI's write API (cancel, retry, delete) by another site: unsafe
	// methods that a browser marks cross-site, or whose Origin is another
	// host, get 403. Clients that are not browsers send neither header and
	// pass.
	return http.NewCrossOriginProtection().Handler(mux), nil
}

// erasureRequest is the body of POST /admin/erasures.
type erasureRequest struct {
	ClientID string `json:"client_id"`
	Email    string `json:"email"`
}

// handleErasure answers POST /admin/erasures {"client_id", "email"} with 200
// {"erased": N}, N being 0 when nothing matched. A client not in force is
// 422 unknown_client, nothing erased or recorded; its id is in no log line
// (it may be anything the caller sent).
func handleErasure(erase func(context.Context, string, string) (int, error), logger *slog.Logger) http.Handler {
	fail := writeError
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req erasureRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil || req.ClientID == "" || req.Email == "" {
			fail(w, http.StatusBadRequest, "invalid_json", `send {"client_id": "...", "email": "..."}`)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), erasureTimeout)
		defer cancel()
		n, err := erase(ctx, req.ClientID, req.Email)
		switch {
		case errors.Is(err, operator.ErrUnknownClient):
			logger.WarnContext(ctx, "erasure refused: unknown client")
			fail(w, http.StatusUnprocessableEntity, "unknown_client", "client_id is not one of the clients in force; nothing was erased")
			return
		case errors.Is(err, operator.ErrBadEmail):
			fail(w, http.StatusUnprocessableEntity, "validation_failed", "email must be one address")
			return
		case err != nil:
			// The client is one in force: Erase checked it first.
			logger.ErrorContext(ctx, "erasure failed", slog.String("client_id", req.ClientID), slog.String("error", err.Error()))
			fail(w, http.StatusServiceUnavailable, "store_unavailable", "the erasure did not complete; nothing was erased; send it again")
			return
		}
		// The address is not logged: the log would keep what the erasure
		// removes.
		logger.InfoContext(ctx, "erasure", slog.String("client_id", req.ClientID), slog.Int("erased", n))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int{"erased": n})
	})
}

// redriveRequest is the body of POST /admin/redrives.
type redriveRequest struct {
	ClientID string   `json:"client_id"`
	Keys     []string `json:"keys"`
	Outcome  string   `json:"outcome"`
	Since    string   `json:"since"`
}

// handleRedrive answers POST /admin/redrives {"client_id"?, "keys"?,
// "outcome"?, "since"?}: exactly one of keys (with client_id) or outcome,
// else 400 bad_request; 200 {"redriven": N, "keys": [...], "skipped": [...]}.
func handleRedrive(redrive func(context.Context, *store.RedriveParams) (*store.Redriven, error), logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req redriveRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", `send {"client_id": "...", "keys": [...]} or {"outcome": "downstream_unavailable", "client_id"?, "since"?}`)
			return
		}
		var since time.Duration
		if req.Since != "" {
			var err error
			if since, err = time.ParseDuration(req.Since); err != nil || since < 0 {
				writeError(w, http.StatusBadRequest, "bad_request", `since must be a duration such as "24h"`)
				return
			}
		}
		done, err := redrive(r.Context(), &store.RedriveParams{
			ClientID: req.ClientID, Keys: req.Keys, Outcome: response.Code(req.Outcome), Since: since,
		})
		if errors.Is(err, operator.ErrBadRedrive) {
			writeError(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
		if err != nil {
			logger.ErrorContext(r.Context(), "redrive failed", slog.String("error", err.Error()))
			writeError(w, http.StatusServiceUnavailable, "store_unavailable", "the redrive did not complete; nothing was redriven; send it again")
			return
		}
		logger.InfoContext(r.Context(), "redrive", slog.Int("redriven", len(done.Keys)), slog.Int("skipped", len(done.Skipped)))
		keys, skipped := done.Keys, done.Skipped
		if keys == nil {
			keys = []store.KeyName{}
		}
		if skipped == nil {
			skipped = []store.Skipped{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"redriven": len(keys), "keys": keys, "skipped": skipped})
	})
}

// writeError answers with the API's error body.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// basicAuth compares hashes of the credentials in constant time, so that
// neither their content nor their length shows in the time taken. Each
// wrong pair spends one of its address's guesses (guessLimiter); an address
// with none left is answered 429 before its credentials are looked at, the
// right ones included, so that it learns nothing until it may guess again.
// Other addresses are not affected.
func basicAuth(user, password string, guesses *guessLimiter, next http.Handler) http.Handler {
	return loginAuth(user, password, nil, guesses, next)
}

// loginAuth is basicAuth that also takes each login that logins takes (nil
// for none), and hands the login on to next in the request's context
// (operator.ActorFrom): user, as an operator, or the login with its role.
func loginAuth(user, password string, logins func(string, string) (operator.Role, bool), guesses *guessLimiter, next http.Handler) http.Handler {
	wantUser, wantPassword := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok {
			// No credentials is no guess: a browser asks for the
			// challenge this way.
			challenge(w)
			return
		}
		guess, wait := guesses.take(r.RemoteAddr)
		if wait > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
			http.Error(w, "too many wrong credentials from this address; try again later", http.StatusTooManyRequests)
			return
		}
		gotUser, gotPassword := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		userOK := subtle.ConstantTimeCompare(gotUser[:], wantUser[:])
		passwordOK := subtle.ConstantTimeCompare(gotPassword[:], wantPassword[:])
		role, ok := operator.RoleOperator, userOK&passwordOK == 1
		if !ok && logins != nil {
			role, ok = logins(u, p)
		}
		if !ok {
			challenge(w)
			return
		}
		guess.refund()
		next.ServeHTTP(w, r.WithContext(operator.WithActor(r.Context(), operator.ConsoleLogin(u, role))))
	})
}

func challenge(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Basic realm="leadintake admin", charset="UTF-8"`)
	http.Error(w, "unauthorized", http.StatusUnauthorized)
}

// How fast one address may send wrong credentials: guessBurst at once, then
// one per guessEvery. At most maxGuessers addresses are followed; past it,
// new ones share one budget (an address is forgotten once its budget is
// whole again).
const (
	guessBurst  = 5
	guessEvery  = time.Second
	maxGuessers = 10000
)

// guessLimiter holds each address's budget of wrong credentials: an IPv4
// address, or an IPv6 address's /64 (one host may hold all of it).
type guessLimiter struct {
	now func() time.Time

	mu       sync.Mutex
	byAddr   map[string]*rate.Limiter
	overflow *rate.Limiter
}

func newGuessLimiter(now func() time.Time) *guessLimiter {
	if now == nil {
		now = time.Now
	}
	return &guessLimiter{
		now: now, byAddr: map[string]*rate.Limiter{},
		overflow: rate.NewLimiter(rate.Every(guessEvery), guessBurst),
	}
}

// guess is one credential check that spent one of its address's guesses.
type guess struct {
	r   *rate.Reservation
	now time.Time
}

// refund gives the guess back: right credentials cost nothing.
func (g guess) refund() { g.r.CancelAt(g.now) }

// take spends one guess of the address of remoteAddr (host:port), or, when
// it has none left, returns how long until it has one.
func (g *guessLimiter) take(remoteAddr string) (guess, time.Duration) {
	now := g.now()
	r := g.limiter(remoteAddr, now).ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return guess{}, d
	}
	return guess{r: r, now: now}, 0
}

func (g *guessLimiter) limiter(remoteAddr string, now time.Time) *rate.Limiter {
	key := remoteAddr
	if ap, err := netip.ParseAddrPort(remoteAddr); err == nil {
		addr := ap.Addr().Unmap()
		key = addr.String()
		if addr.Is6() {
			key = netip.PrefixFrom(addr, 64).Masked().String()
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if l, ok := g.byAddr[key]; ok {
		return l
	}
	if len(g.byAddr) >= maxGuessers {
		for k, l := range g.byAddr {
			if l.TokensAt(now) >= guessBurst {
				delete(g.byAddr, k)
			}
		}
		if len(g.byAddr) >= maxGuessers {
			return g.overflow
		}
	}
	l := rate.NewLimiter(rate.Every(guessEvery), guessBurst)
	g.byAddr[key] = l
	return l
}
