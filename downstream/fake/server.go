package fake

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leadintake/leadintake/internal/standin"
	"github.com/leadintake/leadintake/webhook"
)

// maxBody bounds a request body; larger ones get 413.
const maxBody = 1 << 20

// Options configure a Server. The zero Options serve every target without
// authentication.
type Options struct {
	// EnrichmentToken, when set, is required as "Authorization: Bearer
	// <token>" on enrichment requests; others get 401.
	EnrichmentToken string
	// CRMToken, when set, is required likewise on every CRM request.
	CRMToken string
	// NotifyToken, when set, is required likewise on notifications.
	NotifyToken string
	// CreateConflict makes POST /crm/leads answer 409 when a record for the
	// external_ref exists, instead of creating another one.
	CreateConflict bool
	// CallbackSecret, when set, verifies the Standard Webhooks signature of
	// every callback: one that does not verify (signature, or timestamp
	// more than 5 minutes away) is recorded as unverified and answered 401.
	// The zero Secret, the default, checks nothing: callbacks are recorded
	// as unverified and answered 200.
	CallbackSecret webhook.Secret
	// Logger receives one event per request; nil discards them.
	Logger *slog.Logger
}

// Server is the fake downstream: an http.Handler serving the enrichment
// service, the CRM and the notification service, with faults on demand and a
// record of what it received. Its methods are safe for concurrent use.
//
// Call Close before closing the HTTP server that serves it, so that hung
// requests end: with httptest, register s.Close after ts.Close in t.Cleanup
// (cleanups run last-registered first). The fake starts no goroutines of its
// own.
type Server struct {
	opts   Options
	logger *slog.Logger
	mux    *http.ServeMux

	kit *standin.Kit

	mu            sync.Mutex
	requests      map[Target]int
	crm           map[string]*crmEntry
	crmSeq        int
	notifications map[string]*notification
	enrichCalls   int
	callbacks     map[string]*callback
	callbackSeq   int
	// traceParents are the traceparent headers received, by target, in
	// order of arrival ("" for a request without one).
	traceParents map[Target][]string
	// callbackSecret is Options.CallbackSecret unless SetCallbackSecret
	// replaced it.
	callbackSecret webhook.Secret
	// refusing refuses every request's credentials (401), as a service
	// does with a revoked token, until SetRefuseCredentials(false).
	refusing bool
}

// crmEntry is what the CRM holds for one external_ref.
type crmEntry struct {
	ids    []string
	writes int
	bodies [][]byte // every write applied, as received
	key    string
}

// notification is what the notification service holds for one key.
type notification struct {
	deliveries int
	firstBody  []byte
}

// callback is what the callback receiver holds for one webhook-id.
type callback struct {
	seq       int // the order of first arrival, for Callbacks
	client    string
	typ       string
	firstBody []byte
	attempts  []CallbackAttempt
	accepted  int // attempts answered 200
}

// New returns a Server with opts (nil means the zero Options).
func New(opts *Options) *Server {
	targets := make([]string, 0, len(Targets()))
	for _, t := range Targets() {
		targets = append(targets, string(t))
	}
	s := &Server{kit: standin.New(targets...)}
	if opts != nil {
		s.opts = *opts
	}
	s.logger = s.opts.Logger
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	s.reset()
	s.mux = http.NewServeMux()
	s.routes()
	return s
}

func (s *Server) routes() {
	s.mux.HandleFunc("POST /enrichment", s.serve(Enrichment, s.enrich))
	s.mux.HandleFunc("PUT /crm/leads/{ref}", s.serve(CRMUpsert, s.crmUpsert))
	s.mux.HandleFunc("POST /crm/leads", s.serve(CRMCreate, s.crmCreate))
	s.mux.HandleFunc("GET /crm/leads", s.serve(CRMLookup, s.crmLookup))
	s.mux.HandleFunc("POST /notify", s.serve(Notify, s.notify))
	s.mux.HandleFunc("POST /callbacks/{client}", s.serve(Callback, s.receiveCallback))

	s.mux.HandleFunc("POST /_fake/script", s.handleScript)
	s.mux.HandleFunc("POST /_fake/chaos", s.handleChaos)
	s.mux.HandleFunc("POST /_fake/reset", s.handleReset)
	s.mux.HandleFunc("GET /_fake/state", s.handleState)
	s.mux.HandleFunc("GET /_fake/crm", s.handleCRMRecords)
}

