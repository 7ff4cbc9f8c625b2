// Package hubspotfake stands in for HubSpot's CRM contacts API, as the
// hubspot destination kind calls it: an http.Handler (Server) that keeps
// contacts in memory and speaks HubSpot's paths, bearer auth, answers and
// error bodies under any date version (/crm/objects/{YYYY-MM}/contacts...):
//
//	POST  .../contacts/batch/upsert         upsert by email (idProperty), 200 or 207
//	PATCH .../contacts/{id}                  update by id (or ?idProperty=email)
//	GET   .../contacts/{id}[?idProperty=email] read one
//	GET   .../contacts?limit=N               list (a destination's check)
//
// It refuses what HubSpot refuses: a wrong or missing token (401
// INVALID_AUTHENTICATION), a write with a read-only key (403
// MISSING_SCOPES), a body that is not the endpoint's JSON, an upsert by a
// property that is not unique, two inputs of one batch for one contact (the
// whole batch), an invalid email (INVALID_EMAIL), a property the portal
// does not have (PROPERTY_DOESNT_EXIST), an owner it does not know
// (INVALID_OPTION), from 2026-09 on a contact created without a property
// the portal requires (MISSING_REQUIRED_PROPERTY), an update to an email
// another contact has (409 CONFLICT), an id it does not have (404), and
// calls beyond its rate limit (429 with HubSpot's headers and body). Its
// error messages quote the refused values as HubSpot's do, so that a test
// sees a driver that would pass them on.
//
// It misbehaves on demand through an internal/standin Kit, one target per
// endpoint (TargetUpsert, TargetUpdate, TargetRead, TargetList), and is
// driven over HTTP under /_standin (script, chaos, reset, credentials,
// state). It logs method, route, status and fault: never a path, which may
// hold an email.
package hubspotfake

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/mail"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/leadintake/leadintake/internal/standin"
)

// The targets, one per endpoint.
const (
	TargetUpsert = "upsert" // POST .../contacts/batch/upsert
	TargetUpdate = "update" // PATCH .../contacts/{id}
	TargetRead   = "read"   // GET .../contacts/{id}
	TargetList   = "list"   // GET .../contacts
)

// Targets are the stand-in's targets.
var Targets = []string{TargetUpsert, TargetUpdate, TargetRead, TargetList}

// DefaultToken is the token a Server accepts when Options.Token is empty.
const DefaultToken = "hubspot-fake-token"

// StandardProperties are the contact properties every portal has, as far
// as the stand-in knows: the ones the hubspot kind writes, and a few a
// map commonly names.
var StandardProperties = []string{
	"email", "firstname", "lastname", "company", "phone", "website", "message", "hubspot_owner_id",
	"jobtitle", "lifecyclestage", "hs_lead_status", "city", "country",
}

// Options configure a Server. The zero Options accept DefaultToken, know
// StandardProperties only, any owner, require nothing, and limit nothing.
type Options struct {
	// Token is the bearer token accepted; DefaultToken when empty.
	Token string
	// CustomProperties are the portal's own contact properties, besides
	// StandardProperties.
	CustomProperties []string
	// Owners, when set, are the only hubspot_owner_id values accepted.
	Owners []string
	// RequiredOnCreate are properties the portal requires of a new
	// contact, enforced, as HubSpot does, from date version 2026-09 on.
	RequiredOnCreate []string
	// ReadOnly: the key has the read scope only; writes are 403.
	ReadOnly bool
	// TenSecondLimit is the calls allowed per rolling 10 s; 0 is none.
	TenSecondLimit int
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Logger logs each request (method, route, status, fault); none when
	// nil.
	Logger *slog.Logger
}

