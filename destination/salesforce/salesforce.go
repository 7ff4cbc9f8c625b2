package salesforce

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/leadintake/leadintake/destination"
)

// Kind is the kind's name in the clients file.
const Kind = "salesforce"

// APIVersion is the Salesforce REST API version the kind is built for:
// Winter '27, the release the current documentation describes, on every
// org since that release (autumn 2026). Nothing the kind uses is newer
// than v52.0 (the Duplicate Rule Header); an update answers 200 with its
// id since v46.0.
const APIVersion = "v68.0"

// DefaultRefField is the custom field ref_field names when the
// configuration does not.
const DefaultRefField = "LeadIntake_Ref__c"

// NotProvided is written to LastName and Company, which Salesforce
// requires of a Lead, when the lead has none.
const NotProvided = "[not provided]"

// LimitHold is how long an answer that says the org's API limit is spent
// holds every lead's calls: Salesforce sends no Retry-After.
const LimitHold = time.Minute

// RefLength is the length ref_field must hold: the contract's bound on a
// reference.
const RefLength = 64

// Members of the kind.
const (
	MemberInstanceURL  = "instance_url"
	MemberClientID     = "client_id"
	MemberClientSecret = "client_secret"
	MemberRefField     = "ref_field"
)

var (
	// customField is a custom field's API name: a letter, then letters,
	// digits and underscores (a namespace prefix included), ending in __c.
	customField = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,100}__c$`)
	// fieldName is any field's API name.
	fieldName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,120}$`)
)

// Spec is the kind.
var Spec = destination.Spec{
	Kind:     Kind,
	Families: []destination.Family{destination.FamilyCRM},
	Members: []destination.Member{
		{Name: MemberInstanceURL, Required: true},
		{Name: MemberClientID, Required: true},
		{Name: MemberClientSecret, Required: true, Secret: true},
		{Name: MemberRefField},
	},
	Validate: validate,
	NewCRM:   func(c *destination.Config) (destination.CRM, error) { return NewCRM(c), nil },
}

func validate(c *destination.Config) error {
	if err := checkInstanceURL(c.Value(MemberInstanceURL)); err != nil {
		return err
	}
	if c.Value(MemberClientID) == "" {
		return errors.New("client_id is required")
	}
	if c.Value(MemberClientSecret) == "" {
		return errors.New("client_secret is required")
	}
	ref := refField(c)
	if !customField.MatchString(ref) {
		return errors.New("ref_field must be a custom field's API name (letters, digits and _, ending in __c)")
	}
	if c.BaseURL != "" {
		if err := destination.CheckHTTPURL("base_url", c.BaseURL, true); err != nil {
			return err
		}
	}
	seen := map[string]string{}
	for _, e := range c.Map {
		switch low := strings.ToLower(e.Field); {
		case !fieldName.MatchString(e.Field):
			return fmt.Errorf("map: %s is not a Salesforce field name (letters, digits and _)", e.Field)
		case low == "id":
			return errors.New("map: Id is the record's own; it cannot be written")
		case low == strings.ToLower(ref):
			return fmt.Errorf("map: %s is the ref_field the kind writes under; it cannot be mapped", e.Field)
		case seen[low] != "":
			return fmt.Errorf("map: %s and %s are one Salesforce field (names ignore case)", seen[low], e.Field)
		default:
			seen[low] = e.Field
		}
	}
	return nil
}

// checkInstanceURL accepts an https origin: the org's My Domain URL.
func checkInstanceURL(raw string) error {
	bad := errors.New("instance_url must be the org's My Domain URL, https://<domain>.my.salesforce.com (an https origin, without a path)")
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
		(u.Path != "" && u.Path != "/") {
		return bad
	}
	return nil
}

func refField(c *destination.Config) string {
	if f := c.Value(MemberRefField); f != "" {
		return f
	}
	return DefaultRefField
}

// CRM is a Salesforce org as a CRM destination. One CRM serves every lead of
// the process, concurrently: they share its connections and its token.
type CRM struct {
	http         *http.Client
	base         string
	clientID     string
	clientSecret string
	refField     string
	mapping      destination.Mapping
	tokens       *tokens
}

// NewCRM returns the CRM c configures (checked by Spec.Validate). Its
// calls go to c's base_url when set, else to instance_url.
func NewCRM(c *destination.Config) *CRM {
	crm := &CRM{
		http:         destination.NewHTTPClient(Kind, c.Timeout),
		base:         c.Base(c.Value(MemberInstanceURL)),
		clientID:     c.Value(MemberClientID),
		clientSecret: c.Value(MemberClientSecret),
		refField:     refField(c),
		mapping:      c.Map,
	}
	crm.tokens = &tokens{fetch: crm.fetchToken}
	return crm
}

