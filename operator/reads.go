package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// Keys returns the keys f selects, oldest first (`api keys list`).
func (o *Operator) Keys(ctx context.Context, f store.KeyFilter) ([]store.KeySummary, error) {
	return o.Store.ListKeys(ctx, f)
}

// Leads returns a page of keys with their leads, newest first (the
// console's leads page): no personal data.
func (o *Operator) Leads(ctx context.Context, f store.LeadFilter) (*store.LeadPage, error) {
	return o.Store.ListLeads(ctx, f)
}

// Quarantined returns the quarantined keys f selects, oldest first, with
// their reasons: no personal data.
func (o *Operator) Quarantined(ctx context.Context, f store.QuarantineFilter) ([]store.QuarantinedKey, error) {
	return o.Store.Quarantined(ctx, f)
}

// ClientIDs returns the ids of the clients in force, sorted.
func (o *Operator) ClientIDs() []string {
	if o.Callers == nil {
		return nil
	}
	return o.Callers.Set().IDs()
}

// LeadReport is a key with its lead as the console shows it: KeyReport
// (its owner, destinations and delivery log) and the callbacks of its
// finishes. No personal data.
type LeadReport struct {
	KeyReport
	Callbacks []store.CallbackSummary `json:"callbacks"`
}

// Lead returns the client's key with its lead, its delivery log, owner and
// callbacks; store.ErrNotFound when there is no such key.
func (o *Operator) Lead(ctx context.Context, clientID, key string) (*LeadReport, error) {
	r, err := o.Show(ctx, clientID, key)
	if err != nil {
		return nil, err
	}
	callbacks, err := o.Store.LeadCallbacks(ctx, r.LeadID)
	if err != nil {
		return nil, err
	}
	return &LeadReport{KeyReport: *r, Callbacks: callbacks}, nil
}

// EnquiryReport is a lead's personal data: the enquiry as submitted (its
// attribution included) and the enrichment answer, for the operator who
// asked.
type EnquiryReport struct {
	ClientID string `json:"client_id"`
	Key      string `json:"key"`
	LeadID   string `json:"lead_id"`
	// Lead is the enquiry; nil once erased.
	Lead *lead.Lead `json:"enquiry"`
	// Enrichment is the enrichment service's answer, member by member;
	// nil without one.
	Enrichment map[string]any `json:"enrichment"`
	ErasedAt   *time.Time     `json:"erased_at"`
}

// Enquiry returns the enquiry of the client's key, and the audit records
// who looked (in the same transaction as the read). ErrForbidden for a
// viewer, store.ErrNotFound when there is no such key: nothing shown,
// nothing recorded.
func (o *Operator) Enquiry(ctx context.Context, who Actor, clientID, key string) (*EnquiryReport, error) {
	by, err := who.may()
	if err != nil {
		return nil, err
	}
	e, err := o.Store.Enquiry(ctx, clientID, key, by)
	if err != nil {
		return nil, err
	}
	r := &EnquiryReport{ClientID: e.ClientID, Key: e.Key, LeadID: e.LeadID.String(), ErasedAt: e.ErasedAt}
	if e.Submission != nil {
		r.Lead = &lead.Lead{}
		if err := json.Unmarshal(e.Submission, r.Lead); err != nil {
			return nil, fmt.Errorf("enquiry: %w", err)
		}
	}
	if len(e.Enrichment) > 0 {
		if err := json.Unmarshal(e.Enrichment, &r.Enrichment); err != nil {
			return nil, fmt.Errorf("enquiry: enrichment: %w", err)
		}
	}
	return r, nil
}

// QuarantinedEnquiry returns the client's quarantined key with its enquiry
// (`api spam show`), and the audit records who looked. ErrForbidden for a
// viewer, store.ErrNotFound when the key is not quarantined: nothing
// shown, nothing recorded.
func (o *Operator) QuarantinedEnquiry(ctx context.Context, who Actor, clientID, key string) (*store.QuarantinedEnquiry, error) {
	by, err := who.may()
	if err != nil {
		return nil, err
	}
	return o.Store.QuarantinedEnquiry(ctx, clientID, key, by)
}

// DestinationReport is one destination as every worker of the database
// sees it, with its kind and the clients that use it.
type DestinationReport struct {
	store.DownstreamState
	// Kind is the destination's kind (http for the environment's three);
	// empty for a name the clients file no longer has.
	Kind string
	// Clients are the clients in force that write or announce to it; nil
	// for enrichment, which every client uses.
	Clients []string
}

// State is up, down or unauthorized (down because it refused its
// credentials).
func (d *DestinationReport) State() string {
	switch {
	case d.Up:
		return "up"
	case d.Unauthorized:
		return "unauthorized"
	}
	return "down"
}

// Destinations returns every destination's state (store.DownstreamStates:
// names from the downstreams table), its kind from the clients file, and
// the clients that use it.
func (o *Operator) Destinations(ctx context.Context) ([]DestinationReport, error) {
	states, err := o.Store.DownstreamStates(ctx)
	if err != nil {
		return nil, err
	}
	kinds := map[string]string{
		store.DownstreamEnrichment: "http", store.DownstreamCRM: "http", store.DownstreamNotification: "http",
	}
	users := map[string][]string{}
	if o.Callers != nil {
		set := o.Callers.Set()
		for _, d := range set.Destinations() {
			kinds[d.Name] = d.Kind
		}
		for _, id := range set.IDs() {
			users[set.CRMOf(id)] = append(users[set.CRMOf(id)], id)
			for _, n := range set.NotifyOf(id) {
				users[n] = append(users[n], id)
			}
		}
	}
	out := make([]DestinationReport, len(states))
	for i, st := range states {
		out[i] = DestinationReport{DownstreamState: st, Kind: kinds[st.Name], Clients: users[st.Name]}
	}
	return out, nil
}

// Audit returns the recorded operator actions f selects, newest first.
func (o *Operator) Audit(ctx context.Context, f store.AuditFilter) ([]store.AuditEntry, error) {
	return o.Store.AuditLog(ctx, f)
}