// Contact is a contact the stand-in holds.
type Contact struct {
	ID         string
	Properties map[string]string
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// State is what the stand-in holds, without personal data.
type State struct {
	Contacts            int            `json:"contacts"`
	Requests            map[string]int `json:"requests"`
	RefusingCredentials bool           `json:"refusing_credentials"`
}

// Server is the stand-in. Its methods are safe for concurrent use.
type Server struct {
	kit      *standin.Kit
	opts     Options
	known    map[string]bool
	mux      *http.ServeMux
	interval time.Duration

	mu       sync.Mutex
	contacts map[string]*Contact // by id
	byEmail  map[string]string   // lower-cased email → id
	nextID   int64
	refuse   bool
	requests map[string]int
	calls    []time.Time // accepted calls within the last interval
}

// New returns a Server.
func New(o *Options) *Server {
	s := &Server{kit: standin.New(Targets...), interval: 10 * time.Second}
	if o != nil {
		s.opts = *o
	}
	if s.opts.Token == "" {
		s.opts.Token = DefaultToken
	}
	if s.opts.Now == nil {
		s.opts.Now = time.Now
	}
	s.known = map[string]bool{}
	for _, p := range append(slices.Clone(StandardProperties), s.opts.CustomProperties...) {
		s.known[p] = true
	}
	s.resetState()

	mux := http.NewServeMux()
	const contacts = "/crm/objects/{version}/contacts"
	mux.HandleFunc("POST "+contacts+"/batch/upsert", s.serve(TargetUpsert, true, s.upsert))
	mux.HandleFunc("PATCH "+contacts+"/{id}", s.serve(TargetUpdate, true, s.update))
	mux.HandleFunc("GET "+contacts+"/{id}", s.serve(TargetRead, false, s.read))
	mux.HandleFunc("GET "+contacts, s.serve(TargetList, false, s.list))
	s.kit.Routes(mux, "/_standin", s.resetState)
	mux.HandleFunc("POST /_standin/credentials", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Refuse bool `json:"refuse"`
		}
		if err := standin.DecodeStrict(r, &req); err != nil {
			standin.ControlError(w, err)
			return
		}
		s.SetRefuseCredentials(req.Refuse)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /_standin/state", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.State())
	})
	s.mux = mux
	return s
}

// ServeHTTP serves HubSpot's endpoints and the control API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Kit is the stand-in's misbehaviour: Script and SetChaos per target.
func (s *Server) Kit() *standin.Kit { return s.kit }

// Script queues faults for target's next requests.
func (s *Server) Script(target string, faults ...standin.Fault) { s.kit.Script(target, faults...) }

// Close ends hung requests (see standin.Kit.Close).
func (s *Server) Close() { s.kit.Close() }

// SetRefuseCredentials makes every call refused as a revoked token is
// (401), or accepted again.
func (s *Server) SetRefuseCredentials(refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = refuse
}

// Reset forgets the contacts, the counts, the faults and the refusal.
func (s *Server) Reset() {
	s.kit.Reset()
	s.resetState()
}

func (s *Server) resetState() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.contacts, s.byEmail, s.requests = map[string]*Contact{}, map[string]string{}, map[string]int{}
	s.nextID, s.refuse, s.calls = 1000, false, nil
}

// Records is the number of contacts.
func (s *Server) Records() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.contacts)
}

// Contact returns a copy of the contact id.
func (s *Server) Contact(id string) (Contact, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.contacts[id]
	if !ok {
		return Contact{}, false
	}
	out := *c
	out.Properties = maps.Clone(c.Properties)
	return out, true
}

// ContactByEmail returns a copy of the contact whose email is email (in any
// case).
func (s *Server) ContactByEmail(email string) (Contact, bool) {
	s.mu.Lock()
	id, ok := s.byEmail[strings.ToLower(email)]
	s.mu.Unlock()
	if !ok {
		return Contact{}, false
	}
	return s.Contact(id)
}

// State returns the counts.
func (s *Server) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return State{Contacts: len(s.contacts), Requests: maps.Clone(s.requests), RefusingCredentials: s.refuse}
}

// RateLimitFault is HubSpot's answer to a call beyond its ten-second limit:
// 429 with its rate-limit headers (none remaining of the interval) and
// body.
func RateLimitFault() standin.Fault {
	return standin.Fault{Status: http.StatusTooManyRequests, Body: string(rateLimitBody()), Header: map[string]string{
		"X-HubSpot-RateLimit-Interval-Milliseconds": "10000",
		"X-HubSpot-RateLimit-Max":                   "100",
		"X-HubSpot-RateLimit-Remaining":             "0",
	}}
}

