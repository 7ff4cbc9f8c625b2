// Package admin is the operators' listener: Prometheus metrics on /metrics,
// River UI under /riverui/, the operator console under /console/ (package
// console), erasures (POST /admin/erasures) and redrives (POST
// /admin/redrives) behind HTTP basic auth (/metrics also behind a scrape
// credential of its own, which opens nothing else), with cross-site browser
// writes refused, wrong credentials slowed down per address, and requests
// for another host than the one it listens on refused (DNS rebinding); and,
// for the worker, whose only listener it is, the health probes.
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
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"golang.org/x/time/rate"
	"riverqueue.com/riverui"

	"github.com/leadintake/leadintake/internal/probe"
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
	// redriveTimeout bounds a redrive likewise: its keys are re-opened in
	// one transaction, rolled back whole when it runs out.
	redriveTimeout = 45 * time.Second
)

// MaxRedriveKeys is the most keys one POST /admin/redrives may name: each
// is a statement of the redrive's one transaction.
const MaxRedriveKeys = 1000

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
	// MetricsUser and MetricsPassword, when set, are a second credential
	// that /metrics takes (beside User's) and nothing else does: what a
	// scraper holds cannot reach River UI, erasures or redrives.
	MetricsUser, MetricsPassword string
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
	// (the worker's). Ready runs at most once a second, its result shared
	// by the probes (probe.Shared).
	Ready func(ctx context.Context) error
	// Addr is the address the listener is bound to (ADMIN_ADDR): requests
	// whose Host names another host are refused (see hostCheck). Empty
	// takes any Host.
	Addr string
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
	// auth guards what the admin credential opens, metricsAuth /metrics:
	// the admin credential or the scrape one. Wrong guesses of either
	// spend the same budget of their address.
	var admins, scrapers []credential
	if o.User != "" && o.Password != "" {
		admins = append(admins, newCredential(o.User, o.Password))
	}
	if o.MetricsUser != "" && o.MetricsPassword != "" {
		scrapers = append(scrapers, newCredential(o.MetricsUser, o.MetricsPassword))
	}
	guesses := newGuessLimiter(o.Now)
	guard := func(creds []credential) func(http.Handler) http.Handler {
		if len(creds) == 0 {
			return func(h http.Handler) http.Handler { return h }
		}
		return func(h http.Handler) http.Handler { return loginAuth(creds, nil, guesses, h) }
	}
	auth, metricsAuth := guard(admins), guard(append(slices.Clone(admins), scrapers...))
	mux.Handle("GET /metrics", metricsAuth(promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{})))
	if o.Ready != nil {
		// However many probes come, the database is checked at most once
		// a second.
		ready := probe.NewShared(o.Ready, probe.Opts{Timeout: readyTimeout, Now: o.Now})
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, "ok\n")
		})
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			defer cancel()
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if err := ready.Ready(ctx); err != nil {
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
		mux.Handle("/console/", loginAuth(admins, o.ConsoleLogin, guesses, o.Console))
		mux.Handle("/console", http.RedirectHandler("/console/", http.StatusMovedPermanently))
	}
	// A browser holding the operator's basic auth must not be steered into
	// River UI's write API (cancel, retry, delete) by another site: unsafe
	// methods that a browser marks cross-site, or whose Origin is another
	// host, get 403. Clients that are not browsers send neither header and
	// pass.
	return hostCheck(o.Addr, http.NewCrossOriginProtection().Handler(mux)), nil
}