// ServeHTTP serves
//
//	POST /enrichment                 enrichment
//	PUT  /crm/leads/{external_ref}   CRM upsert
//	POST /crm/leads                  CRM create (not idempotent)
//	GET  /crm/leads?external_ref=X   CRM look-up
//	POST /notify                     notification
//	POST /callbacks/{client}         callback (Standard Webhooks)
//
// and the control API: POST /_fake/script, POST /_fake/chaos, POST
// /_fake/reset, GET /_fake/state and GET /_fake/crm (the CRM's records
// with every write's body, as a CRM would show them).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// Close ends every hung or delayed request at once, now and from now on;
// the Server otherwise keeps answering. It is safe to call more than once.
func (s *Server) Close() { s.kit.Close() }

// Script queues faults for target: each of its next requests meets the next
// fault, before any chaos; then normal behaviour (or chaos) resumes.
func (s *Server) Script(target Target, faults ...Fault) { s.kit.Script(string(target), faults...) }

// SetChaos sets target's random fault mix, replacing the previous one and
// restarting its generator from c.Seed and the target; the zero Chaos turns
// it off. It
// returns an error for rates outside [0, 1] or adding up to more than 1.
func (s *Server) SetChaos(target Target, c Chaos) error { return s.kit.SetChaos(string(target), c) }

// SetCallbackSecret replaces the secret that callbacks are verified with
// (the zero Secret checks nothing), as a receiver does when a secret
// rotates, until Reset restores Options.CallbackSecret.
func (s *Server) SetCallbackSecret(secret webhook.Secret) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.callbackSecret = secret
}

// TraceParents returns the traceparent header of every request target
// received, faulted or not, in order of arrival ("" for a request that
// had none).
func (s *Server) TraceParents(target Target) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.traceParents[target]...)
}

// Reset forgets every record, notification, callback, count, scripted fault
// and chaos mix, as if the Server were new; its Options stay.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reset()
}

func (s *Server) reset() {
	s.kit.Reset()
	s.requests = make(map[Target]int)
	s.crm = make(map[string]*crmEntry)
	s.crmSeq = 0
	s.notifications = make(map[string]*notification)
	s.enrichCalls = 0
	s.callbacks = make(map[string]*callback)
	s.callbackSeq = 0
	s.traceParents = make(map[Target][]string)
	s.callbackSecret = s.opts.CallbackSecret
}

// reply is a handler's answer, written unless a fault withholds it.
type reply struct {
	status int
	body   any
}

// serve wraps h, the normal behaviour of target, with the counting, the
// faults, the authentication and the logging that every target shares.
func (s *Server) serve(target Target, h func(*http.Request, []byte) reply) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests[target]++
		s.traceParents[target] = append(s.traceParents[target], r.Header.Get("traceparent"))
		s.mu.Unlock()
		f := s.kit.Next(string(target))

		// Reading the body to its end first also lets net/http notice a
		// client that gives up, which is what ends a hang.
		body, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		ref := externalRef(r, body)
		log := func(status int, outcome string) {
			attrs := []slog.Attr{
				slog.String("method", r.Method),
				slog.String("path", pathTemplate(r)),
				slog.Int("status", status),
			}
			if ref != "" {
				attrs = append(attrs, slog.String("external_ref", ref))
			}
			if id := r.Header.Get(webhook.HeaderID); target == Callback && id != "" {
				attrs = append(attrs, slog.String("webhook_id", id))
			}
			if outcome != "" {
				attrs = append(attrs, slog.String("fault", outcome))
			}
			s.logger.LogAttrs(r.Context(), slog.LevelInfo, "fake downstream request", attrs...)
		}

		if goOn, status, outcome := s.kit.Before(w, r, f); !goOn {
			log(status, outcome)
			return
		}

		var rep reply
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(readErr, &tooLarge):
			rep = errorReply(http.StatusRequestEntityTooLarge, "body too large")
		case readErr != nil:
			rep = errorReply(http.StatusBadRequest, "unreadable body")
		case !s.authorized(target, r):
			rep = errorReply(http.StatusUnauthorized, "unauthorized")
		default:
			rep = h(r, body)
		}

		s.kit.After(w, r, f, standin.JSON(rep.status, rep.body))
		log(rep.status, f.String())
	}
}