func rateLimitBody() []byte {
	b, _ := json.Marshal(map[string]string{
		"status": "error", "message": "You have reached your ten_secondly_rolling limit.", "errorType": "RATE_LIMIT",
		"correlationId": uuid.NewString(), "policyName": "TEN_SECONDLY_ROLLING", "groupName": "publicapi:service-key",
	})
	return b
}

var dateVersion = regexp.MustCompile(`^[0-9]{4}-(0[1-9]|1[0-2])$`)

// serve wraps an endpoint with what every call meets first: the target's
// fault, the token, the scope, the version and the rate limit.
func (s *Server) serve(target string, write bool, h func(r *http.Request, version string) standin.Answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests[target]++
		s.mu.Unlock()
		f := s.kit.Next(target)
		if goOn, status, outcome := s.kit.Before(w, r, f); !goOn {
			s.log(r, status, outcome)
			return
		}
		version := r.PathValue("version")
		a, limited := s.admit(r, write)
		switch {
		case a.Status != 0:
		case !dateVersion.MatchString(version):
			// A path HubSpot does not have.
			a = standin.Answer{Status: http.StatusNotFound, Header: http.Header{"Content-Type": {"text/html"}},
				Body: []byte("<html><body><h2>404 Not Found</h2></body></html>\n")}
		default:
			a = h(r, version)
		}
		if a.Header == nil {
			a.Header = http.Header{}
		}
		for k, v := range limited {
			a.Header.Set(k, v)
		}
		s.kit.After(w, r, f, a)
		s.log(r, a.Status, f.String())
	}
}

// admit checks the token, the scope and the rate limit: a non-zero answer
// refuses the call. It returns the rate-limit headers of the answer.
func (s *Server) admit(r *http.Request, write bool) (standin.Answer, map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if s.refuse || !ok || token != s.opts.Token {
		return apiError(http.StatusUnauthorized, "INVALID_AUTHENTICATION",
			"Authentication credentials not found. This API supports OAuth 2.0 authentication and you can find more details at https://developers.hubspot.com/docs/methods/auth/oauth-overview", nil), nil
	}
	if write && s.opts.ReadOnly {
		return apiError(http.StatusForbidden, "MISSING_SCOPES",
			"This app hasn't been granted all required scopes to make this call. Read more about required scopes here: https://developers.hubspot.com/scopes.",
			[]fieldError{{Message: "One or more of the following scopes are required.", Context: map[string][]string{"requiredGranularScopes": {"crm.objects.contacts.write"}}}}), nil
	}
	n := s.opts.TenSecondLimit
	if n <= 0 {
		return standin.Answer{}, nil
	}
	now := s.opts.Now()
	s.calls = slices.DeleteFunc(s.calls, func(t time.Time) bool { return now.Sub(t) >= s.interval })
	h := map[string]string{
		"X-HubSpot-RateLimit-Interval-Milliseconds": strconv.FormatInt(s.interval.Milliseconds(), 10),
		"X-HubSpot-RateLimit-Max":                   strconv.Itoa(n),
	}
	if len(s.calls) >= n {
		h["X-HubSpot-RateLimit-Remaining"] = "0"
		a := standin.Answer{Status: http.StatusTooManyRequests, Header: http.Header{"Content-Type": {"application/json"}}, Body: rateLimitBody()}
		return a, h
	}
	s.calls = append(s.calls, now)
	h["X-HubSpot-RateLimit-Remaining"] = strconv.Itoa(n - len(s.calls))
	return standin.Answer{}, h
}

func (s *Server) log(r *http.Request, status int, fault string) {
	if s.opts.Logger != nil {
		s.opts.Logger.Debug("hubspotfake", "method", r.Method, "route", r.Pattern, "status", status, "fault", fault)
	}
}

