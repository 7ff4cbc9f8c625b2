package downstream

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"strings"
)

// Simulator stands in for the three services when SIMULATE_DOWNSTREAM is set:
// it makes no call and answers deterministically (the same lead, the same
// answer). Its enrichment counts as data.
type Simulator struct{}

var (
	simIndustries = []string{"software", "manufacturing", "retail", "finance", "healthcare", "education"}
	simSeniority  = []string{"staff", "manager", "director", "executive"}
	simCountries  = []string{"GB", "DE", "FR", "US", "NL", "ES"}
)

// Enrich derives a stand-in enrichment from the email's domain.
func (Simulator) Enrich(ctx context.Context, req *EnrichmentRequest) (*Enrichment, error) {
	noteStatus(ctx, 200)
	_, domain, _ := strings.Cut(strings.ToLower(req.Email), "@")
	sum := sha256.Sum256([]byte(domain))
	n := binary.BigEndian.Uint64(sum[:8])
	size := int(10 + n%4990)
	industry := simIndustries[n%uint64(len(simIndustries))]
	seniority := simSeniority[(n>>8)%uint64(len(simSeniority))]
	country := simCountries[(n>>16)%uint64(len(simCountries))]
	return &Enrichment{CompanySize: &size, Industry: &industry, Seniority: &seniority, Country: &country}, nil
}

// UpsertLead returns a stand-in CRM id derived from the external reference.
func (Simulator) UpsertLead(ctx context.Context, lead *CRMLead) (string, error) {
	noteStatus(ctx, 200)
	return simID(lead.ExternalRef), nil
}

// CreateLead returns the same stand-in id as UpsertLead.
func (Simulator) CreateLead(ctx context.Context, lead *CRMLead) (string, error) {
	noteStatus(ctx, 201)
	return simID(lead.ExternalRef), nil
}

// LookupLead finds every reference, under its stand-in id.
func (Simulator) LookupLead(ctx context.Context, externalRef string) (string, bool, error) {
	noteStatus(ctx, 200)
	return simID(externalRef), true, nil
}

// Notify sends nothing and succeeds.
func (Simulator) Notify(ctx context.Context, _ *Notification) error {
	noteStatus(ctx, 200)
	return nil
}

func simID(externalRef string) string {
	ref := strings.TrimPrefix(externalRef, "li_")
	if len(ref) > 16 {
		ref = ref[:16]
	}
	return "sim_" + ref
}
