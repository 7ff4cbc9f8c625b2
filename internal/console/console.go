package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/leadintake/leadintake/operator"
	"github.com/leadintake/leadintake/store"
)

// Prefix is where the console is served.
const Prefix = "/console/"

//go:embed templates/*.html static/*
var files embed.FS

// Opts configure NewHandler.
type Opts struct {
	// Operator is what every page reads and acts through. Required.
	Operator *operator.Operator
	Logger   *slog.Logger
	// Now is the clock of the pages' relative times; nil for time.Now.
	Now func() time.Time
	// Timeout bounds one page's database work; default 30s.
	Timeout time.Duration
}

// handler serves the console's pages.
type handler struct {
	op      *operator.Operator
	logger  *slog.Logger
	now     func() time.Time
	timeout time.Duration
	pages   map[string]*page
}

// NewHandler returns the console's handler. It expects the login of each
// request in its context (operator.WithActor: the admin listener's
// authentication) and answers 401 without one.
func NewHandler(o *Opts) (http.Handler, error) {
	if o.Operator == nil {
		return nil, errors.New("console: no Operator")
	}
	h := &handler{op: o.Operator, logger: o.Logger, now: o.Now, timeout: o.Timeout}
	if h.logger == nil {
		h.logger = slog.New(slog.DiscardHandler)
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.timeout <= 0 {
		h.timeout = 30 * time.Second
	}
	var err error
	if h.pages, err = parsePages(); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	h.addRoutes(mux)
	return h.secure(mux), nil
}

// addRoutes lists every page of the console.
func (h *handler) addRoutes(mux *http.ServeMux) {
	static, _ := fs.Sub(files, "static")
	mux.Handle("GET "+Prefix+"static/", http.StripPrefix(Prefix+"static/", http.FileServerFS(static)))
	mux.Handle("GET "+Prefix+"{$}", http.RedirectHandler(Prefix+"leads", http.StatusFound))
	mux.HandleFunc("GET "+Prefix+"leads", h.handleLeads)
	mux.HandleFunc("GET "+Prefix+"keys/{client}/{key}", h.handleLead)
	mux.HandleFunc("POST "+Prefix+"keys/{client}/{key}/enquiry", h.writes(h.handleEnquiry))
	mux.HandleFunc("POST "+Prefix+"keys/{client}/{key}/settle", h.writes(h.handleSettle))
	mux.HandleFunc("GET "+Prefix+"quarantine", h.handleQuarantine)
	mux.HandleFunc("POST "+Prefix+"quarantine/release", h.writes(h.handleRelease))
	mux.HandleFunc("GET "+Prefix+"redrive", h.handleRedriveForm)
	mux.HandleFunc("POST "+Prefix+"redrive", h.writes(h.handleRedrive))
	mux.HandleFunc("GET "+Prefix+"destinations", h.handleDestinations)
	mux.HandleFunc("GET "+Prefix+"audit", h.handleAudit)
	mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "There is no such page.")
	})
}

// secure sets the headers of every answer, and answers 401 to a request
// that carries no login. The pages hold no script of their own inline and
// load nothing from elsewhere: the content security policy says so, and a
// visitor's text that escaped its escaping still could not run.
func (h *handler) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		// Nothing of the console is kept by a browser or a proxy: an
		// enquiry shown is personal data.
		hd.Set("Cache-Control", "no-store")
		if _, ok := operator.ActorFrom(r.Context()); !ok {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// maxFormBytes bounds a form: ten thousand keys fit, to be refused with a
// message rather than cut off.
const maxFormBytes = 2 << 20

// writes guards a handler that acts or shows an enquiry: a browser's
// request must come from the console's own pages (Sec-Fetch-Site
// same-origin, or else an Origin of this host: a form that another site
// made is refused, and so is one without either, which no browser sends
// with a form), and the login must be an operator's. The admin listener's
// cross-origin protection runs first; this one is the console's own, also
// against a browser that sends no Sec-Fetch-Site.
func (h *handler) writes(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r) {
			h.fail(w, r, http.StatusForbidden, "This form was not sent from the console's own pages: nothing was done.")
			return
		}
		if who, _ := operator.ActorFrom(r.Context()); !who.CanAct() {
			h.fail(w, r, http.StatusForbidden, "Your login is a viewer's: it may look, not act or see enquiries. Nothing was done.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			// Too large, or too many values for Go to parse (ten thousand
			// at most).
			h.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf(
				"The form is too large for one request: at most %d keys at once. Nothing was done.", operator.MaxKeys))
			return
		}
		next(w, r)
	}
}

// sameOrigin reports whether r, a write, was sent by a page of this
// origin.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin":
		return true
	case "":
	default:
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" || origin == "null" {
		return false
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// who returns the request's login.
func who(r *http.Request) operator.Actor {
	a, _ := operator.ActorFrom(r.Context())
	return a
}

// failStore answers a failure of the operator's work: a missing key, a
// refusal of the role, or the database's trouble.
func (h *handler) failStore(w http.ResponseWriter, r *http.Request, err error, what string) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		h.fail(w, r, http.StatusNotFound, "No such key for that client (or it expired).")
	case errors.Is(err, operator.ErrForbidden):
		h.fail(w, r, http.StatusForbidden, "Your login is a viewer's: it may look, not act or see enquiries. Nothing was done.")
	default:
		h.logger.ErrorContext(r.Context(), "console: "+what, slog.String("error", err.Error()))
		h.fail(w, r, http.StatusServiceUnavailable, "The database did not answer in time ("+what+"): nothing was done. Try again.")
	}
}