// fieldError is one error of an error body's errors.
type fieldError struct {
	Message string              `json:"message"`
	Code    string              `json:"code,omitempty"`
	Context map[string][]string `json:"context,omitempty"`
}

// errorBody is HubSpot's error body, and an error of a batch's answer.
type errorBody struct {
	Status        string              `json:"status"`
	Message       string              `json:"message"`
	CorrelationID string              `json:"correlationId,omitempty"`
	Category      string              `json:"category"`
	Context       map[string][]string `json:"context,omitempty"`
	Errors        []fieldError        `json:"errors,omitempty"`
}

func apiError(status int, category, message string, errs []fieldError) standin.Answer {
	return standin.JSON(status, errorBody{Status: "error", Message: message, CorrelationID: uuid.NewString(), Category: category, Errors: errs})
}

func notFound() standin.Answer {
	return apiError(http.StatusNotFound, "OBJECT_NOT_FOUND", "resource not found", nil)
}

// decode reads the request's JSON strictly, as HubSpot refuses a body that
// is not the endpoint's: the answer is a 400 when it is not.
func decode(r *http.Request, v any) (standin.Answer, bool) {
	if err := standin.DecodeStrict(r, v); err != nil {
		return apiError(http.StatusBadRequest, "VALIDATION_ERROR", "Invalid input JSON: "+err.Error(), nil), false
	}
	return standin.Answer{}, true
}

// propertyError is a property's validation failure.
type propertyError struct {
	code, name, message string
}

// validationMessage is HubSpot's message for failed properties: the older
// shape of the results embedded, refused values quoted.
func validationMessage(errs []propertyError) string {
	type result struct {
		IsValid bool   `json:"isValid"`
		Message string `json:"message"`
		Error   string `json:"error"`
		Name    string `json:"name"`
	}
	rs := make([]result, len(errs))
	for i, e := range errs {
		rs[i] = result{Message: e.message, Error: e.code, Name: e.name}
	}
	b, _ := json.Marshal(rs)
	return "Property values were not valid: " + string(b)
}

func fieldErrors(errs []propertyError) []fieldError {
	out := make([]fieldError, len(errs))
	for i, e := range errs {
		out[i] = fieldError{Message: e.message, Code: e.code, Context: map[string][]string{"propertyName": {e.name}}}
	}
	return out
}

// validate checks a write's properties (email is the contact's email after
// it); creating requires the portal's properties from version 2026-09 on.
func (s *Server) validate(props map[string]string, email string, creating bool, version string) []propertyError {
	var errs []propertyError
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !s.known[name] {
			errs = append(errs, propertyError{"PROPERTY_DOESNT_EXIST", name, fmt.Sprintf("Property %q does not exist", name)})
		}
	}
	if !validEmail(email) {
		errs = append(errs, propertyError{"INVALID_EMAIL", "email", fmt.Sprintf("Email address %s is invalid", email)})
	}
	if owner, ok := props["hubspot_owner_id"]; ok && len(s.opts.Owners) > 0 && !slices.Contains(s.opts.Owners, owner) {
		errs = append(errs, propertyError{"INVALID_OPTION", "hubspot_owner_id",
			fmt.Sprintf("%s was not one of the allowed options: %v", owner, s.opts.Owners)})
	}
	if creating && version >= "2026-09" {
		for _, name := range s.opts.RequiredOnCreate {
			if props[name] == "" {
				errs = append(errs, propertyError{"MISSING_REQUIRED_PROPERTY", name, fmt.Sprintf("A value for %s must be provided", name)})
			}
		}
	}
	return errs
}

