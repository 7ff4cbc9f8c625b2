// Package pipedrivefake is a stand-in for Pipedrive's API, as the kind
// pipedrive calls it: persons on API v2 (search by exact email, create),
// leads on v1 (list, archived list, create, update), the current user and
// one deal field. It speaks Pipedrive's paths, x-api-token auth, answer
// shapes ({"success": true, "data": ...}) and error shapes ({"success":
// false, "error": ..., "error_info": ...}), with the rate-limit headers on
// every answer, and refuses what Pipedrive refuses: a missing or wrong
// token (401), a body that is not JSON, a lead without a title or without
// an existing person, an owner that is not a user, an unknown lead member
// or custom field key (400 ERR_SCHEMA_VALIDATION_FAILED), and any edit of
// an archived lead. Like Pipedrive it has no unique value: persons and
// leads may be duplicated, which is what the kind guards against.
//
// Two behaviours of the real API are made controllable, so that the
// kind's residual risks can be tested: the person search lags behind the
// writes as Pipedrive's index does (Lag: a person created is not found by
// search for a number of searches or a while), and a lead can be archived
// or converted to a deal behind the kind's back (Archive, Convert).
//
// Misbehaviour on demand comes from an internal/standin.Kit whose targets
// are the kinds of request (Targets), and from faults scripted for
// TargetAny, which meet the next request whatever its kind. The control API, for whoever
// runs the stand-in as a process, is under /_standin: the Kit's script,
// chaos and reset, and credentials, state, lag, and the archiving and
// converting of a lead. The stand-in logs nothing.
package pipedrivefake

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"uuid"

	"github.com/leadintake/leadintake/internal/standin"
)

// DefaultToken is the API token a stand-in accepts when Options name none.
const DefaultToken = "0123456789abcdef0123456789abcdef01234567"

// DefaultRefField is the key of the text deal field a stand-in knows when
// Options name none.
const DefaultRefField = "5e1fa2c0d6b84e33a1d3f6b0c9e27a4b8d1c0f92"

// The targets: one per kind of request, and TargetAny.
const (
	TargetAny            = "any"
	TargetPersonsSearch  = "persons_search"
	TargetPersonsCreate  = "persons_create"
	TargetLeadsList      = "leads_list"
	TargetLeadsArchived  = "leads_archived"
	TargetLeadsCreate    = "leads_create"
	TargetLeadsUpdate    = "leads_update"
	TargetUsersMe        = "users_me"
	TargetDealFields     = "deal_fields"
	errorInfo            = "Please check developers.pipedrive.com for more information about Pipedrive API."
	codeValidationFailed = "ERR_SCHEMA_VALIDATION_FAILED"
	defaultPageMax       = 500
	defaultPageSize      = 100
)

// Targets lists the stand-in's targets, one per kind of request; besides
// them, TargetAny takes scripted faults (no chaos) for the next request of
// any kind.
func Targets() []string {
	return []string{TargetPersonsSearch, TargetPersonsCreate, TargetLeadsList, TargetLeadsArchived,
		TargetLeadsCreate, TargetLeadsUpdate, TargetUsersMe, TargetDealFields}
}

