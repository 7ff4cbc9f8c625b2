package pipedrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leadintake/leadintake/destination"
)

// Kind is the kind's name in the clients file.
const Kind = "pipedrive"

// Origin is Pipedrive's API origin; base_url replaces it (a company domain
// such as https://acme.pipedrive.com serves the same paths under /api, and
// a stand-in serves them at its root).
const Origin = "https://api.pipedrive.com"

// OriginID is what the kind sets as a lead's origin_id, so that Pipedrive's
// users can tell the leads it made.
const OriginID = "leadintake"

// Paths the kind calls, appended to the base.
const (
	pathPersonSearch = "/api/v2/persons/search"
	pathPersons      = "/api/v2/persons"
	pathLeads        = "/v1/leads"
	pathLeadsArchive = "/v1/leads/archived"
	pathUserMe       = "/v1/users/me"
	pathDealField    = "/api/v2/dealFields/"
)

// pageSize is the largest page Pipedrive's lists give (limit); a person
// with more leads than that is read in several pages.
const pageSize = 500

// maxPages bounds the pages read of one list, so that an answer that always
// says there is more cannot keep a look-up going for ever.
const maxPages = 100

// searchLimit is how many persons a search asks for; several persons may
// share an email (a duplicate person, see the package doc).
const searchLimit = 100

// maxTitle bounds the part of a lead's title taken from the lead.
const maxTitle = 200

var refFieldKey = regexp.MustCompile(`^[0-9a-f]{40}$`)

// reserved are the lead members the kind writes itself: a map may not name
// them.
var reserved = []string{"title", "person_id", "organization_id", "owner_id", "origin_id", "is_archived"}

// Spec is the kind.
var Spec = destination.Spec{
	Kind:     Kind,
	Families: []destination.Family{destination.FamilyCRM},
	Members: []destination.Member{
		{Name: "api_token", Required: true, Secret: true},
		{Name: "ref_field", Required: true},
	},
	Validate: validate,
	NewCRM:   func(c *destination.Config) (destination.CRM, error) { return New(c), nil },
}

func validate(c *destination.Config) error {
	tok := c.Value("api_token")
	if tok == "" {
		return errors.New("api_token is required")
	}
	for _, r := range tok {
		if r <= ' ' || r == 0x7f {
			return errors.New("api_token must be one line without spaces")
		}
	}
	ref := c.Value("ref_field")
	if !refFieldKey.MatchString(ref) {
		return errors.New("ref_field must be the 40-character key (0-9, a-f) of a text deal field, as Pipedrive shows it in Company settings > Data fields")
	}
	if c.BaseURL != "" {
		if err := destination.CheckHTTPURL("base_url", c.BaseURL, true); err != nil {
			return err
		}
	}
	for _, e := range c.Map {
		if slices.Contains(reserved, e.Field) || e.Field == ref {
			return fmt.Errorf("map: %s is written by the pipedrive kind itself", e.Field)
		}
	}
	return nil
}

// CRM is a destination of kind pipedrive.
type CRM struct {
	http     *http.Client
	base     string
	token    string
	refField string
	mapping  destination.Mapping
	// now is the clock a Retry-After date is read against.
	now func() time.Time
}

// New returns the CRM c configures (c as Spec.Validate accepted it).
func New(c *destination.Config) *CRM {
	return &CRM{
		http:     destination.NewHTTPClient(Kind, c.Timeout),
		base:     c.Base(Origin),
		token:    c.Value("api_token"),
		refField: c.Value("ref_field"),
		mapping:  c.Map,
		now:      time.Now,
	}
}

// Capabilities: a create kind (no write is keyed by the reference) whose
// look-up is a list of the prepared person's leads, consistent; a lead found
// or known by id is updated; the person is prepared first.
func (c *CRM) Capabilities() destination.CRMCapabilities {
	return destination.CRMCapabilities{Upsert: false, ConsistentLookup: true, UpdateByID: true, Prepares: true}
}

// Prepare finds the person by the lead's email, exactly, or creates it, and
// returns the person's id.
func (c *CRM) Prepare(ctx context.Context, r *destination.Record) (string, error) {
	email := strings.TrimSpace(r.Lead.Email)
	if email == "" {
		return "", &destination.Error{Op: "crm person", Class: destination.Rejected, Code: "no_email", Err: errors.New("the lead has no email to find its person by")}
	}
	id, found, err := c.findPerson(ctx, email)
	if err != nil || found {
		return id, err
	}
	return c.createPerson(ctx, r, email)
}