// validEmail is HubSpot's check as far as the stand-in goes: one address,
// no display name, a domain with a dot.
func validEmail(v string) bool {
	a, err := mail.ParseAddress(v)
	if err != nil || a.Address != v || a.Name != "" {
		return false
	}
	_, domain, _ := strings.Cut(v, "@")
	return strings.Contains(domain, ".") && !strings.HasSuffix(domain, ".")
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// object is a contact as HubSpot answers it; props are the properties
// shown (all when nil).
func object(c *Contact, props []string) map[string]any {
	p := map[string]string{}
	if props == nil {
		p = maps.Clone(c.Properties)
	} else {
		for _, name := range props {
			if v, ok := c.Properties[name]; ok {
				p[name] = v
			}
		}
	}
	p["hs_object_id"], p["createdate"], p["lastmodifieddate"] = c.ID, stamp(c.CreatedAt), stamp(c.UpdatedAt)
	return map[string]any{
		"id": c.ID, "properties": p, "createdAt": stamp(c.CreatedAt), "updatedAt": stamp(c.UpdatedAt), "archived": false,
	}
}

// readProperties are the properties a read shows by default.
var readProperties = []string{"email", "firstname", "lastname"}

// shown are the properties a read or a list shows: those its properties
// parameters name (comma-separated, or repeated), as HubSpot's reads take
// them, else readProperties.
func shown(r *http.Request) []string {
	var props []string
	for _, v := range r.URL.Query()["properties"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				props = append(props, name)
			}
		}
	}
	if len(props) == 0 {
		return readProperties
	}
	return props
}

type upsertRequest struct {
	Inputs []struct {
		IDProperty         string            `json:"idProperty"`
		ID                 string            `json:"id"`
		ObjectWriteTraceID string            `json:"objectWriteTraceId"`
		Properties         map[string]string `json:"properties"`
	} `json:"inputs"`
}

