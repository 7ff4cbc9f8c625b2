package downstream

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"strings"
	"time"

	"github.com/leadintake/leadintake/destination"
)

// Simulator stands in for the enrichment service and every destination when
// SIMULATE_DOWNSTREAM is set: it makes no call and answers
// deterministically (the same lead, the same answer). Its enrichment counts
// as data; its CRM upserts, and every channel accepts.
type Simulator struct{}

var (
	simIndustries = []string{"software", "manufacturing", "retail", "finance", "healthcare", "education"}
	simSeniority  = []string{"staff", "manager", "director", "executive"}
	simCountries  = []string{"GB", "DE", "FR", "US", "NL", "ES"}
)

// Enrich derives a stand-in enrichment from the email's domain.
func (Simulator) Enrich(_ context.Context, req *EnrichmentRequest) (*destination.Enrichment, error) {
	_, domain, _ := strings.Cut(strings.ToLower(req.Email), "@")
	sum := sha256.Sum256([]byte(domain))
	n := binary.BigEndian.Uint64(sum[:8])
	size := int(10 + n%4990)
	industry := simIndustries[n%uint64(len(simIndustries))]
	seniority := simSeniority[(n>>8)%uint64(len(simSeniority))]
	country := simCountries[(n>>16)%uint64(len(simCountries))]
	return &destination.Enrichment{CompanySize: &size, Industry: &industry, Seniority: &seniority, Country: &country}, nil
}

// Capabilities: an upsert, which finds every reference.
func (Simulator) Capabilities() destination.CRMCapabilities {
	return destination.CRMCapabilities{Upsert: true, ConsistentLookup: true}
}

// Write returns a stand-in CRM id derived from the external reference.
func (Simulator) Write(_ context.Context, r *destination.Record) (string, error) {
	return simID(r.ExternalRef), nil
}

// Lookup finds every reference, under its stand-in id.
func (Simulator) Lookup(_ context.Context, r *destination.Record) (string, bool, error) {
	return simID(r.ExternalRef), true, nil
}

// Update returns the record's id.
func (Simulator) Update(_ context.Context, id string, _ *destination.Record) (string, error) {
	return id, nil
}

// Prepare prepares nothing.
func (Simulator) Prepare(context.Context, *destination.Record) (string, error) { return "", nil }

// Send sends nothing and succeeds.
func (Simulator) Send(context.Context, *destination.Record, destination.Receipt) (destination.Receipt, error) {
	return "", nil
}

// Find finds every message.
func (Simulator) Find(context.Context, *destination.Record, time.Time) (destination.Receipt, bool, error) {
	return "", true, nil
}

// ChannelCapabilities is the Simulator as a channel: every attempt is the
// same (nothing) sent.
func (Simulator) ChannelCapabilities() destination.ChannelCapabilities {
	return destination.ChannelCapabilities{Dedupes: true}
}

// Destination returns the Simulator as a destination's CRM and channel.
func (s Simulator) Destination(*destination.Config) (destination.CRM, destination.Channel) {
	return s, simChannel{s}
}

// simChannel is the Simulator as a channel (its Capabilities are the
// CRM's).
type simChannel struct{ Simulator }

func (c simChannel) Capabilities() destination.ChannelCapabilities { return c.ChannelCapabilities() }

func simID(externalRef string) string {
	ref := strings.TrimPrefix(externalRef, "li_")
	if len(ref) > 16 {
		ref = ref[:16]
	}
	return "sim_" + ref
}