// findPerson searches the persons by exact email and returns the one with
// the lowest id whose emails hold it: the oldest, the same whichever
// attempt asks, once the index has caught up.
func (c *CRM) findPerson(ctx context.Context, email string) (string, bool, error) {
	q := url.Values{"term": {email}, "fields": {"email"}, "exact_match": {"true"}, "limit": {strconv.Itoa(searchLimit)}}
	req := &destination.Request{Op: "crm person search", Step: "crm_person", Method: http.MethodGet,
		URL: c.base + pathPersonSearch + "?" + q.Encode(), Header: c.header()}
	var a struct {
		Data struct {
			Items []struct {
				Item struct {
					ID     int64    `json:"id"`
					Emails []string `json:"emails"`
				} `json:"item"`
			} `json:"items"`
		} `json:"data"`
	}
	if err := c.call(ctx, req, &a, http.StatusOK); err != nil {
		return "", false, err
	}
	var best int64
	for _, it := range a.Data.Items {
		if it.Item.ID <= 0 || (best != 0 && it.Item.ID >= best) {
			continue
		}
		if slices.ContainsFunc(it.Item.Emails, func(e string) bool { return strings.EqualFold(strings.TrimSpace(e), email) }) {
			best = it.Item.ID
		}
	}
	if best == 0 {
		return "", false, nil
	}
	return strconv.FormatInt(best, 10), true, nil
}

// personValue is a person's email or phone as API v2 takes them.
type personValue struct {
	Value   string `json:"value"`
	Primary bool   `json:"primary"`
	Label   string `json:"label"`
}

func (c *CRM) createPerson(ctx context.Context, r *destination.Record, email string) (string, error) {
	name := strings.TrimSpace(r.Lead.Name)
	if name == "" {
		// Pipedrive requires a person's name.
		name = email
	}
	body := map[string]any{
		"name":   name,
		"emails": []personValue{{Value: email, Primary: true, Label: "work"}},
	}
	if p := strings.TrimSpace(r.Lead.Phone); p != "" {
		body["phones"] = []personValue{{Value: p, Primary: true, Label: "work"}}
	}
	req := &destination.Request{Op: "crm person create", Step: "crm_person", Method: http.MethodPost,
		URL: c.base + pathPersons, Header: c.header(), NoResend: true}
	if err := req.JSON(body); err != nil {
		return "", err
	}
	var a struct {
		Data struct {
			ID int64 `json:"id"`
		} `json:"data"`
	}
	if err := c.call(ctx, req, &a, http.StatusOK, http.StatusCreated); err != nil {
		return "", err
	}
	if a.Data.ID <= 0 {
		return "", noID(req.Op)
	}
	return strconv.FormatInt(a.Data.ID, 10), nil
}

// Lookup lists the leads of the prepared person, open then archived, and
// returns the one whose ref_field holds the reference (the oldest, were
// there several). Without a prepared person (a look-up outside the lead's
// life) the person is searched for, not created, and the answer is only as
// fresh as the search's index.
func (c *CRM) Lookup(ctx context.Context, r *destination.Record) (string, bool, error) {
	person := r.Prepared
	if person == "" {
		id, found, err := c.findPerson(ctx, strings.TrimSpace(r.Lead.Email))
		if err != nil || !found {
			return "", false, err
		}
		person = id
	}
	if _, err := personID(person); err != nil {
		return "", false, err
	}
	for _, path := range []string{pathLeads, pathLeadsArchive} {
		id, found, err := c.findLead(ctx, path, person, r.ExternalRef)
		if err != nil || found {
			return id, found, err
		}
	}
	return "", false, nil
}

