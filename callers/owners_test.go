package callers_test

import (
	"strings"
	"testing"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/lead"
)

const ownersFile = `
clients:
  - id: acme
    owners:
      - {name: alice, crm_owner: "9001", slack: U024BE7LH, email: alice@acme.example}
      - {name: bob, crm_owner: "9002", away: true}
      - {name: carol}
    assign:
      - when: {country: [DE, AT], company_size_min: 100}
        pool: [alice]
      - when: {utm.campaign: spring, fields.budget: [big, huge]}
        pool: [carol, bob]
      - when: {tier: [hot]}
        pool: [bob]
      - pool: [alice, bob, carol]
`

func TestOwners(t *testing.T) {
	t.Parallel()
	set, err := callers.ParseFile([]byte(ownersFile))
	if err != nil {
		t.Fatal(err)
	}
	size := func(n int) *int { return &n }
	str := func(s string) *string { return &s }
	for _, tt := range []struct {
		name string
		f    callers.Facts
		want string // the pool's owners not away, "none" for no rule
	}{
		{"FirstRuleMatches", callers.Facts{Lead: &lead.Lead{}, Enrichment: &destination.Enrichment{Country: str("de"), CompanySize: size(150)}}, "alice"},
		{"EveryConditionMustHold", callers.Facts{Lead: &lead.Lead{}, Tier: "warm", Enrichment: &destination.Enrichment{Country: str("DE"), CompanySize: size(50)}}, "alice,carol"},
		{"UTMAndFields", callers.Facts{Lead: &lead.Lead{UTM: map[string]string{"campaign": "Spring"}, Fields: map[string]string{"budget": "huge"}}}, "carol"},
		{"APoolWhoseOwnersAreAllAwayHasNone", callers.Facts{Lead: &lead.Lead{}, Tier: "hot"}, ""},
		{"WithoutEnrichmentNoCountryMatches", callers.Facts{Lead: &lead.Lead{}, Tier: "cold"}, "alice,carol"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, ok := set.PoolFor("acme", &tt.f)
			if !ok {
				t.Fatal("no rule matched")
			}
			if got := strings.Join(p.Owners, ","); got != tt.want {
				t.Errorf("owners %q, want %q (pool %s)", got, tt.want, p.Key)
			}
		})
	}
	if _, ok := set.PoolFor("other", &callers.Facts{Lead: &lead.Lead{}}); ok {
		t.Error("a client without rules matched one")
	}
	if o := set.Owner("acme", "alice"); o == nil || o.Destination().Slack != "U024BE7LH" || o.Destination().CRMOwner != "9001" {
		t.Errorf("alice: %+v", o)
	}
}

func TestBadOwners(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, edit, want string }{
		{"UnknownOwnerInAPool", "pool: [alice]", "pool: [alicia]"},
		{"UnknownWhenKey", "when: {tier: [hot]}", "when: {mood: [happy]}"},
		{"OwnerNameTwice", "{name: carol}", "{name: alice}"},
		{"PoolLeftEmpty", "pool: [bob]", "pool: []"},
		{"BadOwnerName", "{name: carol}", "{name: Carol Smith}"},
		{"BadSlackID", "slack: U024BE7LH", "slack: alice"},
		{"BadEmail", "email: alice@acme.example", "email: not-an-address"},
		{"BadCompanySize", "company_size_min: 100", "company_size_min: many"},
		{"BadAway", "away: true", "away: sometimes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file := strings.Replace(ownersFile, tt.edit, tt.want, 1)
			if file == ownersFile {
				t.Fatal("the edit changed nothing")
			}
			_, err := callers.ParseFile([]byte(file))
			if err == nil {
				t.Fatal("accepted")
			}
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, `client "acme"`) {
				t.Errorf("%q: want one line naming the client", msg)
			}
			t.Log(err)
		})
	}
}
