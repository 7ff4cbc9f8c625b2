package downstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/leadintake/leadintake/destination"
)

// TargetEnrichment names the enrichment calls in errors and metrics.
const TargetEnrichment = "enrichment"

// EnrichmentRequest is what the enrichment service is asked about. Every
// member the contract names is sent, empty when the lead has no value.
type EnrichmentRequest struct {
	LeadID  string `json:"lead_id"`
	Email   string `json:"email"`
	Company string `json:"company"`
	Website string `json:"website"`
}

// Config says where the enrichment service is.
type Config struct {
	EnrichmentURL   string
	EnrichmentToken string
	// Timeout bounds each call. Default 10 s.
	Timeout time.Duration
}

// Client calls the enrichment service over HTTP (ENRICHMENT_URL). It is safe
// for concurrent use. (The CRMs and notification channels are
// destinations: package destination.)
type Client struct {
	http  *http.Client
	url   string
	token string
}

// Validate checks that the URL is an absolute http(s) URL.
func (cfg *Config) Validate() error {
	parsed, err := url.Parse(cfg.EnrichmentURL)
	if err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
		return errors.New("ENRICHMENT_URL: want an absolute http(s) URL")
	}
	return nil
}

// NewClient returns a Client with its own kept-alive connections and
// cfg.Timeout per call.
func NewClient(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Client{http: destination.NewHTTPClient("enrichment", cfg.Timeout), url: cfg.EnrichmentURL, token: cfg.EnrichmentToken}, nil
}

// Enrich asks the enrichment service about a lead. It returns (nil, nil)
// when the service has no data (404). Its errors are *destination.Error,
// classified as every destination's (destination.StatusError).
func (c *Client) Enrich(ctx context.Context, req *EnrichmentRequest) (*destination.Enrichment, error) {
	h := http.Header{}
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	r := &destination.Request{Op: TargetEnrichment, Step: "enrichment", Method: http.MethodPost, URL: c.url, Header: h}
	if err := r.JSON(req); err != nil {
		return nil, err
	}
	resp, err := destination.Do(ctx, c.http, r)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.Status == http.StatusNotFound:
		return nil, nil
	case resp.Status != http.StatusOK:
		return nil, destination.StatusError(r.Op, resp.Status, resp.Header, time.Now())
	}
	var out destination.Enrichment
	if err := resp.Decode(r.Op, &out); err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	return &out, nil
}
