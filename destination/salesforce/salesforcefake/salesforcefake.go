// Package salesforcefake is a stand-in for a Salesforce org, as the
// salesforce destination kind calls it: the OAuth 2.0 client credentials
// token endpoint, Leads upserted and read by an External ID field, Leads
// created, and the describe of Lead. It speaks Salesforce's paths, its
// bearer sessions, its answers (201 created, 200 created:false, 204 for an
// update before API version 46.0, 300 for several records under one
// external ID) and its error body, a list of {"message", "errorCode",
// "fields"}; it sends Sforce-Limit-Info: api-usage=N/M with every REST
// answer, and runs an assignment rule, when it has one, on every create and
// update that does not say Sforce-Auto-Assign: FALSE.
//
// It refuses what Salesforce refuses: a missing or revoked session (401
// INVALID_SESSION_ID), a wrong client secret (invalid_client), a Lead
// without LastName or Company (REQUIRED_FIELD_MISSING), a second Lead under
// a Unique value (DUPLICATE_VALUE), a field Lead does not have
// (INVALID_FIELD), a read-only one (INVALID_FIELD_FOR_INSERT_UPDATE), a value
// too long (STRING_TOO_LONG), a malformed email (INVALID_EMAIL_ADDRESS) or
// owner id (MALFORMED_ID), a malformed body (JSON_PARSER_ERROR), an update
// of a converted Lead (CANNOT_UPDATE_CONVERTED_LEAD), calls past the org's
// allocation (403 REQUEST_LIMIT_EXCEEDED), and, with its duplicate rule on,
// a new Lead whose Email another Lead has (DUPLICATES_DETECTED; an Alert
// rule lets it through with Sforce-Duplicate-Rule-Header: allowSave=true).
// Unique external IDs match regardless of case, as Salesforce's do by
// default.
//
// It misbehaves on demand through an internal/standin Kit, per target
// (TargetToken, TargetUpsert, TargetLookup, TargetCreate, TargetDescribe),
// and expires sessions or refuses credentials when told. The control API,
// under /_standin (script, chaos, reset, credentials, tokens/expire,
// duplicate-rule, limits, state), drives it as a process. It logs nothing.
package salesforcefake

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/leadintake/leadintake/internal/standin"
)

// The stand-in's targets: one kind of request each.
const (
	TargetToken    = "token"
	TargetUpsert   = "upsert"
	TargetLookup   = "lookup"
	TargetCreate   = "create"
	TargetDescribe = "describe"
)

// Targets lists the targets.
func Targets() []string {
	return []string{TargetToken, TargetUpsert, TargetLookup, TargetCreate, TargetDescribe}
}

// Defaults of Options.
const (
	DefaultClientID     = "3MVG9standin.client.id"
	DefaultClientSecret = "standin-client-secret"
	DefaultRefField     = "LeadIntake_Ref__c"
	DefaultRefLength    = 64
	DefaultAllocation   = 1_000_000
)

// DuplicateRule is the org's duplicate rule on Lead Email, applied when a
// Lead is inserted.
type DuplicateRule string

// The duplicate rules.
const (
	// DuplicatesOff: no rule.
	DuplicatesOff DuplicateRule = "off"
	// DuplicatesAlert: an Alert rule, which the API enforces unless the
	// call says allowSave=true.
	DuplicatesAlert DuplicateRule = "alert"
	// DuplicatesBlock: a Block rule, which nothing passes.
	DuplicatesBlock DuplicateRule = "block"
)

// ParseDuplicateRule reads off, alert or block.
func ParseDuplicateRule(s string) (DuplicateRule, error) {
	switch r := DuplicateRule(s); r {
	case DuplicatesOff, DuplicatesAlert, DuplicatesBlock:
		return r, nil
	}
	return "", fmt.Errorf("duplicate rule %q: want off, alert or block", s)
}