// findLead reads the list at path of the person's leads, page by page,
// for the lead whose ref_field is ref.
func (c *CRM) findLead(ctx context.Context, path, person, ref string) (string, bool, error) {
	start := 0
	for range maxPages {
		q := url.Values{"person_id": {person}, "limit": {strconv.Itoa(pageSize)}, "start": {strconv.Itoa(start)}}
		req := &destination.Request{Op: "crm lookup", Step: "crm_lookup", Method: http.MethodGet,
			URL: c.base + path + "?" + q.Encode(), Header: c.header()}
		var a struct {
			Data           []map[string]json.RawMessage `json:"data"`
			AdditionalData struct {
				pagination
				// The v1 lists put their pagination under
				// additional_data.pagination; the leads' schema
				// documents it in additional_data itself. Both are
				// read.
				Pagination pagination `json:"pagination"`
			} `json:"additional_data"`
		}
		if err := c.call(ctx, req, &a, http.StatusOK); err != nil {
			return "", false, err
		}
		for _, l := range a.Data {
			var got, id string
			if json.Unmarshal(l[c.refField], &got) == nil && got == ref && json.Unmarshal(l["id"], &id) == nil && id != "" {
				return id, true, nil
			}
		}
		more, next := a.AdditionalData.Pagination.next(start, len(a.Data))
		if m, n := a.AdditionalData.pagination.next(start, len(a.Data)); m {
			more, next = true, n
		}
		if !more {
			return "", false, nil
		}
		if next <= start {
			return "", false, &destination.Error{Op: req.Op, Status: http.StatusOK, Class: destination.Transient,
				Err: errors.New("a list's next page does not move on")}
		}
		start = next
	}
	return "", false, &destination.Error{Op: "crm lookup", Class: destination.Transient,
		Err: fmt.Errorf("the person's leads fill more than %d pages", maxPages)}
}

// pagination is a v1 list's account of what is left.
type pagination struct {
	MoreItems bool `json:"more_items_in_collection"`
	NextStart *int `json:"next_start"`
}

// next reports whether there is more after a page of n items from start,
// and where it starts.
func (p pagination) next(start, n int) (bool, int) {
	if !p.MoreItems {
		return false, 0
	}
	if p.NextStart != nil {
		return true, *p.NextStart
	}
	return true, start + n
}

// Write creates the lead for the prepared person (preparing it first when
// the caller did not) and returns its id. A create is sent once: after an
// uncertain outcome the lead's life looks it up before any new create.
func (c *CRM) Write(ctx context.Context, r *destination.Record) (string, error) {
	person, err := c.person(ctx, r)
	if err != nil {
		return "", err
	}
	body, err := c.leadBody(r, person)
	if err != nil {
		return "", err
	}
	body["origin_id"] = OriginID
	req := &destination.Request{Op: "crm create", Step: "crm", Method: http.MethodPost,
		URL: c.base + pathLeads, Header: c.header(), NoResend: true}
	if err := req.JSON(body); err != nil {
		return "", err
	}
	return c.writeLead(ctx, req, http.StatusCreated, http.StatusOK)
}

// Update writes r over the lead id: its title, person (an amendment whose
// email changed prepared another person), reference, owner and the map's
// fields. A lead Pipedrive refuses to edit (archived, or gone: converted to
// a deal or deleted) rejects the lead.
func (c *CRM) Update(ctx context.Context, id string, r *destination.Record) (string, error) {
	person, err := c.person(ctx, r)
	if err != nil {
		return "", err
	}
	body, err := c.leadBody(r, person)
	if err != nil {
		return "", err
	}
	req := &destination.Request{Op: "crm update", Step: "crm", Method: http.MethodPatch,
		URL: c.base + pathLeads + "/" + url.PathEscape(id), Header: c.header()}
	if err := req.JSON(body); err != nil {
		return "", err
	}
	got, err := c.writeLead(ctx, req, http.StatusOK)
	if e, ok := destination.AsError(err); ok && (e.Status == http.StatusNotFound || e.Status == http.StatusGone) {
		// A lead converted to a deal leaves the Leads Inbox: there is
		// nothing left to edit, now or later.
		e.Class, e.Uncertain = destination.Rejected, false
		if e.Code == "" || e.Code == "not_found" {
			e.Code = "lead_not_found"
		}
	}
	return got, err
}

// person is the prepared person, or one prepared now.
func (c *CRM) person(ctx context.Context, r *destination.Record) (string, error) {
	if r.Prepared != "" {
		return r.Prepared, nil
	}
	return c.Prepare(ctx, r)
}