// Options configure a stand-in. The zero Options are usable.
type Options struct {
	// Token is the API token accepted in x-api-token; DefaultToken when
	// empty.
	Token string
	// RefField is the key of the text deal field holding the reference;
	// DefaultRefField when empty. RefFieldType is its field_type
	// (varchar when empty).
	RefField     string
	RefFieldType string
	// FieldKeys are the other deal custom fields a lead may carry.
	FieldKeys []string
	// Users are the company's user ids, the ones an owner_id may name;
	// the first is the token's own (GET /v1/users/me). Default [1].
	Users []int64
	// PageMax is the largest page a lead list gives (Pipedrive: 500).
	PageMax int
	// Lag is how far the person search lags behind the writes.
	Lag Lag
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Lag is how long a person created stays out of the search's reach: until
// Searches searches have been answered since its creation, and For has
// passed. The zero Lag finds a person at once.
type Lag struct {
	Searches int
	For      time.Duration
}

// Server is the stand-in, an http.Handler. Its methods are safe for
// concurrent use.
type Server struct {
	opts Options
	kit  *standin.Kit
	mux  *http.ServeMux

	mu sync.Mutex
	// anyFaults are the faults scripted for TargetAny, met before the
	// target's own.
	anyFaults []standin.Fault
	refusing  bool
	lag       Lag
	persons   map[int64]*person
	personID  int64
	searches  int
	leads     map[string]*lead
	leadSeq   int
	requests  map[string]int
}

type person struct {
	id     int64
	name   string
	emails []value
	phones []value
	// seenAfter is the count of searches after which the search finds
	// the person, and seenAt the time from which it does.
	seenAfter int
	seenAt    time.Time
	added     time.Time
}

type value struct {
	Value   string `json:"value"`
	Primary bool   `json:"primary"`
	Label   string `json:"label"`
}

type lead struct {
	seq      int
	id       string
	title    string
	personID int64
	ownerID  int64
	originID *string
	archived bool
	custom   map[string]json.RawMessage
	added    time.Time
	updated  time.Time
}

// New returns a stand-in configured by opts (nil: the zero Options).
func New(opts *Options) *Server {
	s := &Server{kit: standin.New(Targets()...)}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.Token == "" {
		s.opts.Token = DefaultToken
	}
	if s.opts.RefField == "" {
		s.opts.RefField = DefaultRefField
	}
	if s.opts.RefFieldType == "" {
		s.opts.RefFieldType = "varchar"
	}
	if len(s.opts.Users) == 0 {
		s.opts.Users = []int64{1}
	}
	if s.opts.PageMax <= 0 {
		s.opts.PageMax = defaultPageMax
	}
	if s.opts.Now == nil {
		s.opts.Now = time.Now
	}
	s.reset()
	s.mux = http.NewServeMux()
	s.routes()
	return s
}

func (s *Server) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.anyFaults, s.refusing, s.lag = nil, false, s.opts.Lag
	s.persons, s.personID, s.searches = map[int64]*person{}, 0, 0
	s.leads, s.leadSeq = map[string]*lead{}, 0
	s.requests = map[string]int{}
}

func (s *Server) routes() {
	s.mux.HandleFunc("GET /api/v2/persons/search", s.serve(TargetPersonsSearch, s.searchPersons))
	s.mux.HandleFunc("POST /api/v2/persons", s.serve(TargetPersonsCreate, s.createPerson))
	s.mux.HandleFunc("GET /v1/leads", s.serve(TargetLeadsList, s.listLeads(false)))
	s.mux.HandleFunc("GET /v1/leads/archived", s.serve(TargetLeadsArchived, s.listLeads(true)))
	s.mux.HandleFunc("POST /v1/leads", s.serve(TargetLeadsCreate, s.createLead))
	s.mux.HandleFunc("PATCH /v1/leads/{id}", s.serve(TargetLeadsUpdate, s.updateLead))
	s.mux.HandleFunc("GET /v1/users/me", s.serve(TargetUsersMe, s.userMe))
	s.mux.HandleFunc("GET /api/v2/dealFields/{code}", s.serve(TargetDealFields, s.dealField))
	s.controlRoutes()
}

// ServeHTTP serves
//
//	GET   /api/v2/persons/search?term=&fields=email&exact_match=true
//	POST  /api/v2/persons
//	GET   /v1/leads?person_id=&start=&limit=
//	GET   /v1/leads/archived?person_id=&start=&limit=
//	POST  /v1/leads
//	PATCH /v1/leads/{id}
//	GET   /v1/users/me
//	GET   /api/v2/dealFields/{field_code}
//
// and the control API under /_standin (see Server's package doc).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close ends every hung or delayed request at once.
func (s *Server) Close() { s.kit.Close() }

// Script queues faults for target (one of Targets, or TargetAny).
func (s *Server) Script(target string, faults ...standin.Fault) {
	if target == TargetAny {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.anyFaults = append(s.anyFaults, faults...)
		return
	}
	s.kit.Script(target, faults...)
}

// SetChaos sets target's random fault mix (one of Targets: TargetAny
// takes no chaos, which would be drawn twice for each request).
func (s *Server) SetChaos(target string, c standin.Chaos) error {
	if target == TargetAny {
		return errors.New("chaos: target any takes scripted faults only")
	}
	return s.kit.SetChaos(target, c)
}

// next is the fault for target's next request: one scripted for
// TargetAny, else the target's own.
func (s *Server) next(target string) standin.Fault {
	s.mu.Lock()
	if len(s.anyFaults) > 0 {
		f := s.anyFaults[0]
		s.anyFaults = s.anyFaults[1:]
		s.mu.Unlock()
		return f
	}
	s.mu.Unlock()
	return s.kit.Next(target)
}