// Capabilities: the write is an upsert keyed by the reference; a look-up by
// the reference reads the unique index, never a search that lags. An
// amendment has its chain's reference, so its upsert updates the chain's
// Lead: no update by id is needed.
func (c *CRM) Capabilities() destination.CRMCapabilities {
	return destination.CRMCapabilities{Upsert: true, ConsistentLookup: true}
}

// recordURL is the Lead under ref: the sObject Rows by External ID
// resource. References are base64url, but a path segment is escaped all the
// same.
func (c *CRM) recordURL(ref string) string {
	return c.base + "/services/data/" + APIVersion + "/sobjects/Lead/" + url.PathEscape(c.refField) + "/" + url.PathEscape(ref)
}

// Write upserts the lead's Lead under its reference and returns the Lead's
// Id.
func (c *CRM) Write(ctx context.Context, r *destination.Record) (string, error) {
	req := &destination.Request{Op: "crm upsert", Step: "crm", Method: http.MethodPatch, URL: c.recordURL(r.ExternalRef),
		// Alert duplicate rules (Salesforce's standard Lead rule is one)
		// let a user save after a warning; the API refuses unless told
		// so. Block rules still refuse (DUPLICATES_DETECTED).
		Header: http.Header{"Sforce-Duplicate-Rule-Header": {"allowSave=true"}}}
	body := c.body(r)
	if hasOwner(body) {
		// The owner leadintake chose, once, stays: the org's active Lead
		// assignment rule, which REST API runs on every create and update
		// unless told not to, would replace it (and again on each repeat).
		// Without an owner, the rule assigns the Lead as it would any.
		req.Header.Set("Sforce-Auto-Assign", "FALSE")
	}
	if err := req.JSON(body); err != nil {
		return "", err
	}
	resp, err := c.call(ctx, req)
	if err != nil {
		return "", err
	}
	switch {
	case resp.OK() && (resp.Status == http.StatusNoContent || len(strings.TrimSpace(string(resp.Body))) == 0):
		// An update answered as before API version 46.0: the Lead is
		// there, its Id is not in the answer.
		return c.readID(ctx, r)
	case resp.OK():
		return upsertID(req.Op, resp)
	case resp.Status == http.StatusNotFound:
		// The field in the path is not an External ID the run-as user can
		// see (missing, or hidden by field-level security), or Lead is not
		// accessible: the destination's configuration, not the lead.
		e := c.answerError(req.Op, resp)
		e.Class, e.Uncertain = destination.Unauthorized, false
		e.Err = fmt.Errorf("ref_field %s or Lead not found (missing, or hidden from the run-as user)", c.refField)
		return "", e
	default:
		return "", c.answerError(req.Op, resp)
	}
}

// upsertResult is the answer of an upsert that created (201) or updated
// (200) a record.
type upsertResult struct {
	ID      string `json:"id"`
	Success bool   `json:"success"`
	Created bool   `json:"created"`
}

// upsertID reads the upsert's {"id"}. A success without a usable id may
// still have written the Lead: transient and uncertain.
func upsertID(op string, resp *destination.Response) (string, error) {
	var a upsertResult
	if err := resp.Decode(op, &a); err != nil {
		return "", err
	}
	if a.ID == "" {
		return "", &destination.Error{Op: op, Status: resp.Status, Class: destination.Transient, Uncertain: true,
			Err: errors.New("answer has no id")}
	}
	return a.ID, nil
}

// readID reads the Id of the Lead an upsert answered without a body.
func (c *CRM) readID(ctx context.Context, r *destination.Record) (string, error) {
	id, found, err := c.lookup(ctx, "crm upsert read", r)
	switch {
	case err != nil:
		if e, ok := destination.AsError(err); ok && e.Class == destination.Transient {
			e.Uncertain = true // the upsert itself succeeded
		}
		return "", err
	case !found:
		return "", &destination.Error{Op: "crm upsert read", Status: http.StatusNotFound, Class: destination.Transient, Uncertain: true,
			Err: errors.New("the upsert succeeded but no Lead is under the reference")}
	}
	return id, nil
}

// Lookup reads the Id of the Lead under r's reference: a 404 is a definite
// "none" (the unique index is read, not a search), a 300 (several Leads)
// rejects the lead.
func (c *CRM) Lookup(ctx context.Context, r *destination.Record) (string, bool, error) {
	return c.lookup(ctx, "crm lookup", r)
}

func (c *CRM) lookup(ctx context.Context, op string, r *destination.Record) (string, bool, error) {
	req := &destination.Request{Op: op, Step: "crm_lookup", Method: http.MethodGet, URL: c.recordURL(r.ExternalRef) + "?fields=Id"}
	resp, err := c.call(ctx, req)
	if err != nil {
		return "", false, err
	}
	switch {
	case resp.Status == http.StatusNotFound:
		return "", false, nil
	case resp.Status != http.StatusOK:
		return "", false, c.answerError(op, resp)
	}
	var rec struct {
		ID string `json:"Id"`
	}
	if err := resp.Decode(op, &rec); err != nil {
		return "", false, err
	}
	if rec.ID == "" {
		return "", false, &destination.Error{Op: op, Status: resp.Status, Class: destination.Transient, Err: errors.New("answer has no Id")}
	}
	return rec.ID, true, nil
}