func (c *CRM) writeLead(ctx context.Context, req *destination.Request, ok ...int) (string, error) {
	var a struct {
		Data struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := c.call(ctx, req, &a, ok...); err != nil {
		return "", err
	}
	if a.Data.ID == "" {
		return "", noID(req.Op)
	}
	return a.Data.ID, nil
}

// leadBody is a lead's members for person: the map's fields, then the
// kind's own (title, person, reference, owner), which a map cannot name.
func (c *CRM) leadBody(r *destination.Record, person string) (map[string]any, error) {
	pid, err := personID(person)
	if err != nil {
		return nil, err
	}
	body := c.mapping.Values(r)
	body["title"] = Title(r)
	body["person_id"] = pid
	body[c.refField] = r.ExternalRef
	if r.Owner != nil && r.Owner.CRMOwner != "" {
		owner, err := strconv.ParseInt(r.Owner.CRMOwner, 10, 64)
		if err != nil || owner <= 0 {
			return nil, &destination.Error{Op: "crm write", Class: destination.Rejected, Code: "invalid_owner",
				Err: errors.New("the owner's crm_owner is not a Pipedrive user id (a number)")}
		}
		body["owner_id"] = owner
	}
	return body, nil
}

// Title is a lead's title in Pipedrive: its company, else its sender's
// name, and where it came from; no more of the lead than a title needs.
func Title(r *destination.Record) string {
	s := strings.TrimSpace(r.Lead.Company)
	if s == "" {
		s = strings.TrimSpace(r.Lead.Name)
	}
	if s == "" {
		s = "Enquiry"
	}
	if utf8.RuneCountInString(s) > maxTitle {
		s = string([]rune(s)[:maxTitle])
	}
	return s + " (leadintake)"
}

// personID reads a prepared person's id, a positive number.
func personID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, &destination.Error{Op: "crm person", Class: destination.Rejected, Code: "invalid_person",
			Err: errors.New("the prepared person is not a Pipedrive person id")}
	}
	return id, nil
}

func (c *CRM) header() http.Header {
	return http.Header{"X-Api-Token": {c.token}}
}

// call makes req and decodes its answer into v when its status is one of
// ok and it says success; any other answer is classified (answerError).
func (c *CRM) call(ctx context.Context, req *destination.Request, v any, ok ...int) error {
	resp, err := destination.Do(ctx, c.http, req)
	if err != nil {
		return err
	}
	if !resp.OK(ok...) {
		return answerError(req, resp, c.now())
	}
	var s struct {
		Success *bool `json:"success"`
	}
	if err := resp.Decode(req.Op, &s); err != nil {
		return err
	}
	if s.Success != nil && !*s.Success {
		// A success status whose body says otherwise: what it answers
		// may or may not have been applied.
		e := answerError(req, resp, c.now())
		e.Class, e.Uncertain, e.HoldAll, e.RetryAfter = destination.Transient, true, false, 0
		e.Err = errors.New("the answer says success false")
		return e
	}
	return resp.Decode(req.Op, v)
}

// noID is a success without the id it should carry: the write may have
// been applied.
func noID(op string) error {
	return &destination.Error{Op: op, Class: destination.Transient, Uncertain: true, Err: errors.New("answer has no id")}
}

// Check reads the token's user (GET /v1/users/me) and the ref_field among
// the deal fields (GET /api/v2/dealFields/{key}): it must exist and be a
// text field (Text or Large text).
func (c *CRM) Check(ctx context.Context) error {
	req := &destination.Request{Op: "check user", Method: http.MethodGet, URL: c.base + pathUserMe, Header: c.header()}
	var me struct {
		Data struct {
			ID int64 `json:"id"`
		} `json:"data"`
	}
	if err := c.call(ctx, req, &me, http.StatusOK); err != nil {
		return err
	}
	req = &destination.Request{Op: "check ref_field", Method: http.MethodGet,
		URL: c.base + pathDealField + url.PathEscape(c.refField), Header: c.header()}
	resp, err := destination.Do(ctx, c.http, req)
	if err != nil {
		return err
	}
	if resp.Status == http.StatusNotFound {
		return fmt.Errorf("ref_field %s is not among the deal fields", c.refField)
	}
	if !resp.OK(http.StatusOK) {
		return answerError(req, resp, c.now())
	}
	var f struct {
		Data struct {
			Code   string `json:"field_code"`
			Type   string `json:"field_type"`
			Custom bool   `json:"is_custom_field"`
		} `json:"data"`
	}
	if err := resp.Decode(req.Op, &f); err != nil {
		return err
	}
	switch {
	case f.Data.Code != c.refField:
		return fmt.Errorf("ref_field %s is not among the deal fields", c.refField)
	case !f.Data.Custom:
		return fmt.Errorf("ref_field %s is not a custom deal field", c.refField)
	case f.Data.Type != "varchar" && f.Data.Type != "text":
		return fmt.Errorf("ref_field %s is a %s field, want a text field (Text or Large text)", c.refField, safeWord(f.Data.Type))
	}
	return nil
}