// Reset forgets every fault, person, lead and count, and restores the
// credentials and Options.Lag.
func (s *Server) Reset() {
	s.kit.Reset()
	s.reset()
}

// SetRefuseCredentials makes every request's token refused (401), as
// Pipedrive does once a token is regenerated, until called with false.
func (s *Server) SetRefuseCredentials(refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refusing = refuse
}

// SetLag sets how far the person search lags for persons created from now
// on.
func (s *Server) SetLag(l Lag) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lag = l
}

// Archive archives the lead id, as a user does in Pipedrive: it leaves
// GET /v1/leads for GET /v1/leads/archived, and can no longer be edited
// through the API. It reports whether the lead exists.
func (s *Server) Archive(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leads[id]
	if l != nil {
		l.archived, l.updated = true, s.opts.Now()
	}
	return l != nil
}

// Convert converts the lead id to a deal: the lead leaves the Leads Inbox
// (and every list, and cannot be edited). It reports whether the lead
// existed.
func (s *Server) Convert(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.leads[id]
	delete(s.leads, id)
	return ok
}

// RateLimitFault is Pipedrive's answer when the token's budget is spent: a
// 429 with the rate-limit headers, the window resetting in reset seconds,
// and no Retry-After.
func RateLimitFault(reset int) standin.Fault {
	return standin.Fault{
		Status: http.StatusTooManyRequests,
		Header: map[string]string{"x-ratelimit-limit": "40", "x-ratelimit-remaining": "0", "x-ratelimit-reset": strconv.Itoa(reset)},
		Body:   errorJSON("Request over limit", "", http.StatusTooManyRequests),
	}
}

// ServerErrorFault is an internal server error in Pipedrive's shape.
func ServerErrorFault() standin.Fault {
	return standin.Fault{Status: http.StatusInternalServerError, Body: errorJSON("Internal server error", "", http.StatusInternalServerError)}
}

// serve wraps h, target's normal behaviour, with the target's faults (a
// fault scripted for TargetAny first), the token check and the rate-limit
// headers.
func (s *Server) serve(target string, h func(*http.Request) standin.Answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests[target]++
		s.mu.Unlock()
		f := s.next(target)
		if goOn, _, _ := s.kit.Before(w, r, f); !goOn {
			return
		}
		var a standin.Answer
		if s.authorized(r) {
			a = h(r)
		} else {
			a = pdError(http.StatusUnauthorized, "unauthorized access", "")
		}
		if a.Header == nil {
			a.Header = http.Header{}
		}
		a.Header.Set("x-ratelimit-limit", "40")
		a.Header.Set("x-ratelimit-remaining", "39")
		a.Header.Set("x-ratelimit-reset", "2")
		s.kit.After(w, r, f, a)
	}
}

// authorized reports whether r carries the token in x-api-token (Pipedrive
// takes it there; a token in the query is not looked at).
func (s *Server) authorized(r *http.Request) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.refusing && r.Header.Get("x-api-token") == s.opts.Token
}

// errorJSON is Pipedrive's error body.
func errorJSON(msg, code string, status int) string {
	body := map[string]any{"success": false, "error": msg, "error_info": errorInfo, "data": nil, "additional_data": nil}
	if code != "" {
		body["code"] = code
	}
	if status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusTooManyRequests {
		body["errorCode"] = status
	}
	b, _ := json.Marshal(body)
	return string(b)
}

func pdError(status int, msg, code string) standin.Answer {
	return standin.Answer{Status: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(errorJSON(msg, code, status) + "\n")}
}

func invalid(msg string) standin.Answer {
	return pdError(http.StatusBadRequest, msg, codeValidationFailed)
}

func ok(status int, data any, additional any) standin.Answer {
	return standin.JSON(status, map[string]any{"success": true, "data": data, "additional_data": additional})
}