// Options configure a Server. The zero Options are an org with the
// defaults above, whose ref field is a Text(64) External ID, Unique and
// case-insensitive.
type Options struct {
	// ClientID and ClientSecret are the External Client App's consumer
	// key and secret the token endpoint accepts; DefaultClientID and
	// DefaultClientSecret when empty.
	ClientID, ClientSecret string
	// RefField is the custom field of Lead the reference lives in;
	// DefaultRefField when empty.
	RefField string
	// RefFieldLength is its length; DefaultRefLength when zero.
	RefFieldLength int
	// RefFieldMissing leaves the field out of Lead; NotExternalID and
	// NotUnique leave those flags off it; CaseSensitive makes it unique
	// with case (Salesforce's default ignores case).
	RefFieldMissing, NotExternalID, NotUnique, CaseSensitive bool
	// CustomFields are more custom fields of Lead (any scalar value).
	CustomFields []string
	// DuplicateRule is the rule on Lead Email; DuplicatesOff when empty.
	DuplicateRule DuplicateRule
	// AssignmentRuleOwner, when set, is the org's active Lead assignment
	// rule: every create and update gives the Lead this owner (a User
	// Id), unless the call says Sforce-Auto-Assign: FALSE.
	AssignmentRuleOwner string
	// NoContentOnUpdate answers an upsert that updates with 204 and no
	// body, as API versions before 46.0 do (they always do here).
	NoContentOnUpdate bool
	// Allocation is the org's API calls per 24 hours, which calls past it
	// are refused with; DefaultAllocation when zero.
	Allocation int
	// Now is the clock of the tokens' issued_at; time.Now when nil.
	Now func() time.Time
}

// Server is the stand-in, an http.Handler. Its methods are safe for
// concurrent use. Call Close before closing the HTTP server that serves
// it, so that hung requests end.
type Server struct {
	opts Options
	kit  *standin.Kit
	mux  *http.ServeMux

	mu           sync.Mutex
	leads        map[string]*lead   // by Id
	byRef        map[string][]*lead // by the ref field's key (see refKey)
	seq          int
	tokens       map[string]bool
	tokensIssued int
	expireAfter  int // > 0: sessions are revoked after this many more authenticated calls
	refusing     bool
	dupRule      DuplicateRule
	used         int
	allocation   int
	requests     map[string]int
}

// lead is one Lead record.
type lead struct {
	id        string
	fields    map[string]any // by canonical field name
	converted bool
}

// New returns a Server with opts (nil means the zero Options).
func New(opts *Options) *Server {
	s := &Server{kit: standin.New(Targets()...)}
	if opts != nil {
		s.opts = *opts
	}
	o := &s.opts
	if o.ClientID == "" {
		o.ClientID = DefaultClientID
	}
	if o.ClientSecret == "" {
		o.ClientSecret = DefaultClientSecret
	}
	if o.RefField == "" {
		o.RefField = DefaultRefField
	}
	if o.RefFieldLength == 0 {
		o.RefFieldLength = DefaultRefLength
	}
	if o.DuplicateRule == "" {
		o.DuplicateRule = DuplicatesOff
	}
	if o.Allocation == 0 {
		o.Allocation = DefaultAllocation
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s.reset()
	s.mux = http.NewServeMux()
	s.routes()
	return s
}

func (s *Server) routes() {
	s.mux.HandleFunc("POST /services/oauth2/token", s.serveToken)
	s.mux.HandleFunc("PATCH /services/data/{version}/sobjects/{object}/{field}/{value}", s.api(TargetUpsert, s.upsert))
	s.mux.HandleFunc("GET /services/data/{version}/sobjects/{object}/{field}/{value}", s.api(TargetLookup, s.lookup))
	s.mux.HandleFunc("POST /services/data/{version}/sobjects/{object}", s.api(TargetCreate, s.create))
	s.mux.HandleFunc("GET /services/data/{version}/sobjects/{object}/describe", s.api(TargetDescribe, s.describe))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeAnswer(w, notFound("The requested resource does not exist"))
	})
	s.controlRoutes()
}

// ServeHTTP serves
//
//	POST  /services/oauth2/token                                  a token (client credentials)
//	PATCH /services/data/vNN.N/sobjects/Lead/<field>/<value>      upsert by external ID
//	GET   /services/data/vNN.N/sobjects/Lead/<field>/<value>      read by external ID (?fields=)
//	POST  /services/data/vNN.N/sobjects/Lead                      create
//	GET   /services/data/vNN.N/sobjects/Lead/describe             describe
//
// and the control API under /_standin.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close ends every hung or delayed request at once, now and from now on.
func (s *Server) Close() { s.kit.Close() }

// Script queues faults for target's next requests (see standin.Kit).
func (s *Server) Script(target string, faults ...standin.Fault) { s.kit.Script(target, faults...) }

// SetChaos sets target's random fault mix (see standin.Kit).
func (s *Server) SetChaos(target string, c standin.Chaos) error { return s.kit.SetChaos(target, c) }

