// Package generic is the destination kind http: leadintake's own protocol,
// for a CRM or a notification service written to speak it (or a bridge to
// one). It is what CRM_URL and NOTIFY_URL configure, as the destinations
// named crm and notification.
//
// A CRM of kind http takes members url (its base), token (sent as
// Authorization: Bearer) and mode: upsert (PUT {url}/leads/{external_ref},
// safe to repeat) or create (POST {url}/leads, with GET
// {url}/leads?external_ref= looked up before any re-create). Its answer is
// {"id": str}. A notification service of kind http takes url (the full
// URL) and token: POST {url}, any 2xx. Each write carries an
// Idempotency-Key derived from the reference (see destination.Record), so
// a receiver can tell a repeat. The protocol is written out in
// docs/destinations.md.
package generic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/lead"
)

// Kind is the kind's name in the clients file.
const Kind = "http"

// Modes of a CRM of kind http.
const (
	ModeUpsert = "upsert"
	ModeCreate = "create"
)

// Spec is the kind.
var Spec = destination.Spec{
	Kind:     Kind,
	Families: []destination.Family{destination.FamilyCRM, destination.FamilyChannel},
	Members: []destination.Member{
		{Name: "url", Required: true},
		{Name: "token", Secret: true},
		{Name: "mode"},
	},
	Validate: func(c *destination.Config) error {
		if err := destination.CheckHTTPURL("url", c.Value("url"), false); err != nil {
			return err
		}
		switch c.Value("mode") {
		case "", ModeUpsert, ModeCreate:
		default:
			return errors.New("mode must be upsert or create")
		}
		if len(c.Map) > 0 {
			return errors.New("map: the http kind sends the whole lead; map is for the vendor kinds")
		}
		if c.BaseURL != "" {
			return errors.New("base_url: the http kind's url is its base already")
		}
		return nil
	},
	NewCRM:     func(c *destination.Config) (destination.CRM, error) { return NewCRM(c), nil },
	NewChannel: func(c *destination.Config) (destination.Channel, error) { return NewChannel(c), nil },
}

// CRM is a CRM of kind http.
type CRM struct {
	http   *http.Client
	base   string
	token  string
	upsert bool
}

// NewCRM returns the CRM c configures.
func NewCRM(c *destination.Config) *CRM {
	return &CRM{
		// Its calls' spans are "PUT crm", "GET crm", as before kinds.
		http:   destination.NewHTTPClient("crm", c.Timeout),
		base:   c.Base(c.Value("url")),
		token:  c.Value("token"),
		upsert: c.Value("mode") != ModeCreate,
	}
}

// Capabilities: an upsert in upsert mode; a create with a consistent
// look-up in create mode.
func (c *CRM) Capabilities() destination.CRMCapabilities {
	return destination.CRMCapabilities{Upsert: c.upsert, ConsistentLookup: true}
}

// Record is the body of a CRM write: the lead (its members inline), its
// score and tier, its enrichment and its external reference, the earlier
// lead it may duplicate and its owner.
type Record struct {
	ExternalRef string `json:"external_ref"`
	LeadID      string `json:"lead_id"`
	lead.Lead
	Score       int                     `json:"score"`
	Tier        string                  `json:"tier"`
	Enrichment  *destination.Enrichment `json:"enrichment"`
	DuplicateOf string                  `json:"duplicate_of,omitempty"`
	Owner       string                  `json:"owner,omitempty"`
}

// RecordOf is r as the protocol sends it.
func RecordOf(r *destination.Record) *Record {
	out := &Record{
		ExternalRef: r.ExternalRef, LeadID: r.LeadID, Lead: *r.Lead, Score: r.Score, Tier: r.Tier,
		Enrichment: r.Enrichment, DuplicateOf: r.DuplicateOf,
	}
	if r.Owner != nil {
		out.Owner = r.Owner.Name
	}
	return out
}

// Write puts the lead under its reference (upsert) or posts it (create).
func (c *CRM) Write(ctx context.Context, r *destination.Record) (string, error) {
	req := &destination.Request{Op: "crm upsert", Step: "crm", Method: http.MethodPut,
		URL: c.base + "/leads/" + url.PathEscape(r.ExternalRef), Header: c.header(r.IdempotencyKey())}
	ok := []int{http.StatusOK, http.StatusCreated}
	if !c.upsert {
		req.Op, req.Method, req.URL, req.NoResend = "crm create", http.MethodPost, c.base+"/leads", true
	}
	if err := req.JSON(RecordOf(r)); err != nil {
		return "", err
	}
	resp, err := destination.Do(ctx, c.http, req)
	if err != nil {
		return "", err
	}
	if !resp.OK(ok...) {
		return "", destination.StatusError(req.Op, resp.Status, resp.Header, time.Now())
	}
	return answerID(req.Op, resp)
}

