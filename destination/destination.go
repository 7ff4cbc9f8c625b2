package destination

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/leadintake/leadintake/lead"
)

// Family is what a destination is for: the record of a lead (a CRM) or the
// announcement of one (a notification channel).
type Family string

// The families.
const (
	FamilyCRM     Family = "crm"
	FamilyChannel Family = "channel"
)

// CRMCapabilities are what a CRM kind guarantees of its writes (see
// lead.CRMCapabilities: the lead's life asks them; it never asks which
// vendor it writes to).
type CRMCapabilities = lead.CRMCapabilities

// CRM is a CRM kind's driver. Every method is safe for concurrent use and
// returns an *Error on failure.
type CRM interface {
	// Capabilities are the kind's guarantees.
	Capabilities() CRMCapabilities
	// Write puts the record: an upsert, or a create (see Capabilities).
	// It returns the vendor's id of the record (crm_id).
	Write(ctx context.Context, r *Record) (id string, err error)
	// Lookup finds the record written under r's reference. found is false
	// when there is none (definite only with ConsistentLookup).
	Lookup(ctx context.Context, r *Record) (id string, found bool, err error)
	// Update writes r over the record id; only with UpdateByID. It
	// returns the record's id (which may differ, where the vendor says
	// so).
	Update(ctx context.Context, id string, r *Record) (string, error)
	// Prepare runs the kind's step before its writes and look-ups (only
	// with Prepares) and returns what they need of it, kept with the lead
	// and given back in Record.Prepared.
	Prepare(ctx context.Context, r *Record) (string, error)
}

// ChannelCapabilities are what a notification kind guarantees of its
// messages (see lead.ChannelCapabilities).
type ChannelCapabilities = lead.ChannelCapabilities

// Receipt is what a channel keeps of a message it sent, to find or update
// it later (Slack's ts); empty for channels that keep nothing.
type Receipt string

// Channel is a notification kind's driver. Every method is safe for
// concurrent use and returns an *Error on failure.
type Channel interface {
	// Capabilities are the kind's guarantees.
	Capabilities() ChannelCapabilities
	// Send announces r. chain, when not empty, is the receipt of the
	// message the amendment's chain already has on this channel: a kind
	// with Update updates it.
	Send(ctx context.Context, r *Record, chain Receipt) (Receipt, error)
	// Find looks for the message announcing r sent since since; only with
	// Find.
	Find(ctx context.Context, r *Record, since time.Time) (Receipt, bool, error)
}

// Checker is a destination that can check its configuration with one
// authenticated call that changes nothing (worker destinations check).
type Checker interface {
	Check(ctx context.Context) error
}

// Record is what a destination is given of a lead. It holds personal data:
// never log it.
type Record struct {
	LeadID string
	// ExternalRef is the reference the lead is written under: derived
	// from the client and the key alone (the chain's first, for an
	// amendment).
	ExternalRef string
	Lead        *lead.Lead
	Score       int
	Tier        string
	// Enrichment is the enrichment service's answer; nil without data.
	Enrichment *Enrichment
	// Amendment is the lead's number along a chain of amendments (1, 2,
	// ...), 0 for a lead that amends nothing; Amends is the lead id it
	// amends.
	Amendment int
	Amends    string
	// ChainCRMID is the CRM's id of the record the amendment's chain
	// already has, when known.
	ChainCRMID string
	// Prepared is what the CRM's Prepare gave for this lead (a kind that
	// prepares).
	Prepared string
	// DuplicateOf is the id of an earlier lead this one may duplicate;
	// empty for none.
	DuplicateOf string
	// Owner is the lead's owner; nil for none.
	Owner *Owner
}

// IdempotencyKey is the Idempotency-Key of the lead's CRM write: the
// reference, or reference:amend:N for the N-th amendment.
func (r *Record) IdempotencyKey() string {
	if r.Amendment > 0 {
		return r.ExternalRef + ":amend:" + strconv.Itoa(r.Amendment)
	}
	return r.ExternalRef
}

// NotifyKey is the Idempotency-Key of the lead's notification:
// reference:notify, or reference:notify:N for the N-th amendment.
func (r *Record) NotifyKey() string {
	if r.Amendment > 0 {
		return r.ExternalRef + ":notify:" + strconv.Itoa(r.Amendment)
	}
	return r.ExternalRef + ":notify"
}

// FirstName and LastName split the lead's name at its last space: a name of
// one word is a last name.
func (r *Record) FirstName() string {
	first, _ := splitName(r.Lead.Name)
	return first
}

// LastName: see FirstName.
func (r *Record) LastName() string {
	_, last := splitName(r.Lead.Name)
	return last
}

func splitName(name string) (first, last string) {
	name = strings.TrimSpace(name)
	i := strings.LastIndexAny(name, " \t")
	if i < 0 {
		return "", name
	}
	return strings.TrimSpace(name[:i]), strings.TrimSpace(name[i+1:])
}

// Enrichment is what the enrichment service knows of a lead. Unknown members
// of its answer are ignored.
type Enrichment struct {
	CompanySize *int    `json:"company_size,omitempty"`
	Industry    *string `json:"industry,omitempty"`
	Seniority   *string `json:"seniority,omitempty"`
	Country     *string `json:"country,omitempty"`
}

// Owner is the sales person a lead is assigned to, as each destination
// names them.
type Owner struct {
	// Name is the owner's name in the clients file.
	Name string
	// CRMOwner is the CRM's id of the owner (HubSpot hubspot_owner_id,
	// Salesforce OwnerId, Pipedrive owner_id); empty for none.
	CRMOwner string
	// Slack is the owner's Slack member id, mentioned in messages.
	Slack string
	// Email is added to an e-mail's recipients.
	Email string
}