// SetRefuseCredentials makes the enrichment service, the CRM and the
// notification service refuse every request's credentials with 401 (as a
// service does after a token is revoked), or accept them again.
func (s *Server) SetRefuseCredentials(refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refusing = refuse
}

func (s *Server) authorized(target Target, r *http.Request) bool {
	s.mu.Lock()
	refusing := s.refusing
	s.mu.Unlock()
	if refusing && target != Callback {
		return false
	}
	var token string
	switch target {
	case Enrichment:
		token = s.opts.EnrichmentToken
	case CRMUpsert, CRMCreate, CRMLookup:
		token = s.opts.CRMToken
	case Notify:
		token = s.opts.NotifyToken
	}
	if token == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// enrich answers from the email's domain alone: the same domain always gets
// the same answer, and one ending in ".nodata" gets 404.
func (s *Server) enrich(_ *http.Request, body []byte) reply {
	var req struct {
		LeadID  string `json:"lead_id"`
		Email   string `json:"email"`
		Company string `json:"company"`
		Website string `json:"website"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return errorReply(http.StatusBadRequest, "invalid JSON")
	}
	at := strings.LastIndexByte(req.Email, '@')
	if at < 1 || at == len(req.Email)-1 {
		return errorReply(http.StatusBadRequest, "email is not local@domain")
	}
	domain := strings.ToLower(req.Email[at+1:])

	s.mu.Lock()
	s.enrichCalls++
	s.mu.Unlock()

	if strings.HasSuffix(domain, ".nodata") {
		return errorReply(http.StatusNotFound, "no data")
	}
	return reply{http.StatusOK, enrichment(domain)}
}

// EnrichmentFor returns the answer the fake gives for an email at domain
// (without the "@"): what a test expects the worker to have received. It
// reports false for a domain without data (ending in ".nodata").
func EnrichmentFor(domain string) (EnrichmentAnswer, bool) {
	domain = strings.ToLower(domain)
	if strings.HasSuffix(domain, ".nodata") {
		return EnrichmentAnswer{}, false
	}
	return enrichment(domain).EnrichmentAnswer, true
}

// EnrichmentAnswer is the enrichment service's answer for one domain.
type EnrichmentAnswer struct {
	CompanySize int    `json:"company_size"`
	Industry    string `json:"industry"`
	Seniority   string `json:"seniority"`
	Country     string `json:"country"`
}

// enrichmentBody is the answer on the wire, with members the contract does
// not name: clients must ignore them.
type enrichmentBody struct {
	EnrichmentAnswer
	Confidence float64 `json:"confidence"`
	Meta       struct {
		Source   string   `json:"source"`
		Sections []string `json:"sections"`
	} `json:"meta"`
}

func enrichment(domain string) enrichmentBody {
	h := fnv.New64a()
	h.Write([]byte(domain))
	x := h.Sum64()
	sizes := []int{4, 12, 35, 80, 240, 600, 1500, 8000}
	industries := []string{"software", "finance", "healthcare", "manufacturing", "retail", "education", "logistics", "media"}
	seniorities := []string{"junior", "mid", "senior", "director", "executive"}
	countries := []string{"US", "GB", "DE", "FR", "NL", "ES", "IT", "SE", "CA", "AU"}
	var b enrichmentBody
	b.CompanySize = sizes[x%uint64(len(sizes))]
	b.Industry = industries[(x>>8)%uint64(len(industries))]
	b.Seniority = seniorities[(x>>16)%uint64(len(seniorities))]
	b.Country = countries[(x>>24)%uint64(len(countries))]
	b.Confidence = float64((x>>32)%100) / 100
	b.Meta.Source = "fake"
	b.Meta.Sections = []string{"firmographics", "contact"}
	return b
}

// crmUpsert creates the record of the path's external_ref (201) or updates
// it (200), answering its id either way.
func (s *Server) crmUpsert(r *http.Request, body []byte) reply {
	ref := r.PathValue("ref")
	got, rep, ok := leadRef(body)
	if !ok {
		return rep
	}
	if got != ref {
		return errorReply(http.StatusBadRequest, "external_ref differs from the path's")
	}
	key := r.Header.Get("Idempotency-Key")
	if !crmKeyOf(key, ref) {
		return errorReply(http.StatusBadRequest, "Idempotency-Key must be the external_ref, or external_ref:amend:N")
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.crm[ref]
	status := http.StatusOK
	if e == nil || len(e.ids) == 0 {
		e = s.crmRecord(ref)
		status = http.StatusCreated
	}
	e.writes++
	e.bodies, e.key = append(e.bodies, body), key
	return reply{status, map[string]string{"id": e.ids[0]}}
}

// crmCreate creates a new record on every call, even for an external_ref
// that has one: a duplicate request leaves a duplicate record. With
// CreateConflict, an existing record gets 409 instead.
func (s *Server) crmCreate(r *http.Request, body []byte) reply {
	ref, rep, ok := leadRef(body)
	if !ok {
		return rep
	}
	key := r.Header.Get("Idempotency-Key")
	if key != "" && !crmKeyOf(key, ref) {
		return errorReply(http.StatusBadRequest, "Idempotency-Key must be the external_ref, or external_ref:amend:N")
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.crm[ref]; e != nil && len(e.ids) > 0 && s.opts.CreateConflict {
		return reply{http.StatusConflict, map[string]string{"error": "conflict", "id": e.ids[0]}}
	}
	e := s.crmRecord(ref)
	e.writes++
	e.bodies, e.key = append(e.bodies, body), key
	return reply{http.StatusCreated, map[string]string{"id": e.ids[len(e.ids)-1]}}
}

// crmKeyOf reports whether key is an Idempotency-Key the contract allows
// for a CRM write of ref: the reference itself, or ref:amend:N for the N-th
// amendment along a chain.
func crmKeyOf(key, ref string) bool {
	if key == ref {
		return true
	}
	n, ok := strings.CutPrefix(key, ref+":amend:")
	if !ok {
		return false
	}
	i, err := strconv.Atoi(n)
	return err == nil && i > 0 && strconv.Itoa(i) == n
}

// crmRecord adds a record for ref and returns its entry; s.mu must be held.
func (s *Server) crmRecord(ref string) *crmEntry {
	e := s.crm[ref]
	if e == nil {
		e = &crmEntry{}
		s.crm[ref] = e
	}
	s.crmSeq++
	e.ids = append(e.ids, fmt.Sprintf("crm_%06d", s.crmSeq))
	return e
}

// crmLookup answers the id of the first record of an external_ref.
func (s *Server) crmLookup(r *http.Request, _ []byte) reply {
	ref := r.URL.Query().Get("external_ref")
	if ref == "" {
		return errorReply(http.StatusBadRequest, "external_ref query parameter missing")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.crm[ref]; e != nil && len(e.ids) > 0 {
		return reply{http.StatusOK, map[string]string{"id": e.ids[0]}}
	}
	return errorReply(http.StatusNotFound, "not found")
}

// leadRef returns the external_ref of a lead sent to the CRM, or the 400
// that a body without one, or not a JSON object, gets.
func leadRef(body []byte) (string, reply, bool) {
	var lead map[string]json.RawMessage
	if err := json.Unmarshal(body, &lead); err != nil || lead == nil {
		return "", errorReply(http.StatusBadRequest, "invalid JSON"), false
	}
	var ref, email string
	if err := json.Unmarshal(lead["external_ref"], &ref); err != nil || ref == "" {
		return "", errorReply(http.StatusBadRequest, "external_ref missing"), false
	}
	if err := json.Unmarshal(lead["email"], &email); err != nil || email == "" {
		// The record's one required field, as a CRM requires one.
		return "", errorReply(http.StatusUnprocessableEntity, "email required"), false
	}
	return ref, reply{}, true
}

// notify delivers a notification once per Idempotency-Key: the first
// delivery gets 202, repeats 200, and both are counted.
func (s *Server) notify(r *http.Request, body []byte) reply {
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(body, &msg); err != nil || msg == nil {
		return errorReply(http.StatusBadRequest, "invalid JSON")
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		return errorReply(http.StatusBadRequest, "Idempotency-Key missing")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.notifications[key]; n != nil {
		n.deliveries++
		return reply{http.StatusOK, map[string]string{"status": "duplicate"}}
	}
	s.notifications[key] = &notification{deliveries: 1, firstBody: body}
	return reply{http.StatusAccepted, map[string]string{"status": "sent"}}
}

// receiveCallback records a callback delivery under its webhook-id, the
// same on every attempt, and answers 200 ("received" the first time,
// "duplicate" after); with a callback secret, an attempt whose signature
// does not verify is recorded as such and answered 401. A request without
// webhook-id, or whose body is not a JSON object, gets 400 and is not
// recorded.
func (s *Server) receiveCallback(r *http.Request, body []byte) reply {
	id := r.Header.Get(webhook.HeaderID)
	if id == "" {
		return errorReply(http.StatusBadRequest, "webhook-id missing")
	}
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(body, &msg); err != nil || msg == nil {
		return errorReply(http.StatusBadRequest, "invalid JSON")
	}
	var typ string
	_ = json.Unmarshal(msg["type"], &typ)

	now := time.Now()
	s.mu.Lock()
	secret := s.callbackSecret
	s.mu.Unlock()
	attempt := CallbackAttempt{ReceivedAt: now, Problem: "not checked: no callback secret"}
	// Recorded whatever it is, so that a test sees what the sender put
	// there, not only whether it verified.
	if unix, err := strconv.ParseInt(r.Header.Get(webhook.HeaderTimestamp), 10, 64); err == nil {
		attempt.Timestamp = time.Unix(unix, 0).UTC()
	}
	if !secret.IsZero() {
		_, err := webhook.Verify([]webhook.Secret{secret}, r.Header, body, now, webhook.DefaultTolerance)
		attempt.Verified, attempt.Problem = err == nil, ""
		if err != nil {
			attempt.Problem = err.Error()
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.callbacks[id]
	if c == nil {
		s.callbackSeq++
		c = &callback{seq: s.callbackSeq, client: r.PathValue("client"), typ: typ, firstBody: body}
		s.callbacks[id] = c
	}
	c.attempts = append(c.attempts, attempt)
	if !secret.IsZero() && !attempt.Verified {
		return errorReply(http.StatusUnauthorized, "signature invalid")
	}
	if c.accepted++; c.accepted > 1 {
		return reply{http.StatusOK, map[string]string{"status": "duplicate"}}
	}
	return reply{http.StatusOK, map[string]string{"status": "received"}}
}

func errorReply(status int, msg string) reply {
	return reply{status, map[string]string{"error": msg}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// externalRef finds the request's external_ref for the logs: in the path,
// the query or the body, whichever has one.
func externalRef(r *http.Request, body []byte) string {
	if ref := r.PathValue("ref"); ref != "" {
		return ref
	}
	if ref := r.URL.Query().Get("external_ref"); ref != "" {
		return ref
	}
	var v struct {
		ExternalRef string `json:"external_ref"`
	}
	_ = json.Unmarshal(body, &v)
	return v.ExternalRef
}

// pathTemplate is the route's path, with {ref} rather than the reference.
func pathTemplate(r *http.Request) string {
	if _, path, ok := strings.Cut(r.Pattern, " "); ok {
		return path
	}
	return r.Pattern
}