// hostCheck refuses, with 421 and before anything else, a request whose
// Host is not a name of the host the listener is bound to (addr, as
// ADMIN_ADDR gives it): a page of another site whose name a DNS rebinding
// has pointed at this address reaches the listener as a same-origin page
// of its own (its requests carry its own Host), which the cross-origin
// check cannot tell; the Host can. What is taken:
//
//   - a listener on a loopback address, or on localhost: localhost and any
//     loopback address (127.0.0.0/8, ::1), as a browser on the machine, an
//     SSH tunnel or kubectl port-forward name it;
//   - a listener on any other one address or name: that address or name;
//   - a listener on every interface (0.0.0.0, ::, or no host): any Host.
//     Its operator has published it under names the process cannot know
//     (a pod's IP, a Service's DNS name, a node's); it is reached through
//     them from the network, where basic auth and the cross-origin check
//     apply as ever.
//
// The port is not compared: a tunnel or a port-forward names another one.
func hostCheck(addr string, next http.Handler) http.Handler {
	allowed := allowedHosts(addr)
	if allowed == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed(hostOf(r.Host)) {
			// The Host sent is not echoed: it is the caller's text.
			http.Error(w, "misdirected request: the admin listener answers only to the host it listens on (ADMIN_ADDR)", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// allowedHosts returns whether a request's host (hostOf) names the host of
// addr, a listener's address; nil when any does (see hostCheck).
func allowedHosts(addr string) func(host string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil // not an address a listener opens
	}
	host = normalHost(host)
	ip, err := netip.ParseAddr(host)
	switch {
	case host == "", err == nil && ip.IsUnspecified():
		return nil
	case host == "localhost", err == nil && ip.IsLoopback():
		return func(h string) bool {
			a, err := netip.ParseAddr(h)
			return h == "localhost" || (err == nil && a.Unmap().IsLoopback())
		}
	case err == nil:
		return func(h string) bool {
			a, err := netip.ParseAddr(h)
			return err == nil && a.Unmap() == ip.Unmap()
		}
	default:
		return func(h string) bool { return h == host }
	}
}

// hostOf is the host a request's Host header names, without its port,
// brackets or trailing dot, in lower case.
func hostOf(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		hostport = h
	} else {
		hostport = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
	}
	return normalHost(hostport)
}

// normalHost is host in lower case without a trailing dot (localhost. is
// localhost).
func normalHost(host string) string {
	return strings.ToLower(strings.TrimSuffix(host, "."))
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
// "outcome"?, "since"?}: exactly one of keys (with client_id, at most
// MaxRedriveKeys) or outcome, else 400 bad_request; 200 {"redriven": N,
// "keys": [...], "skipped": [...]}. The redrive has redriveTimeout: past
// it, nothing is redriven and the answer is 503 store_unavailable.
func handleRedrive(redrive func(context.Context, *store.RedriveParams) (*store.Redriven, error), logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req redriveRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", `send {"client_id": "...", "keys": [...]} or {"outcome": "downstream_unavailable", "client_id"?, "since"?}`)
			return
		}
		if len(req.Keys) > MaxRedriveKeys {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("at most %d keys a request: send the others in more requests", MaxRedriveKeys))
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
		ctx, cancel := context.WithTimeout(r.Context(), redriveTimeout)
		defer cancel()
		done, err := redrive(ctx, &store.RedriveParams{
			ClientID: req.ClientID, Keys: req.Keys, Outcome: response.Code(req.Outcome), Since: since,
		})
		if errors.Is(err, operator.ErrBadRedrive) {
			writeError(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
		if err != nil {
			logger.ErrorContext(ctx, "redrive failed", slog.String("error", err.Error()))
			writeError(w, http.StatusServiceUnavailable, "store_unavailable", "the redrive did not complete; nothing was redriven; send it again")
			return
		}
		logger.InfoContext(ctx, "redrive", slog.Int("redriven", len(done.Keys)), slog.Int("skipped", len(done.Skipped)))
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

// credential is a user and password pair, as hashes.
type credential struct{ user, password [sha256.Size]byte }

func newCredential(user, password string) credential {
	return credential{sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))}
}

// loginAuth takes a request whose basic auth is one of creds (role
// operator) or a login that logins takes (nil for none), and hands the login
// on to next in the request's context (operator.ActorFrom). It compares
// hashes of the credentials in constant time, with every pair of creds, so
// that neither their content, their length nor which pair matched shows in
// the time taken. Each wrong pair spends one of its address's guesses
// (guessLimiter); an address with none left is answered 429 before its
// credentials are looked at, the right ones included, so that it learns
// nothing until it may guess again. Other addresses are not affected.
func loginAuth(creds []credential, logins func(user, password string) (operator.Role, bool), guesses *guessLimiter, next http.Handler) http.Handler {
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
		got := newCredential(u, p)
		match := 0
		for _, want := range creds {
			match |= subtle.ConstantTimeCompare(got.user[:], want.user[:]) & subtle.ConstantTimeCompare(got.password[:], want.password[:])
		}
		role, ok := operator.RoleOperator, match == 1
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
