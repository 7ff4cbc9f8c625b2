// Package admin is the operators' listener: Prometheus metrics on /metrics,
// and River UI under /riverui/ behind HTTP basic auth, with cross-site
// browser writes refused.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"
)

// RiverUIPrefix is where River UI is mounted.
const RiverUIPrefix = "/riverui"

// Opts configure NewHandler.
type Opts struct {
	// Gatherer serves /metrics. Required.
	Gatherer prometheus.Gatherer
	// User and Password protect River UI (and /metrics when set). River UI is
	// served only when both are set.
	User, Password string
	// RiverClient is what River UI reads and acts through; nil serves no UI.
	RiverClient *river.Client[pgx.Tx]
	Logger      *slog.Logger
}

// NewHandler returns the admin handler. With River UI, ctx bounds the UI's
// background work (River UI requires Start).
func NewHandler(ctx context.Context, o *Opts) (http.Handler, error) {
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	auth := func(h http.Handler) http.Handler { return h }
	if o.User != "" && o.Password != "" {
		auth = func(h http.Handler) http.Handler { return basicAuth(o.User, o.Password, h) }
	}
	mux.Handle("GET /metrics", auth(promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{})))

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
	// A browser holding the operator's basic auth must not be steered into
	// River UI's write API (cancel, retry, delete) by another site: unsafe
	// methods that a browser marks cross-site, or whose Origin is another
	// host, get 403. Clients that are not browsers send neither header and
	// pass.
	return http.NewCrossOriginProtection().Handler(mux), nil
}

// basicAuth compares hashes of the credentials in constant time, so that
// neither their content nor their length shows in the time taken.
func basicAuth(user, password string, next http.Handler) http.Handler {
	wantUser, wantPassword := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		gotUser, gotPassword := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		userOK := subtle.ConstantTimeCompare(gotUser[:], wantUser[:])
		passwordOK := subtle.ConstantTimeCompare(gotPassword[:], wantPassword[:])
		if !ok || userOK&passwordOK != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="leadintake admin", charset="UTF-8"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