// Reset forgets every Lead, session, count, fault and setting made since
// New, as if the Server were new.
func (s *Server) Reset() {
	s.kit.Reset()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reset()
}

func (s *Server) reset() {
	s.leads = map[string]*lead{}
	s.byRef = map[string][]*lead{}
	s.seq = 0
	s.tokens = map[string]bool{}
	s.tokensIssued = 0
	s.expireAfter = 0
	s.refusing = false
	s.dupRule = s.opts.DuplicateRule
	s.used = 0
	s.allocation = s.opts.Allocation
	s.requests = map[string]int{}
}

// SetRefuseCredentials refuses (true) the client secret at the token
// endpoint and revokes every session, as an org does when the External
// Client App's secret is rotated, until it is called with false.
func (s *Server) SetRefuseCredentials(refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refusing = refuse
	if refuse {
		clear(s.tokens)
	}
}

// ExpireTokens revokes every session issued so far: their next call gets
// 401 INVALID_SESSION_ID.
func (s *Server) ExpireTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.tokens)
}

// ExpireTokensAfter revokes every session issued so far once n more calls
// have been let in with one (n >= 1): a session expiring in the middle of
// a burst.
func (s *Server) ExpireTokensAfter(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n <= 0 {
		clear(s.tokens)
		n = 0
	}
	s.expireAfter = n
}

// SetDuplicateRule switches the duplicate rule on Lead Email.
func (s *Server) SetDuplicateRule(r DuplicateRule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dupRule = r
}

// SetAPIUsage sets the calls used of the org's allocation, and the
// allocation when allocation > 0.
func (s *Server) SetAPIUsage(used, allocation int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used = used
	if allocation > 0 {
		s.allocation = allocation
	}
}

// Count is the number of Leads.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leads)
}

// Lead returns a copy of the Lead's fields, by their canonical names, and
// whether there is a Lead of that Id.
func (s *Server) Lead(id string) (map[string]any, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leads[id]
	if l == nil {
		return nil, false
	}
	return maps.Clone(l.fields), true
}

// Email is the Email of the Lead id; "" for none.
func (s *Server) Email(id string) string {
	f, _ := s.Lead(id)
	e, _ := f["Email"].(string)
	return e
}

// IDs returns the Ids of the Leads under ref, oldest first.
func (s *Server) IDs(ref string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, l := range s.byRef[s.refKey(ref)] {
		ids = append(ids, l.id)
	}
	return ids
}

// Seed inserts a Lead with fields as they are (canonical names; the ref
// field's value under Options.RefField), as a user or an import would,
// past every rule but the Unique index. It returns the Lead's Id.
func (s *Server) Seed(fields map[string]any) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, _ := fields[s.opts.RefField].(string)
	if ref != "" && !s.opts.NotUnique && len(s.byRef[s.refKey(ref)]) > 0 {
		return "", errors.New("duplicate value on the Unique ref field")
	}
	return s.insert(maps.Clone(fields)).id, nil
}

// Convert marks the Lead converted (to an Account, a Contact and an
// Opportunity): it can no longer be updated. It reports whether the Lead
// exists.
func (s *Server) Convert(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leads[id]
	if l != nil {
		l.converted = true
	}
	return l != nil
}

// State is what the stand-in holds and was asked, without personal data.
type State struct {
	Records             int            `json:"records"`
	TokensIssued        int            `json:"tokens_issued"`
	TokensValid         int            `json:"tokens_valid"`
	RefusingCredentials bool           `json:"refusing_credentials"`
	DuplicateRule       DuplicateRule  `json:"duplicate_rule"`
	APIUsage            int            `json:"api_usage"`
	Allocation          int            `json:"allocation"`
	Requests            map[string]int `json:"requests"`
}

// State returns the stand-in's state.
func (s *Server) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return State{
		Records: len(s.leads), TokensIssued: s.tokensIssued, TokensValid: len(s.tokens), RefusingCredentials: s.refusing,
		DuplicateRule: s.dupRule, APIUsage: s.used, Allocation: s.allocation, Requests: maps.Clone(s.requests),
	}
}

// Faults as Salesforce answers them, for Script.

// RequestLimitFault is Salesforce's answer when the org's API limit is
// spent (or too many long requests run at once): 403
// REQUEST_LIMIT_EXCEEDED, without Retry-After.
func RequestLimitFault() standin.Fault {
	return standin.Fault{Status: http.StatusForbidden, Body: errorBody("TotalRequests Limit exceeded.", "REQUEST_LIMIT_EXCEEDED")}
}