// upsert is POST .../contacts/batch/upsert: each input's contact, found by
// its email or made, with the input's properties.
func (s *Server) upsert(r *http.Request, version string) standin.Answer {
	var req upsertRequest
	if a, ok := decode(r, &req); !ok {
		return a
	}
	if len(req.Inputs) == 0 || len(req.Inputs) > 100 {
		return apiError(http.StatusBadRequest, "VALIDATION_ERROR", "inputs must hold 1 to 100 inputs", nil)
	}
	seen := map[string]bool{}
	for _, in := range req.Inputs {
		switch {
		case in.IDProperty == "":
			return apiError(http.StatusBadRequest, "VALIDATION_ERROR", "idProperty is required to upsert", nil)
		case in.IDProperty != "email" && s.known[in.IDProperty]:
			return apiError(http.StatusBadRequest, "VALIDATION_ERROR",
				fmt.Sprintf("Unable to perform update/upsert by non-unique 0-1 property %s", in.IDProperty), nil)
		case in.IDProperty != "email":
			return apiError(http.StatusBadRequest, "VALIDATION_ERROR", fmt.Sprintf("Property %q does not exist", in.IDProperty),
				[]fieldError{{Message: fmt.Sprintf("Property %q does not exist", in.IDProperty), Code: "PROPERTY_DOESNT_EXIST",
					Context: map[string][]string{"propertyName": {in.IDProperty}}}})
		case in.ID == "":
			return apiError(http.StatusBadRequest, "VALIDATION_ERROR", "id is required to upsert", nil)
		}
		// Two inputs for one contact: HubSpot refuses the whole batch.
		email := strings.ToLower(in.ID)
		if seen[email] {
			return apiError(http.StatusBadRequest, "VALIDATION_ERROR",
				fmt.Sprintf("Duplicate IDs found in batch input: [%s]. IDs must be unique", in.ID), nil)
		}
		seen[email] = true
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Now()
	started := now
	var results []map[string]any
	var errs []errorBody
	for _, in := range req.Inputs {
		email := strings.ToLower(in.ID)
		id, exists := s.byEmail[email]
		if fails := s.validate(in.Properties, email, !exists, version); len(fails) > 0 {
			errs = append(errs, errorBody{Status: "error", Category: "VALIDATION_ERROR", Message: validationMessage(fails),
				Context: map[string][]string{"objectWriteTraceId": {in.ObjectWriteTraceID}}, Errors: fieldErrors(fails)})
			continue
		}
		c := s.contacts[id]
		if !exists {
			s.nextID++
			id = strconv.FormatInt(s.nextID, 10)
			c = &Contact{ID: id, Properties: map[string]string{}, CreatedAt: now}
			s.contacts[id], s.byEmail[email] = c, id
		}
		for k, v := range in.Properties {
			c.Properties[k] = v
		}
		c.Properties["email"], c.UpdatedAt = email, now
		res := object(c, nil)
		res["new"], res["objectWriteTraceId"] = !exists, in.ObjectWriteTraceID
		results = append(results, res)
	}
	body := map[string]any{"status": "COMPLETE", "results": results, "startedAt": stamp(started), "completedAt": stamp(now)}
	if results == nil {
		body["results"] = []any{}
	}
	if len(errs) == 0 {
		return standin.JSON(http.StatusOK, body)
	}
	body["errors"], body["numErrors"] = errs, len(errs)
	return standin.JSON(http.StatusMultiStatus, body)
}

// find returns the contact {id} names, by id or, with idProperty=email, by
// email; a non-nil answer refuses the request.
func (s *Server) find(r *http.Request) (*Contact, *standin.Answer) {
	ref := r.PathValue("id")
	switch r.URL.Query().Get("idProperty") {
	case "":
		if c, ok := s.contacts[ref]; ok {
			return c, nil
		}
	case "email":
		if id, ok := s.byEmail[strings.ToLower(ref)]; ok {
			return s.contacts[id], nil
		}
	default:
		a := apiError(http.StatusBadRequest, "VALIDATION_ERROR", "idProperty must be a unique property", nil)
		return nil, &a
	}
	a := notFound()
	return nil, &a
}

// update is PATCH .../contacts/{id}: the properties written over the
// contact, whose email may change to one no other contact has.
func (s *Server) update(r *http.Request, version string) standin.Answer {
	var req struct {
		Properties map[string]string `json:"properties"`
	}
	if a, ok := decode(r, &req); !ok {
		return a
	}
	if req.Properties == nil {
		return apiError(http.StatusBadRequest, "VALIDATION_ERROR", "properties are required", nil)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, refused := s.find(r)
	if refused != nil {
		return *refused
	}
	email := c.Properties["email"]
	if v, ok := req.Properties["email"]; ok {
		email = strings.ToLower(v)
	}
	if fails := s.validate(req.Properties, email, false, version); len(fails) > 0 {
		return apiError(http.StatusBadRequest, "VALIDATION_ERROR", validationMessage(fails), fieldErrors(fails))
	}
	if other, ok := s.byEmail[email]; ok && other != c.ID {
		return apiError(http.StatusConflict, "CONFLICT", "Contact already exists. Existing ID: "+other, nil)
	}
	delete(s.byEmail, c.Properties["email"])
	for k, v := range req.Properties {
		c.Properties[k] = v
	}
	c.Properties["email"], c.UpdatedAt = email, s.opts.Now()
	s.byEmail[email] = c.ID
	return standin.JSON(http.StatusOK, object(c, nil))
}

// read is GET .../contacts/{id}.
func (s *Server) read(r *http.Request, _ string) standin.Answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, refused := s.find(r)
	if refused != nil {
		return *refused
	}
	return standin.JSON(http.StatusOK, object(c, shown(r)))
}

// list is GET .../contacts?limit=N (10 by default, at most 100), by id.
func (s *Server) list(r *http.Request, _ string) standin.Answer {
	limit := 10
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return apiError(http.StatusBadRequest, "VALIDATION_ERROR", "limit must be 1 to 100", nil)
		}
		limit = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.contacts))
	for id := range s.contacts {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		x, _ := strconv.ParseInt(a, 10, 64)
		y, _ := strconv.ParseInt(b, 10, 64)
		return int(x - y)
	})
	results := []map[string]any{}
	for _, id := range ids[:min(limit, len(ids))] {
		results = append(results, object(s.contacts[id], shown(r)))
	}
	body := map[string]any{"results": results}
	if len(ids) > limit {
		body["paging"] = map[string]any{"next": map[string]string{"after": ids[limit]}}
	}
	return standin.JSON(http.StatusOK, body)
}
