package downstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leadintake/leadintake/internal/tracing"
	"github.com/leadintake/leadintake/lead"
)

// Targets, as used in errors and metrics.
const (
	TargetEnrichment = "enrichment"
	TargetCRMUpsert  = "crm_upsert"
	TargetCRMCreate  = "crm_create"
	TargetCRMLookup  = "crm_lookup"
	TargetNotify     = "notify"
)

// maxResponseBytes bounds what is read of an answer.
const maxResponseBytes = 1 << 20

// CallInfo is what a call learnt beyond its result: the HTTP status of its
// answer (0 when none came). A caller that wants it puts one in the call's
// context (WithCallInfo); the Client, and the Simulator, fill it in.
type CallInfo struct {
	Status int
}

type callInfoKey struct{}

// WithCallInfo returns ctx carrying a CallInfo, and the CallInfo.
func WithCallInfo(ctx context.Context) (context.Context, *CallInfo) {
	info := &CallInfo{}
	return context.WithValue(ctx, callInfoKey{}, info), info
}

// noteStatus records status in the CallInfo of ctx, if it carries one.
func noteStatus(ctx context.Context, status int) {
	if info, ok := ctx.Value(callInfoKey{}).(*CallInfo); ok {
		info.Status = status
	}
}

// EnrichmentRequest is what the enrichment service is asked about. Every
// member the contract names is sent, empty when the lead has no value.
type EnrichmentRequest struct {
	LeadID  string `json:"lead_id"`
	Email   string `json:"email"`
	Company string `json:"company"`
	Website string `json:"website"`
}

// Enrichment is what the enrichment service knows of a lead. Unknown members
// of its answer are ignored.
type Enrichment struct {
	CompanySize *int    `json:"company_size,omitempty"`
	Industry    *string `json:"industry,omitempty"`
	Seniority   *string `json:"seniority,omitempty"`
	Country     *string `json:"country,omitempty"`
}

// CRMLead is the record sent to the CRM: the lead (its members inline), its
// score and tier, its enrichment and its external reference.
type CRMLead struct {
	ExternalRef string `json:"external_ref"`
	LeadID      string `json:"lead_id"`
	lead.Lead
	Score      int         `json:"score"`
	Tier       string      `json:"tier"`
	Enrichment *Enrichment `json:"enrichment"`
	// DuplicateOf is the id of an earlier lead this one may duplicate (the
	// same email and content, under another key); absent for none.
	DuplicateOf string `json:"duplicate_of,omitempty"`
	// Amendment is the lead's number along a chain of amendments (0 for
	// none): its write carries the Idempotency-Key external_ref:amend:N
	// instead of external_ref.
	Amendment int `json:"-"`
}

// idempotencyKey is the Idempotency-Key of the lead's CRM write.
func (l *CRMLead) idempotencyKey() string {
	if l.Amendment > 0 {
		return l.ExternalRef + ":amend:" + strconv.Itoa(l.Amendment)
	}
	return l.ExternalRef
}

// Notification is the sales notification of an accepted lead. Every member
// the contract names is sent, empty when the lead has no value.
type Notification struct {
	LeadID      string `json:"lead_id"`
	ExternalRef string `json:"external_ref"`
	Score       int    `json:"score"`
	Tier        string `json:"tier"`
	Email       string `json:"email"`
	Name        string `json:"name"`
	Company     string `json:"company"`
	// Amends is the id of the lead an amendment amends; absent otherwise.
	Amends string `json:"amends,omitempty"`
	// DuplicateOf is the id of an earlier lead this one may duplicate;
	// absent for none.
	DuplicateOf string `json:"duplicate_of,omitempty"`
	// Amendment is the lead's number along a chain of amendments (0 for
	// none): its Idempotency-Key is external_ref:notify:N instead of
	// external_ref:notify.
	Amendment int `json:"-"`
}

// idempotencyKey is the Idempotency-Key of the notification.
func (n *Notification) idempotencyKey() string {
	if n.Amendment > 0 {
		return n.ExternalRef + ":notify:" + strconv.Itoa(n.Amendment)
	}
	return n.ExternalRef + ":notify"
}