// ServerErrorFault is a 503 with Salesforce's error body.
func ServerErrorFault() standin.Fault {
	return standin.Fault{Status: http.StatusServiceUnavailable, Body: errorBody("Server Unavailable", "SERVER_UNAVAILABLE")}
}

// LockFault is UNABLE_TO_LOCK_ROW: another transaction holds the record.
func LockFault() standin.Fault {
	return standin.Fault{Status: http.StatusBadRequest, Body: errorBody("unable to obtain exclusive access to this record or 1 records", "UNABLE_TO_LOCK_ROW")}
}

// APIError is one error of Salesforce's error body.
type APIError struct {
	Message   string   `json:"message"`
	ErrorCode string   `json:"errorCode"`
	Fields    []string `json:"fields,omitempty"`
}

func errorBody(msg, code string, fields ...string) string {
	b, _ := json.Marshal([]APIError{{Message: msg, ErrorCode: code, Fields: fields}})
	return string(b)
}

func apiErr(status int, msg, code string, fields ...string) standin.Answer {
	return standin.JSON(status, []APIError{{Message: msg, ErrorCode: code, Fields: fields}})
}

func notFound(msg string) standin.Answer { return apiErr(http.StatusNotFound, msg, "NOT_FOUND") }

func writeAnswer(w http.ResponseWriter, a standin.Answer) {
	for name, vs := range a.Header {
		w.Header()[name] = vs
	}
	w.WriteHeader(a.Status)
	w.Write(a.Body)
}

// serveToken is the token endpoint: the client credentials flow.
func (s *Server) serveToken(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests[TargetToken]++
	s.mu.Unlock()
	f := s.kit.Next(TargetToken)
	if goOn, _, _ := s.kit.Before(w, r, f); !goOn {
		return
	}
	s.kit.After(w, r, f, s.token(r))
}

func oauthErr(code, desc string) standin.Answer {
	return standin.JSON(http.StatusBadRequest, map[string]string{"error": code, "error_description": desc})
}

func (s *Server) token(r *http.Request) standin.Answer {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != "application/x-www-form-urlencoded" || r.ParseForm() != nil {
		return oauthErr("unsupported_grant_type", "grant type not supported")
	}
	if r.PostForm.Get("grant_type") != "client_credentials" {
		return oauthErr("unsupported_grant_type", "grant type not supported")
	}
	if r.PostForm.Get("client_id") != s.opts.ClientID {
		return oauthErr("invalid_client_id", "client identifier invalid")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	secret := r.PostForm.Get("client_secret")
	if s.refusing || subtle.ConstantTimeCompare([]byte(secret), []byte(s.opts.ClientSecret)) != 1 {
		return oauthErr("invalid_client", "invalid client credentials")
	}
	raw := make([]byte, 30)
	rand.Read(raw)
	tok := "00DStandin00001!" + base64.RawURLEncoding.EncodeToString(raw)
	s.tokens[tok] = true
	s.tokensIssued++
	origin := "https://" + r.Host
	return standin.JSON(http.StatusOK, map[string]string{
		"access_token": tok,
		"signature":    base64.StdEncoding.EncodeToString(raw[:16]),
		"scope":        "api",
		"instance_url": origin,
		"id":           origin + "/id/00DStandin00001AAA/005Standin00001AAA",
		"token_type":   "Bearer",
		"issued_at":    strconv.FormatInt(s.opts.Now().UnixMilli(), 10),
	})
}

// api serves a REST target: counted against the org's allocation,
// answered with Sforce-Limit-Info, faulted on demand, then authenticated
// and limited before h runs.
func (s *Server) api(target string, h func(r *http.Request) standin.Answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests[target]++
		s.used++
		w.Header().Set("Sforce-Limit-Info", fmt.Sprintf("api-usage=%d/%d", s.used, s.allocation))
		s.mu.Unlock()
		f := s.kit.Next(target)
		if goOn, _, _ := s.kit.Before(w, r, f); !goOn {
			return
		}
		s.kit.After(w, r, f, s.guard(r, h))
	}
}

var version = regexp.MustCompile(`^v[0-9]{2}\.0$`)