func (s *Server) searchPersons(r *http.Request) standin.Answer {
	q := r.URL.Query()
	term := q.Get("term")
	if term == "" {
		return invalid("term: a search term is required")
	}
	fields := q.Get("fields")
	exact := q.Get("exact_match") == "true" || q.Get("exact_match") == "1"
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.searches++
	items := []any{}
	ids := make([]int64, 0, len(s.persons))
	for id := range s.persons {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		p := s.persons[id]
		if s.searches <= p.seenAfter || now.Before(p.seenAt) {
			continue // not in the index yet
		}
		if !p.matches(term, fields, exact) {
			continue
		}
		emails := make([]string, 0, len(p.emails))
		for _, e := range p.emails {
			emails = append(emails, e.Value)
		}
		phones := make([]string, 0, len(p.phones))
		for _, ph := range p.phones {
			phones = append(phones, ph.Value)
		}
		items = append(items, map[string]any{"result_score": 1.0, "item": map[string]any{
			"id": p.id, "type": "person", "name": p.name, "emails": emails, "phones": phones,
			"visible_to": 3, "owner": map[string]any{"id": s.opts.Users[0]}, "organization": nil,
			"custom_fields": []string{}, "notes": []string{},
		}})
	}
	return ok(http.StatusOK, map[string]any{"items": items}, map[string]any{"next_cursor": nil})
}

// matches reports whether the search term finds p in fields (all when
// empty): exactly, or anywhere in a value; never case-sensitive.
func (p *person) matches(term, fields string, exact bool) bool {
	term = strings.ToLower(term)
	match := func(v string) bool {
		v = strings.ToLower(v)
		if exact {
			return v == term
		}
		return strings.Contains(v, term)
	}
	in := func(f string) bool { return fields == "" || slices.Contains(strings.Split(fields, ","), f) }
	if in("email") && slices.ContainsFunc(p.emails, func(e value) bool { return match(e.Value) }) {
		return true
	}
	if in("phone") && slices.ContainsFunc(p.phones, func(e value) bool { return match(e.Value) }) {
		return true
	}
	return in("name") && match(p.name)
}

// decodeObject reads r's body, a JSON object, as its members; a request
// that is not JSON is refused.
func decodeObject(r *http.Request) (map[string]json.RawMessage, *standin.Answer) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		a := invalid("Content-Type must be application/json")
		return nil, &a
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var m map[string]json.RawMessage
	if err != nil || json.Unmarshal(b, &m) != nil || m == nil {
		a := invalid("the request body is not a JSON object")
		return nil, &a
	}
	return m, nil
}

func (s *Server) createPerson(r *http.Request) standin.Answer {
	m, bad := decodeObject(r)
	if bad != nil {
		return *bad
	}
	known := []string{"name", "owner_id", "org_id", "add_time", "update_time", "emails", "phones", "visible_to", "label_ids", "marketing_status", "custom_fields"}
	for k := range m {
		if !slices.Contains(known, k) {
			return invalid("unknown person field")
		}
	}
	var p person
	if json.Unmarshal(m["name"], &p.name) != nil || strings.TrimSpace(p.name) == "" {
		return invalid("name: a person's name is required")
	}
	if raw, ok := m["emails"]; ok && (json.Unmarshal(raw, &p.emails) != nil || !validValues(p.emails)) {
		return invalid("emails: each needs a value")
	}
	if raw, ok := m["phones"]; ok && (json.Unmarshal(raw, &p.phones) != nil || !validValues(p.phones)) {
		return invalid("phones: each needs a value")
	}
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.personID++
	p.id, p.added = s.personID, now
	p.seenAfter, p.seenAt = s.searches+s.lag.Searches, now.Add(s.lag.For)
	s.persons[p.id] = &p
	return ok(http.StatusOK, p.json(s.opts.Users[0]), nil)
}

func validValues(vs []value) bool {
	for _, v := range vs {
		if strings.TrimSpace(v.Value) == "" {
			return false
		}
	}
	return true
}

func (p *person) json(owner int64) map[string]any {
	emails, phones := p.emails, p.phones
	if emails == nil {
		emails = []value{}
	}
	if phones == nil {
		phones = []value{}
	}
	t := p.added.UTC().Format(time.RFC3339)
	return map[string]any{"id": p.id, "name": p.name, "owner_id": owner, "org_id": nil, "add_time": t, "update_time": t,
		"emails": emails, "phones": phones, "is_deleted": false, "visible_to": 3, "label_ids": []int{}, "custom_fields": map[string]any{}}
}

