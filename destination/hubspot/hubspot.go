package hubspot

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/leadintake/leadintake/destination"
)

// Kind is the kind's name in the clients file.
const Kind = "hubspot"

// APIVersion is the HubSpot date version of the CRM API the kind is built
// for: 2026-09, the version HubSpot's migration guide points integrations
// to. It enforces each portal's own validation rules on every CRM write,
// whose refusals reject the lead with the rule's code.
const APIVersion = "2026-09"

// Origin is HubSpot's API origin; a destination's base_url replaces it.
const Origin = "https://api.hubapi.com"

// The operations, as errors name them.
const (
	opUpsert = "crm upsert"
	opLookup = "crm lookup"
	opUpdate = "crm update"
	opCheck  = "check"
)

// Spec is the kind.
var Spec = destination.Spec{
	Kind:     Kind,
	Families: []destination.Family{destination.FamilyCRM},
	Members:  []destination.Member{{Name: "token", Required: true, Secret: true}},
	Validate: validate,
	NewCRM:   func(c *destination.Config) (destination.CRM, error) { return New(c), nil },
}

// propertyName is a HubSpot property's internal name.
var propertyName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,99}$`)

func validate(c *destination.Config) error {
	token := c.Value("token")
	if token == "" {
		return errors.New("token is required")
	}
	if strings.IndexFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return errors.New("token must be one line without spaces (the service key or static token as HubSpot shows it)")
	}
	if c.BaseURL != "" {
		if err := destination.CheckHTTPURL("base_url", c.BaseURL, true); err != nil {
			return err
		}
	}
	for _, e := range c.Map {
		switch {
		case e.Field == "email":
			return errors.New("map: email is the contact's key, written from the lead's email")
		case !propertyName.MatchString(e.Field):
			return fmt.Errorf("map: %s is not a HubSpot property's internal name (a-z 0-9 _, starting with a letter)", e.Field)
		}
	}
	return nil
}

// CRM is a HubSpot destination. It implements destination.CRM and
// destination.Checker.
type CRM struct {
	http    *http.Client
	objects string // {base}/crm/objects/{APIVersion}/contacts
	token   string
	mapping destination.Mapping
	now     func() time.Time
}

// New returns the HubSpot destination c configures (c passed Validate).
func New(c *destination.Config) *CRM {
	base := c.Base(Origin)
	return &CRM{
		http:    destination.NewHTTPClient(Kind, c.Timeout),
		objects: base + "/crm/objects/" + APIVersion + "/contacts",
		token:   c.Value("token"),
		mapping: c.Map,
		now:     time.Now,
	}
}

// Capabilities: the write is keyed by email (a repeat updates the contact
// it made); the look-up reads by email, which no index lags behind; a
// contact known by its id is written over (an amendment's chain).
func (c *CRM) Capabilities() destination.CRMCapabilities {
	return destination.CRMCapabilities{Upsert: true, ConsistentLookup: true, UpdateByID: true}
}

// upsertInput is one input of batch/upsert.
type upsertInput struct {
	IDProperty         string            `json:"idProperty"`
	ID                 string            `json:"id"`
	ObjectWriteTraceID string            `json:"objectWriteTraceId"`
	Properties         map[string]string `json:"properties"`
}

// batchAnswer is batch/upsert's answer (200, or 207 with errors).
type batchAnswer struct {
	Status  string `json:"status"`
	Results []struct {
		ID                 string `json:"id"`
		ObjectWriteTraceID string `json:"objectWriteTraceId"`
	} `json:"results"`
	Errors []apiError `json:"errors"`
}

// Write upserts the lead's contact by its email and returns the contact's
// id.
func (c *CRM) Write(ctx context.Context, r *destination.Record) (string, error) {
	const op = opUpsert
	email := key(r.Lead.Email)
	if email == "" {
		return "", destination.Errorf(op, destination.Rejected, "the lead has no email, the contact's key")
	}
	req := &destination.Request{Op: op, Step: "crm", Method: http.MethodPost, URL: c.objects + "/batch/upsert", Header: c.header()}
	body := struct {
		Inputs []upsertInput `json:"inputs"`
	}{[]upsertInput{{IDProperty: "email", ID: email, ObjectWriteTraceID: r.ExternalRef, Properties: c.Properties(r)}}}
	if err := req.JSON(body); err != nil {
		return "", err
	}
	resp, err := destination.Do(ctx, c.http, req)
	if err != nil {
		return "", err
	}
	if !resp.OK(http.StatusOK, http.StatusCreated, http.StatusMultiStatus) {
		return "", classify(op, resp, c.now())
	}
	var a batchAnswer
	if err := resp.Decode(op, &a); err != nil {
		return "", err
	}
	// One input, one result; the trace id says which, should HubSpot ever
	// answer for more.
	for _, res := range a.Results {
		if res.ObjectWriteTraceID == r.ExternalRef && res.ID != "" {
			return res.ID, nil
		}
	}
	if len(a.Results) > 0 && a.Results[0].ID != "" {
		return a.Results[0].ID, nil
	}
	if len(a.Errors) > 0 {
		return "", classifyBatchError(op, resp, a.Errors[0], c.now())
	}
	// A success without a contact may still have made one.
	return "", &destination.Error{Op: op, Status: resp.Status, Class: destination.Transient, Uncertain: true,
		Err: errors.New("answer has no contact")}
}

// Lookup reads the contact by the lead's email: a 404 is a definite "none".
func (c *CRM) Lookup(ctx context.Context, r *destination.Record) (string, bool, error) {
	const op = opLookup
	email := key(r.Lead.Email)
	if email == "" {
		return "", false, nil
	}
	req := &destination.Request{Op: op, Step: "crm_lookup", Method: http.MethodGet,
		URL: c.objects + "/" + url.PathEscape(email) + "?idProperty=email", Header: c.header()}
	resp, err := destination.Do(ctx, c.http, req)
	if err != nil {
		return "", false, err
	}
	switch {
	case resp.Status == http.StatusNotFound:
		return "", false, nil
	case !resp.OK(http.StatusOK):
		return "", false, classify(op, resp, c.now())
	}
	id, err := objectID(op, resp)
	return id, err == nil, err
}

// Update writes the lead's properties over the contact id (an amendment's
// chain's contact, whose email the amendment may change) and returns the
// contact's id as HubSpot answers it.
func (c *CRM) Update(ctx context.Context, id string, r *destination.Record) (string, error) {
	const op = opUpdate
	if !isContactID(id) {
		return "", destination.Errorf(op, destination.Rejected, "not a HubSpot contact id")
	}
	req := &destination.Request{Op: op, Step: "crm", Method: http.MethodPatch, URL: c.objects + "/" + id, Header: c.header()}
	if err := req.JSON(map[string]any{"properties": c.Properties(r)}); err != nil {
		return "", err
	}
	resp, err := destination.Do(ctx, c.http, req)
	if err != nil {
		return "", err
	}
	if !resp.OK(http.StatusOK) {
		return "", classify(op, resp, c.now())
	}
	return objectID(op, resp)
}

// Prepare is not a capability of the kind.
func (c *CRM) Prepare(context.Context, *destination.Record) (string, error) { return "", nil }

// Check reads one contact: the token, the API version and base_url in one
// call that changes nothing.
func (c *CRM) Check(ctx context.Context) error {
	const op = opCheck
	// No step: a check is nobody's delivery.
	req := &destination.Request{Op: op, Method: http.MethodGet, URL: c.objects + "?limit=1", Header: c.header()}
	resp, err := destination.Do(ctx, c.http, req)
	if err != nil {
		return err
	}
	if !resp.OK(http.StatusOK) {
		return classify(op, resp, c.now())
	}
	return nil
}

// Properties are the contact's properties for r: the standard ones that
// have a value, the owner's hubspot_owner_id, then the map's fields (which
// may replace a standard one, not the email).
func (c *CRM) Properties(r *destination.Record) map[string]string {
	l := r.Lead
	p := map[string]string{"email": key(l.Email)}
	for name, v := range map[string]string{
		"firstname": r.FirstName(), "lastname": r.LastName(), "company": l.Company,
		"phone": l.Phone, "website": l.Website, "message": l.Message,
	} {
		// An empty value would clear what the contact has from an
		// earlier enquiry of the same person.
		if v != "" {
			p[name] = v
		}
	}
	if r.Owner != nil && r.Owner.CRMOwner != "" {
		p["hubspot_owner_id"] = r.Owner.CRMOwner
	}
	for field, v := range c.mapping.Values(r) {
		if field == "email" {
			continue // refused by Validate; the key stays the lead's
		}
		switch v := v.(type) {
		case string:
			p[field] = v
		case int:
			p[field] = strconv.Itoa(v)
		default:
			p[field] = fmt.Sprint(v)
		}
	}
	return p
}

func (c *CRM) header() http.Header {
	return http.Header{"Authorization": {"Bearer " + c.token}}
}

// key is the contact's key: the email, trimmed and lower-cased (HubSpot
// keeps emails lower-cased).
func key(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// isContactID reports whether id is a contact's id: digits.
func isContactID(id string) bool {
	if id == "" || len(id) > 32 {
		return false
	}
	for _, r := range id {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// objectID reads a contact's {"id": str}. A success without one may still
// have been applied: transient and uncertain.
func objectID(op string, resp *destination.Response) (string, error) {
	var a struct {
		ID string `json:"id"`
	}
	if resp.Decode(op, &a) != nil || a.ID == "" {
		return "", &destination.Error{Op: op, Status: resp.Status, Class: destination.Transient, Uncertain: true,
			Err: errors.New("answer has no contact id")}
	}
	return a.ID, nil
}