// guard refuses a call without a live session, past the allocation, of an
// unknown version or of another object than Lead; else h answers it.
func (s *Server) guard(r *http.Request, h func(r *http.Request) standin.Answer) standin.Answer {
	s.mu.Lock()
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	live := tok != "" && s.tokens[tok]
	if live && s.expireAfter > 0 {
		if s.expireAfter--; s.expireAfter == 0 {
			clear(s.tokens)
		}
	}
	over := s.used > s.allocation
	s.mu.Unlock()
	switch {
	case !live:
		return apiErr(http.StatusUnauthorized, "Session expired or invalid", "INVALID_SESSION_ID")
	case over:
		return apiErr(http.StatusForbidden, "TotalRequests Limit exceeded.", "REQUEST_LIMIT_EXCEEDED")
	case !version.MatchString(r.PathValue("version")):
		return notFound("The requested resource does not exist")
	case !strings.EqualFold(r.PathValue("object"), "Lead"):
		return notFound("The requested resource does not exist")
	}
	return h(r)
}

// apiVersion is the call's version as a number (68 for v68.0).
func apiVersion(r *http.Request) int {
	n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(r.PathValue("version"), "v"), ".0"))
	return n
}

// refKey is the Unique index's key of an external ID value.
func (s *Server) refKey(v string) string {
	if s.opts.CaseSensitive {
		return v
	}
	return strings.ToLower(v)
}

// extField checks the path's field: the ref field, an External ID. Its
// answer is nil when it is.
func (s *Server) extField(r *http.Request) *standin.Answer {
	f := r.PathValue("field")
	if s.opts.RefFieldMissing || s.opts.NotExternalID || !strings.EqualFold(f, s.opts.RefField) {
		a := notFound("Provided external ID field does not exist or is not accessible: " + f)
		return &a
	}
	return nil
}

func (s *Server) recordURL(r *http.Request, id string) string {
	return "/services/data/" + r.PathValue("version") + "/sobjects/Lead/" + id
}

// matches answers 300 for several Leads; nil otherwise.
func (s *Server) several(r *http.Request, found []*lead) *standin.Answer {
	if len(found) < 2 {
		return nil
	}
	urls := make([]string, len(found))
	for i, l := range found {
		urls[i] = s.recordURL(r, l.id)
	}
	a := standin.JSON(http.StatusMultipleChoices, urls)
	return &a
}

// upsert is PATCH .../sobjects/Lead/<field>/<value>.
func (s *Server) upsert(r *http.Request) standin.Answer {
	if a := s.extField(r); a != nil {
		return *a
	}
	body, bad := s.readBody(r, true)
	if bad != nil {
		return *bad
	}
	value := r.PathValue("value")
	s.mu.Lock()
	defer s.mu.Unlock()
	found := s.byRef[s.refKey(value)]
	if a := s.several(r, found); a != nil {
		return *a
	}
	if len(found) == 1 {
		l := found[0]
		if l.converted {
			return apiErr(http.StatusBadRequest, "cannot reference converted lead", "CANNOT_UPDATE_CONVERTED_LEAD")
		}
		merged := maps.Clone(l.fields)
		apply(merged, body)
		s.assign(r, merged)
		if a := required(merged); a != nil {
			return *a
		}
		l.fields = merged
		if s.opts.NoContentOnUpdate || apiVersion(r) < 46 {
			return standin.Answer{Status: http.StatusNoContent}
		}
		return standin.JSON(http.StatusOK, map[string]any{"id": l.id, "success": true, "errors": []any{}, "created": false})
	}
	fields := map[string]any{}
	apply(fields, body)
	fields[s.opts.RefField] = value
	s.assign(r, fields)
	if a := s.admit(r, fields); a != nil {
		return *a
	}
	l := s.insert(fields)
	answer := map[string]any{"id": l.id, "success": true, "errors": []any{}}
	if apiVersion(r) >= 46 {
		answer["created"] = true
	}
	return standin.JSON(http.StatusCreated, answer)
}