func (s *Server) listLeads(archived bool) func(*http.Request) standin.Answer {
	return func(r *http.Request) standin.Answer {
		q := r.URL.Query()
		start, limit := 0, defaultPageSize
		if v := q.Get("start"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return invalid("start must be a number")
			}
			start = n
		}
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 500 {
				return invalid("limit must be a number from 1 to 500")
			}
			limit = n
		}
		limit = min(limit, s.opts.PageMax)
		var personID int64
		if v := q.Get("person_id"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return invalid("person_id must be a number")
			}
			personID = n
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		var all []*lead
		for _, l := range s.leads {
			if l.archived == archived && (personID == 0 || l.personID == personID) {
				all = append(all, l)
			}
		}
		// Sorted by the time they were created, oldest first.
		sort.Slice(all, func(i, j int) bool { return all[i].seq < all[j].seq })
		data := []any{}
		for i := start; i < len(all) && i < start+limit; i++ {
			data = append(data, all[i].json(s.opts))
		}
		more := start+limit < len(all)
		pg := map[string]any{"start": start, "limit": limit, "more_items_in_collection": more}
		if more {
			pg["next_start"] = start + limit
		}
		return ok(http.StatusOK, data, map[string]any{"pagination": pg})
	}
}

func (l *lead) json(o Options) map[string]any {
	m := map[string]any{
		"id": l.id, "title": l.title, "owner_id": l.ownerID, "creator_id": o.Users[0], "label_ids": []string{},
		"person_id": l.personID, "organization_id": nil, "source_name": "API", "origin": "API", "origin_id": l.originID,
		"channel": nil, "channel_id": nil, "source_deal_id": nil, "is_archived": l.archived, "was_seen": false,
		"value": nil, "expected_close_date": nil, "next_activity_id": nil,
		"add_time": l.added.UTC().Format(time.RFC3339), "update_time": l.updated.UTC().Format(time.RFC3339),
		"visible_to": "3", "cc_email": "",
	}
	for k, v := range l.custom {
		if !bytes.Equal(v, []byte("null")) {
			m[k] = v
		}
	}
	return m
}

// leadMembers are the members a lead's create takes besides custom
// fields; an update takes the same, without origin_id, with is_archived.
var leadMembers = []string{"title", "owner_id", "label_ids", "person_id", "organization_id", "value",
	"expected_close_date", "visible_to", "was_seen", "channel", "channel_id"}

// applyLead checks m, a lead's create (l new) or update, and applies it to
// l; the caller holds s.mu.
func (s *Server) applyLead(l *lead, m map[string]json.RawMessage, create bool) *standin.Answer {
	fail := func(msg string) *standin.Answer { a := invalid(msg); return &a }
	for k, raw := range m {
		switch {
		case slices.Contains(leadMembers, k):
		case k == "origin_id" && create, k == "is_archived" && !create:
		case k == s.opts.RefField:
			var v *string
			if json.Unmarshal(raw, &v) != nil {
				return fail("a text field takes a string")
			}
		case slices.Contains(s.opts.FieldKeys, k):
			var v any
			if json.Unmarshal(raw, &v) != nil {
				return fail("a custom field takes a value")
			}
			if _, isObj := v.(map[string]any); isObj {
				return fail("a custom field takes a value")
			}
		default:
			return fail("unknown lead field")
		}
	}
	if raw, ok := m["title"]; ok || create {
		var t string
		if json.Unmarshal(raw, &t) != nil || strings.TrimSpace(t) == "" {
			return fail("title: a lead's title is required")
		}
		l.title = t
	}
	if raw, ok := m["person_id"]; ok || create {
		var id int64
		if json.Unmarshal(raw, &id) != nil {
			if _, orgs := m["organization_id"]; orgs && create {
				return fail("organization_id: the organization does not exist")
			}
			return fail("person_id: a lead needs a person or an organization")
		}
		if s.persons[id] == nil {
			return fail("person_id: the person does not exist")
		}
		l.personID = id
	}
	if raw, ok := m["organization_id"]; ok && !bytes.Equal(raw, []byte("null")) {
		return fail("organization_id: the organization does not exist")
	}
	if raw, ok := m["owner_id"]; ok {
		var id int64
		if json.Unmarshal(raw, &id) != nil || !slices.Contains(s.opts.Users, id) {
			return fail("owner_id: the user does not exist")
		}
		l.ownerID = id
	} else if create {
		l.ownerID = s.opts.Users[0]
	}
	if raw, ok := m["origin_id"]; ok {
		if json.Unmarshal(raw, &l.originID) != nil {
			return fail("origin_id: a string")
		}
	}
	if raw, ok := m["is_archived"]; ok {
		if json.Unmarshal(raw, &l.archived) != nil {
			return fail("is_archived: a boolean")
		}
	}
	for k, raw := range m {
		if k == s.opts.RefField || slices.Contains(s.opts.FieldKeys, k) {
			l.custom[k] = raw
		}
	}
	l.updated = s.opts.Now()
	return nil
}