// Lookup asks for the record under r's reference; a 404 is a definite "none".
func (c *CRM) Lookup(ctx context.Context, r *destination.Record) (string, bool, error) {
	req := &destination.Request{Op: "crm lookup", Step: "crm_lookup", Method: http.MethodGet,
		URL: c.base + "/leads?external_ref=" + url.QueryEscape(r.ExternalRef), Header: c.header("")}
	resp, err := destination.Do(ctx, c.http, req)
	if err != nil {
		return "", false, err
	}
	switch {
	case resp.Status == http.StatusNotFound:
		return "", false, nil
	case !resp.OK(http.StatusOK):
		return "", false, destination.StatusError(req.Op, resp.Status, resp.Header, time.Now())
	}
	id, err := answerID(req.Op, resp)
	return id, err == nil, err
}

// Update is not a capability of the kind.
func (c *CRM) Update(context.Context, string, *destination.Record) (string, error) {
	return "", destination.Errorf("crm update", destination.Rejected, "the http kind has no update by id")
}

// Prepare is not a capability of the kind.
func (c *CRM) Prepare(context.Context, *destination.Record) (string, error) { return "", nil }

func (c *CRM) header(idempotencyKey string) http.Header {
	h := http.Header{}
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	if idempotencyKey != "" {
		h.Set("Idempotency-Key", idempotencyKey)
	}
	return h
}

// answerID reads the CRM's {"id": str}. A success without a usable id may
// still have made the record: transient and uncertain.
func answerID(op string, resp *destination.Response) (string, error) {
	var a struct {
		ID json.RawMessage `json:"id"`
	}
	var id string
	if resp.Decode(op, &a) != nil || json.Unmarshal(a.ID, &id) != nil || id == "" {
		return "", &destination.Error{Op: op, Status: resp.Status, Class: destination.Transient, Uncertain: true,
			Err: fmt.Errorf("answer has no string id")}
	}
	return id, nil
}

// Channel is a notification service of kind http.
type Channel struct {
	http  *http.Client
	url   string
	token string
}

// NewChannel returns the notification service c configures.
func NewChannel(c *destination.Config) *Channel {
	return &Channel{http: destination.NewHTTPClient("notify", c.Timeout), url: c.Value("url"), token: c.Value("token")}
}

// Capabilities: every attempt carries the same Idempotency-Key.
func (n *Channel) Capabilities() destination.ChannelCapabilities {
	return destination.ChannelCapabilities{Dedupes: true}
}

// Notification is the body of a notification.
type Notification struct {
	LeadID      string `json:"lead_id"`
	ExternalRef string `json:"external_ref"`
	Score       int    `json:"score"`
	Tier        string `json:"tier"`
	Email       string `json:"email"`
	Name        string `json:"name"`
	Company     string `json:"company"`
	Phone       string `json:"phone,omitempty"`
	Source      string `json:"source,omitempty"`
	Owner       string `json:"owner,omitempty"`
	// Amends is the id of the lead an amendment amends.
	Amends string `json:"amends,omitempty"`
	// DuplicateOf is the id of an earlier lead this one may duplicate.
	DuplicateOf string `json:"duplicate_of,omitempty"`
}

// NotificationOf is r as the protocol announces it.
func NotificationOf(r *destination.Record) *Notification {
	n := &Notification{
		LeadID: r.LeadID, ExternalRef: r.ExternalRef, Score: r.Score, Tier: r.Tier,
		Email: r.Lead.Email, Name: r.Lead.Name, Company: r.Lead.Company, Phone: r.Lead.Phone, Source: r.Lead.Source,
		Amends: r.Amends, DuplicateOf: r.DuplicateOf,
	}
	if r.Owner != nil {
		n.Owner = r.Owner.Name
	}
	return n
}

// Send posts the notification, with Idempotency-Key r.NotifyKey().
func (n *Channel) Send(ctx context.Context, r *destination.Record, _ destination.Receipt) (destination.Receipt, error) {
	h := http.Header{}
	if n.token != "" {
		h.Set("Authorization", "Bearer "+n.token)
	}
	h.Set("Idempotency-Key", r.NotifyKey())
	req := &destination.Request{Op: "notify", Step: "notification", Method: http.MethodPost, URL: n.url, Header: h}
	if err := req.JSON(NotificationOf(r)); err != nil {
		return "", err
	}
	resp, err := destination.Do(ctx, n.http, req)
	if err != nil {
		return "", err
	}
	if !resp.OK() {
		return "", destination.StatusError(req.Op, resp.Status, resp.Header, time.Now())
	}
	return "", nil
}

// Find is not a capability of the kind.
func (n *Channel) Find(context.Context, *destination.Record, time.Time) (destination.Receipt, bool, error) {
	return "", false, nil
}