// Config says where the downstream services are.
type Config struct {
	EnrichmentURL, CRMURL, NotifyURL       string
	EnrichmentToken, CRMToken, NotifyToken string
	// Timeout bounds each call. Default 10 s.
	Timeout time.Duration
	// Metrics may be nil.
	Metrics *Metrics
}

// Client calls the real downstream services over HTTP. It is safe for
// concurrent use.
type Client struct {
	enrichment, crm, notify endpoint
	crmBase                 string
	metrics                 *Metrics
}

type endpoint struct {
	http  *http.Client
	url   string
	token string
}

// Validate checks that every URL is an absolute http(s) URL.
func (cfg *Config) Validate() error {
	for _, v := range []struct{ name, url string }{
		{"ENRICHMENT_URL", cfg.EnrichmentURL}, {"CRM_URL", cfg.CRMURL}, {"NOTIFY_URL", cfg.NotifyURL},
	} {
		parsed, err := url.Parse(v.url)
		if err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
			return fmt.Errorf("%s: want an absolute http(s) URL", v.name)
		}
	}
	return nil
}

// NewClient returns a Client with one http.Client per service, each with its
// own kept-alive connections and cfg.Timeout per call.
func NewClient(cfg Config) (*Client, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	newHTTP := func(name string) *http.Client {
		dialer := &net.Dialer{Timeout: min(cfg.Timeout, 5*time.Second), KeepAlive: 30 * time.Second}
		return &http.Client{
			Timeout: cfg.Timeout,
			// Every call is a span of the lead's trace, and carries its
			// traceparent.
			Transport: tracing.Transport(&http.Transport{
				Proxy:                 http.ProxyFromEnvironment,
				DialContext:           dialer.DialContext,
				MaxIdleConns:          200,
				MaxIdleConnsPerHost:   100,
				IdleConnTimeout:       90 * time.Second,
				TLSHandshakeTimeout:   min(cfg.Timeout, 5*time.Second),
				ExpectContinueTimeout: time.Second,
			}, name),
			// A redirect is an answer of its own, classified like any other.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &Client{
		enrichment: endpoint{http: newHTTP("enrichment"), url: cfg.EnrichmentURL, token: cfg.EnrichmentToken},
		crm:        endpoint{http: newHTTP("crm"), url: cfg.CRMURL, token: cfg.CRMToken},
		notify:     endpoint{http: newHTTP("notification"), url: cfg.NotifyURL, token: cfg.NotifyToken},
		crmBase:    strings.TrimRight(cfg.CRMURL, "/"),
		metrics:    cfg.Metrics,
	}, nil
}

// Enrich asks the enrichment service about a lead. It returns (nil, nil)
// when the service has no data (404).
func (c *Client) Enrich(ctx context.Context, req *EnrichmentRequest) (*Enrichment, error) {
	var out Enrichment
	found, err := c.do(ctx, c.enrichment, TargetEnrichment, http.MethodPost, c.enrichment.url, req, "", true, &out, http.StatusOK)
	if err != nil || !found {
		return nil, err
	}
	return &out, nil
}

// UpsertLead puts the lead to the CRM under its external reference
// (PUT CRM_URL/leads/{external_ref}, Idempotency-Key: external_ref, or
// external_ref:amend:N for an amendment), safe to repeat, and returns the
// CRM's id.
func (c *Client) UpsertLead(ctx context.Context, lead *CRMLead) (string, error) {
	u := c.crmBase + "/leads/" + url.PathEscape(lead.ExternalRef)
	var out crmAnswer
	if _, err := c.do(ctx, c.crm, TargetCRMUpsert, http.MethodPut, u, lead, lead.idempotencyKey(), false, &out, http.StatusOK, http.StatusCreated); err != nil {
		return "", err
	}
	return out.id(TargetCRMUpsert)
}

// CreateLead posts the lead to the CRM (POST CRM_URL/leads). The request is
// never re-sent by the HTTP client itself, even on a dropped kept-alive
// connection: whether to post again is the caller's decision, after a
// look-up.
func (c *Client) CreateLead(ctx context.Context, lead *CRMLead) (string, error) {
	var out crmAnswer
	if _, err := c.do(ctx, c.crm, TargetCRMCreate, http.MethodPost, c.crmBase+"/leads", lead, lead.idempotencyKey(), false, &out, http.StatusCreated, http.StatusOK); err != nil {
		return "", err
	}
	return out.id(TargetCRMCreate)
}

// LookupLead looks the CRM up by external reference. found is false on a
// definite 404.
func (c *Client) LookupLead(ctx context.Context, externalRef string) (id string, found bool, err error) {
	u := c.crmBase + "/leads?external_ref=" + url.QueryEscape(externalRef)
	var out crmAnswer
	found, err = c.do(ctx, c.crm, TargetCRMLookup, http.MethodGet, u, nil, "", true, &out, http.StatusOK)
	if err != nil || !found {
		return "", false, err
	}
	id, err = out.id(TargetCRMLookup)
	return id, err == nil, err
}

// Notify sends the sales notification, with Idempotency-Key
// external_ref + ":notify" (":notify:N" for the N-th amendment) so that a
// repeat is recognised as one.
func (c *Client) Notify(ctx context.Context, n *Notification) error {
	_, err := c.do(ctx, c.notify, TargetNotify, http.MethodPost, c.notify.url, n, n.idempotencyKey(), false, nil)
	return err
}

type crmAnswer struct {
	ID json.RawMessage `json:"id"`
}

func (a *crmAnswer) id(target string) (string, error) {
	var s string
	if err := json.Unmarshal(a.ID, &s); err != nil || s == "" {
		// A success without a usable id: the record may exist.
		return "", &Error{Target: target, Transient: true, Uncertain: true, Err: errors.New("answer has no string id")}
	}
	return s, nil
}

// do makes one call. ok lists the success statuses (any 2xx when empty). A
// 404 is reported as found == false when notFoundOK, and as a permanent
// error otherwise. A create (TargetCRMCreate) is never re-sent by net/http
// itself on a dropped kept-alive connection.
func (c *Client) do(ctx context.Context, ep endpoint, target, method, u string, body any, idemKey string, notFoundOK bool, out any, ok ...int) (found bool, err error) {
	start := time.Now()
	result := "success"
	defer func() {
		if err != nil {
			result = "permanent"
			if e, isDs := AsError(err); isDs && e.Transient {
				result = "transient"
			}
		} else if !found {
			result = "not_found"
		}
		c.metrics.observe(target, result, time.Since(start))
	}()

	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return false, &Error{Target: target, Err: err}
		}
		reader = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, reader)
	if err != nil {
		return false, &Error{Target: target, Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if ep.token != "" {
		req.Header.Set("Authorization", "Bearer "+ep.token)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	if method == http.MethodPost && target == TargetCRMCreate {
		// net/http re-sends a request carrying an Idempotency-Key on a
		// dropped kept-alive connection when it can rewind the body; without
		// GetBody it cannot.
		req.GetBody = nil
	}

	resp, err := ep.http.Do(req)
	if err != nil {
		return false, transportError(target, err)
	}
	noteStatus(ctx, resp.StatusCode)
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
		resp.Body.Close()
	}()

	if resp.StatusCode == http.StatusNotFound && notFoundOK {
		return false, nil
	}
	if !statusOK(resp.StatusCode, ok) {
		return false, statusError(target, resp, time.Now())
	}
	if out != nil {
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponseBytes)).Decode(out); err != nil {
			return false, &Error{Target: target, StatusCode: resp.StatusCode, Transient: true, Uncertain: true,
				Err: fmt.Errorf("unreadable answer: %w", err)}
		}
	}
	return true, nil
}

func statusOK(code int, ok []int) bool {
	if len(ok) == 0 {
		return code >= 200 && code < 300
	}
	for _, c := range ok {
		if code == c {
			return true
		}
	}
	return false
}