func (s *Server) createLead(r *http.Request) standin.Answer {
	m, bad := decodeObject(r)
	if bad != nil {
		return *bad
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := &lead{custom: map[string]json.RawMessage{}, added: s.opts.Now()}
	if a := s.applyLead(l, m, true); a != nil {
		return *a
	}
	s.leadSeq++
	l.seq, l.id = s.leadSeq, uuid.NewV4().String()
	s.leads[l.id] = l
	return ok(http.StatusCreated, l.json(s.opts), nil)
}

func (s *Server) updateLead(r *http.Request) standin.Answer {
	id := r.PathValue("id")
	m, bad := decodeObject(r)
	if bad != nil {
		return *bad
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leads[id]
	if l == nil {
		// A lead converted to a deal or deleted is gone.
		return pdError(http.StatusNotFound, "Lead not found", "")
	}
	if l.archived {
		// Pipedrive documents that archived leads cannot be edited
		// through the API, not the answer's shape: this is its v1
		// error shape.
		return pdError(http.StatusBadRequest, "Archived lead cannot be edited", "")
	}
	// Checked on a copy: a refused update changes nothing.
	c := *l
	c.custom = make(map[string]json.RawMessage, len(l.custom))
	for k, v := range l.custom {
		c.custom[k] = v
	}
	if a := s.applyLead(&c, m, false); a != nil {
		return *a
	}
	*l = c
	return ok(http.StatusOK, l.json(s.opts), nil)
}

func (s *Server) userMe(*http.Request) standin.Answer {
	return ok(http.StatusOK, map[string]any{"id": s.opts.Users[0], "name": "Integration", "company_id": 1,
		"company_domain": "standin", "is_admin": 1, "active_flag": true}, nil)
}

func (s *Server) dealField(r *http.Request) standin.Answer {
	code := r.PathValue("code")
	typ := ""
	switch {
	case code == s.opts.RefField:
		typ = s.opts.RefFieldType
	case slices.Contains(s.opts.FieldKeys, code):
		typ = "varchar"
	default:
		return pdError(http.StatusNotFound, "Field not found", "")
	}
	return ok(http.StatusOK, map[string]any{"field_name": "LeadIntake reference", "field_code": code, "description": nil,
		"field_type": typ, "is_custom_field": true, "is_optional_response_field": false, "options": nil, "subfields": nil}, nil)
}

// Lead is what the stand-in holds of a lead, for tests.
type Lead struct {
	ID       string
	PersonID int64
	OwnerID  int64
	Title    string
	Archived bool
	// Custom are its custom fields' values, as sent.
	Custom map[string]json.RawMessage
}

// Leads returns every lead, archived or not, oldest first.
func (s *Server) Leads() []Lead {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Lead, 0, len(s.leads))
	for _, l := range s.leads {
		c := make(map[string]json.RawMessage, len(l.custom))
		for k, v := range l.custom {
			c[k] = v
		}
		out = append(out, Lead{ID: l.id, PersonID: l.personID, OwnerID: l.ownerID, Title: l.title, Archived: l.archived, Custom: c})
	}
	sort.Slice(out, func(i, j int) bool { return s.leads[out[i].ID].seq < s.leads[out[j].ID].seq })
	return out
}

// Persons counts the persons.
func (s *Server) Persons() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.persons)
}

// PersonEmail is the primary email of the person of lead id ("" when
// there is no such lead).
func (s *Server) PersonEmail(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leads[id]
	if l == nil || s.persons[l.personID] == nil {
		return ""
	}
	p := s.persons[l.personID]
	for _, e := range p.emails {
		if e.Primary {
			return e.Value
		}
	}
	if len(p.emails) > 0 {
		return p.emails[0].Value
	}
	return ""
}

// Requests counts the requests received for target.
func (s *Server) Requests(target string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[target]
}