// Update is not a capability of the kind: an amendment upserts under its
// chain's reference.
func (c *CRM) Update(context.Context, string, *destination.Record) (string, error) {
	return "", destination.Errorf("crm update", destination.Rejected, "the salesforce kind has no update by id")
}

// Prepare is not a capability of the kind.
func (c *CRM) Prepare(context.Context, *destination.Record) (string, error) { return "", nil }

// Field lengths of the standard Lead fields that a lead's name and company
// may exceed: a name cut short still names the person, where a refused
// Lead would name no one.
const (
	maxFirstName = 40
	maxLastName  = 80
	maxCompany   = 255
)

// body is the Lead's body for r: the standard fields (an empty one is
// written null, so that an amendment that drops a phone clears it), then
// the map's fields (which may replace a standard one), then OwnerId when
// the lead has an owner with a CRM id. Neither Id nor ref_field is ever in
// it: the reference is in the path.
func (c *CRM) body(r *destination.Record) map[string]any {
	l := r.Lead
	f := fields{}
	f.set("LastName", orNotProvided(cut(r.LastName(), maxLastName)))
	f.set("FirstName", orNull(cut(r.FirstName(), maxFirstName)))
	f.set("Company", orNotProvided(cut(strings.TrimSpace(l.Company), maxCompany)))
	f.set("Email", orNull(l.Email))
	f.set("Phone", orNull(l.Phone))
	f.set("Website", orNull(l.Website))
	f.set("Description", orNull(l.Message))
	f.set("LeadSource", orNull(l.Source))
	for name, v := range c.mapping.Values(r) {
		f.set(name, v)
	}
	if r.Owner != nil && r.Owner.CRMOwner != "" {
		f.set("OwnerId", r.Owner.CRMOwner)
	}
	return f
}

// hasOwner reports whether the body sets the Lead's owner.
func hasOwner(body map[string]any) bool {
	for k, v := range body {
		if strings.EqualFold(k, "OwnerId") && v != nil && v != "" {
			return true
		}
	}
	return false
}

// fields is a Lead's body. Salesforce's field names ignore case: a field
// set again under another case replaces the first.
type fields map[string]any

func (f fields) set(name string, v any) {
	for k := range f {
		if k != name && strings.EqualFold(k, name) {
			delete(f, k)
		}
	}
	f[name] = v
}

func orNotProvided(s string) string {
	if s == "" {
		return NotProvided
	}
	return s
}

func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// cut shortens s to at most n characters.
func cut(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

// Check makes sure the destination works: a token, then a describe of Lead
// that confirms ref_field is a Text field of at least RefLength characters
// marked External ID and Unique, and that the run-as user may create and
// edit Leads and write the field. It changes nothing.
func (c *CRM) Check(ctx context.Context) error {
	req := &destination.Request{Op: "describe Lead", Method: http.MethodGet,
		URL: c.base + "/services/data/" + APIVersion + "/sobjects/Lead/describe"}
	resp, err := c.call(ctx, req)
	if err != nil {
		return err
	}
	if resp.Status != http.StatusOK {
		return c.answerError(req.Op, resp)
	}
	var d struct {
		Createable bool `json:"createable"`
		Updateable bool `json:"updateable"`
		Fields     []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Length     int    `json:"length"`
			ExternalID bool   `json:"externalId"`
			Unique     bool   `json:"unique"`
			Createable bool   `json:"createable"`
			Updateable bool   `json:"updateable"`
		} `json:"fields"`
	}
	if err := resp.Decode(req.Op, &d); err != nil {
		return fmt.Errorf("describe Lead: unreadable answer (larger than %d bytes?)", destination.MaxAnswer)
	}
	if !d.Createable || !d.Updateable {
		return errors.New("the run-as user may not create and edit Leads")
	}
	for _, f := range d.Fields {
		if !strings.EqualFold(f.Name, c.refField) {
			continue
		}
		switch {
		case !f.ExternalID:
			return fmt.Errorf("ref_field %s is not marked External ID", c.refField)
		case !f.Unique:
			return fmt.Errorf("ref_field %s is not marked Unique", c.refField)
		case f.Type != "string":
			return fmt.Errorf("ref_field %s is of type %s, not Text", c.refField, f.Type)
		case f.Length < RefLength:
			return fmt.Errorf("ref_field %s holds %d characters; a reference takes up to %d", c.refField, f.Length, RefLength)
		case !f.Createable || !f.Updateable:
			return fmt.Errorf("ref_field %s is read-only for the run-as user (field-level security)", c.refField)
		}
		return nil
	}
	return fmt.Errorf("ref_field %s is not a field of Lead (missing, or hidden from the run-as user)", c.refField)
}