// create is POST .../sobjects/Lead: a new Lead, whose body may carry the
// ref field.
func (s *Server) create(r *http.Request) standin.Answer {
	body, bad := s.readBody(r, false)
	if bad != nil {
		return *bad
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fields := map[string]any{}
	apply(fields, body)
	if ref, _ := fields[s.opts.RefField].(string); ref != "" && !s.opts.NotUnique {
		if dup := s.byRef[s.refKey(ref)]; len(dup) > 0 {
			return apiErr(http.StatusBadRequest, "duplicate value found: "+s.opts.RefField+" duplicates value on record with id: "+dup[0].id, "DUPLICATE_VALUE")
		}
	}
	s.assign(r, fields)
	if a := s.admit(r, fields); a != nil {
		return *a
	}
	l := s.insert(fields)
	return standin.JSON(http.StatusCreated, map[string]any{"id": l.id, "success": true, "errors": []any{}})
}

// admit applies the rules of an insert: the required fields, then the
// duplicate rule. Its answer is nil when the Lead may be inserted.
func (s *Server) admit(r *http.Request, fields map[string]any) *standin.Answer {
	if a := required(fields); a != nil {
		return a
	}
	email, _ := fields["Email"].(string)
	if s.dupRule == DuplicatesOff || email == "" {
		return nil
	}
	if s.dupRule == DuplicatesAlert && allowSave(r.Header.Get("Sforce-Duplicate-Rule-Header")) {
		return nil
	}
	var match []string
	for _, l := range s.leads {
		if e, _ := l.fields["Email"].(string); strings.EqualFold(e, email) {
			match = append(match, l.id)
		}
	}
	if len(match) == 0 {
		return nil
	}
	slices.Sort(match)
	const msg = "You're creating a duplicate record. We recommend you use an existing record instead."
	records := make([]map[string]any, len(match))
	for i, id := range match {
		records[i] = map[string]any{"record": map[string]any{"attributes": map[string]string{"type": "Lead", "url": s.recordURL(r, id)}, "Id": id}}
	}
	a := standin.JSON(http.StatusBadRequest, []map[string]any{{
		"duplicateResult": map[string]any{
			"allowSave": s.dupRule == DuplicatesAlert, "duplicateRule": "Standard_Lead_Duplicate_Rule", "duplicateRuleEntityType": "Lead",
			"errorMessage": msg,
			"matchResults": []map[string]any{{"entityType": "Lead", "matchEngine": "FuzzyMatchEngine", "matchRecords": records, "size": len(match), "success": true}},
		},
		"errorCode": "DUPLICATES_DETECTED",
		"message":   msg,
	}})
	return &a
}

// assign runs the org's assignment rule on a Lead being written, unless
// the call turns it off.
func (s *Server) assign(r *http.Request, fields map[string]any) {
	if s.opts.AssignmentRuleOwner != "" && !strings.EqualFold(strings.TrimSpace(r.Header.Get("Sforce-Auto-Assign")), "FALSE") {
		fields["OwnerId"] = s.opts.AssignmentRuleOwner
	}
}

// allowSave reads Sforce-Duplicate-Rule-Header's allowSave.
func allowSave(h string) bool {
	for part := range strings.SplitSeq(h, ";") {
		if k, v, ok := strings.Cut(strings.TrimSpace(part), "="); ok && strings.EqualFold(k, "allowSave") {
			return strings.EqualFold(strings.TrimSpace(v), "true")
		}
	}
	return false
}

func required(fields map[string]any) *standin.Answer {
	var missing []string
	for _, f := range []string{"LastName", "Company"} {
		if v, _ := fields[f].(string); strings.TrimSpace(v) == "" {
			missing = append(missing, f)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	a := apiErr(http.StatusBadRequest, "Required fields are missing: ["+strings.Join(missing, ", ")+"]", "REQUIRED_FIELD_MISSING", missing...)
	return &a
}

// apply writes body over fields: a null clears a field.
func apply(fields, body map[string]any) {
	for k, v := range body {
		if v == nil {
			delete(fields, k)
		} else {
			fields[k] = v
		}
	}
}

func (s *Server) insert(fields map[string]any) *lead {
	s.seq++
	l := &lead{id: fmt.Sprintf("00QSt%010dIAA", s.seq), fields: fields}
	s.leads[l.id] = l
	if ref, _ := fields[s.opts.RefField].(string); ref != "" {
		k := s.refKey(ref)
		s.byRef[k] = append(s.byRef[k], l)
	}
	return l
}

// lookup is GET .../sobjects/Lead/<field>/<value>?fields=.
func (s *Server) lookup(r *http.Request) standin.Answer {
	if a := s.extField(r); a != nil {
		return *a
	}
	var want []string
	if q := r.URL.Query().Get("fields"); q != "" {
		for f := range strings.SplitSeq(q, ",") {
			name, ok := s.canonical(strings.TrimSpace(f))
			if !ok {
				return apiErr(http.StatusBadRequest, "No such column '"+strings.TrimSpace(f)+"' on entity 'Lead'.", "INVALID_FIELD")
			}
			want = append(want, name)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	found := s.byRef[s.refKey(r.PathValue("value"))]
	if a := s.several(r, found); a != nil {
		return *a
	}
	if len(found) == 0 {
		return notFound("The requested resource does not exist")
	}
	l := found[0]
	out := map[string]any{"attributes": map[string]string{"type": "Lead", "url": s.recordURL(r, l.id)}}
	if want == nil {
		maps.Copy(out, l.fields)
		out["Id"], out["IsConverted"] = l.id, l.converted
	}
	for _, f := range want {
		switch f {
		case "Id":
			out[f] = l.id
		case "IsConverted":
			out[f] = l.converted
		default:
			out[f] = l.fields[f]
		}
	}
	return standin.JSON(http.StatusOK, out)
}

// readBody reads a create's or an upsert's body: one JSON object of
// writable Lead fields, by canonical name. byExt refuses Id and the ref
// field, which an upsert by external ID takes from its path.
func (s *Server) readBody(r *http.Request, byExt bool) (map[string]any, *standin.Answer) {
	bad := func(a standin.Answer) (map[string]any, *standin.Answer) { return nil, &a }
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
		return bad(apiErr(http.StatusUnsupportedMediaType, "Content-Type header specified in HTTP request is not supported: "+ct, "UNSUPPORTED_MEDIA_TYPE"))
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return bad(apiErr(http.StatusBadRequest, "the body could not be read", "JSON_PARSER_ERROR"))
	}
	var body map[string]any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil || body == nil || dec.More() {
		return bad(apiErr(http.StatusBadRequest, "Unexpected character: the body is not one JSON object", "JSON_PARSER_ERROR"))
	}
	out := make(map[string]any, len(body))
	for k, v := range body {
		name, ok := s.canonical(k)
		switch {
		case !ok:
			return bad(apiErr(http.StatusBadRequest, "No such column '"+k+"' on sobject of type Lead", "INVALID_FIELD"))
		case byExt && (name == "Id" || name == s.opts.RefField):
			return bad(apiErr(http.StatusBadRequest, name+" is the external ID of the upsert: it cannot be specified in the body", "INVALID_FIELD", name))
		case readOnly[name]:
			return bad(apiErr(http.StatusBadRequest, "Unable to create/update fields: "+name+". Please check the security settings of this field and verify that it is read/write for your profile or permission set.", "INVALID_FIELD_FOR_INSERT_UPDATE", name))
		}
		v, a := s.check(name, v)
		if a != nil {
			return nil, a
		}
		out[name] = v
	}
	return out, nil
}

var (
	emailRE = regexp.MustCompile(`^[^@\s]+@[^@\s]+\.[^@\s]+$`)
	userID  = regexp.MustCompile(`^005[A-Za-z0-9]{12}([A-Za-z0-9]{3})?$`)
)

// check checks one field's value against its type and length, and returns
// it as stored.
func (s *Server) check(name string, v any) (any, *standin.Answer) {
	if v == nil {
		return nil, nil
	}
	bad := func(a standin.Answer) (any, *standin.Answer) { return nil, &a }
	kind, length := s.fieldType(name)
	switch kind {
	case "int", "currency":
		n, ok := v.(json.Number)
		if !ok {
			return bad(apiErr(http.StatusBadRequest, "Cannot deserialize instance of "+kind+" from a non-number for "+name, "JSON_PARSER_ERROR"))
		}
		f, _ := n.Float64()
		return f, nil
	case "boolean":
		if _, ok := v.(bool); !ok {
			return bad(apiErr(http.StatusBadRequest, "Cannot deserialize instance of boolean for "+name, "JSON_PARSER_ERROR"))
		}
		return v, nil
	case "any":
		if n, ok := v.(json.Number); ok {
			f, _ := n.Float64()
			return f, nil
		}
	}
	str, ok := v.(string)
	if !ok {
		if _, isBool := v.(bool); kind == "any" && isBool {
			return v, nil
		}
		return bad(apiErr(http.StatusBadRequest, "Cannot deserialize instance of string from a non-string for "+name, "JSON_PARSER_ERROR"))
	}
	switch {
	case utf8.RuneCountInString(str) > length:
		return bad(apiErr(http.StatusBadRequest, name+": data value too large (max length="+strconv.Itoa(length)+")", "STRING_TOO_LONG", name))
	case kind == "email" && str != "" && !emailRE.MatchString(str):
		return bad(apiErr(http.StatusBadRequest, "Email: invalid email address", "INVALID_EMAIL_ADDRESS", name))
	case kind == "reference" && !userID.MatchString(str):
		return bad(apiErr(http.StatusBadRequest, "Owner ID: id value of incorrect type", "MALFORMED_ID", name))
	}
	return str, nil
}

// The fields of Lead: type and length.
type fieldDef struct {
	kind   string // the describe's type; "any" for a custom field of the options
	length int
}

var standardFields = map[string]fieldDef{
	"Id": {"id", 18}, "Name": {"string", 121}, "IsConverted": {"boolean", 0},
	"LastName": {"string", 80}, "FirstName": {"string", 40}, "Salutation": {"picklist", 40}, "MiddleName": {"string", 40},
	"Suffix": {"string", 40}, "Title": {"string", 128}, "Company": {"string", 255}, "Street": {"textarea", 255},
	"City": {"string", 40}, "State": {"string", 80}, "PostalCode": {"string", 20}, "Country": {"string", 80},
	"Email": {"email", 80}, "Phone": {"phone", 40}, "MobilePhone": {"phone", 40}, "Fax": {"phone", 40},
	"Website": {"url", 255}, "Description": {"textarea", 32000}, "LeadSource": {"picklist", 255},
	"Status": {"picklist", 255}, "Industry": {"picklist", 255}, "Rating": {"picklist", 255},
	"AnnualRevenue": {"currency", 0}, "NumberOfEmployees": {"int", 0}, "OwnerId": {"reference", 18},
	"HasOptedOutOfEmail": {"boolean", 0}, "DoNotCall": {"boolean", 0},
}

var readOnly = map[string]bool{"Id": true, "Name": true, "IsConverted": true}

// canonical is a field's name as Lead spells it (field names ignore case),
// and whether Lead has it.
func (s *Server) canonical(name string) (string, bool) {
	for f := range standardFields {
		if strings.EqualFold(f, name) {
			return f, true
		}
	}
	if !s.opts.RefFieldMissing && strings.EqualFold(name, s.opts.RefField) {
		return s.opts.RefField, true
	}
	for _, f := range s.opts.CustomFields {
		if strings.EqualFold(f, name) {
			return f, true
		}
	}
	return "", false
}

func (s *Server) fieldType(name string) (kind string, length int) {
	if d, ok := standardFields[name]; ok {
		return d.kind, d.length
	}
	if name == s.opts.RefField {
		return "string", s.opts.RefFieldLength
	}
	return "any", 255
}

// describe is GET .../sobjects/Lead/describe.
func (s *Server) describe(*http.Request) standin.Answer {
	type field struct {
		Name          string `json:"name"`
		Type          string `json:"type"`
		Length        int    `json:"length"`
		Custom        bool   `json:"custom"`
		ExternalID    bool   `json:"externalId"`
		Unique        bool   `json:"unique"`
		CaseSensitive bool   `json:"caseSensitive"`
		IDLookup      bool   `json:"idLookup"`
		Createable    bool   `json:"createable"`
		Updateable    bool   `json:"updateable"`
		Nillable      bool   `json:"nillable"`
	}
	var fields []field
	for _, name := range slices.Sorted(maps.Keys(standardFields)) {
		d := standardFields[name]
		fields = append(fields, field{Name: name, Type: d.kind, Length: d.length, IDLookup: name == "Id",
			Createable: !readOnly[name], Updateable: !readOnly[name], Nillable: name != "Id" && name != "LastName" && name != "Company"})
	}
	if !s.opts.RefFieldMissing {
		fields = append(fields, field{Name: s.opts.RefField, Type: "string", Length: s.opts.RefFieldLength, Custom: true,
			ExternalID: !s.opts.NotExternalID, Unique: !s.opts.NotUnique, CaseSensitive: s.opts.CaseSensitive,
			IDLookup: !s.opts.NotExternalID, Createable: true, Updateable: true, Nillable: true})
	}
	for _, name := range s.opts.CustomFields {
		fields = append(fields, field{Name: name, Type: "string", Length: 255, Custom: true, Createable: true, Updateable: true, Nillable: true})
	}
	return standin.JSON(http.StatusOK, map[string]any{
		"name": "Lead", "label": "Lead", "keyPrefix": "00Q", "custom": false, "createable": true, "updateable": true,
		"queryable": true, "fields": fields,
	})
}
