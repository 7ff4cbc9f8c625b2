package destination_test

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/lead"
)

// adLead is a lead that came from an ad and was sent from the contact page.
func adLead() *destination.Record {
	return &destination.Record{LeadID: "L1", Lead: &lead.Lead{
		Email: "ada@example.com", Source: "website",
		Attribution: &lead.Attribution{
			First: &lead.Touch{
				LandingPage: "https://acme.example/landing?utm_source=google&utm_medium=cpc&utm_campaign=spring&gclid=abc123",
				UTM:         map[string]string{"source": "google", "medium": "cpc", "campaign": "spring"},
				ClickIDs:    map[string]string{"gclid": "abc123"},
				At:          "2025-03-01T09:30:00.123Z",
			},
			Last: &lead.Touch{LandingPage: "https://acme.example/contact", Referrer: "https://news.example/", At: "2025-03-01T09:41:12.500Z"},
		},
	}}
}

// A map names the attribution's members by path; a member the lead does
// not have is left out, never written empty.
func TestAttributionMapping(t *testing.T) {
	t.Parallel()
	m, err := destination.ParseMapping(map[string]string{
		"first_page": "attribution.first.landing_page", "first_referrer": "attribution.first.referrer",
		"first_at": "attribution.first.at", "first_source": "attribution.first.utm.source",
		"first_term": "attribution.first.utm.term", "gclid": "attribution.first.click_ids.gclid",
		"fbclid": "attribution.first.click_ids.fbclid", "msclkid": "attribution.last.click_ids.msclkid",
		"last_page": "attribution.last.landing_page", "last_referrer": "attribution.last.referrer",
		"last_source": "attribution.last.utm.source", "last_at": "attribution.last.at",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"first_page":   "https://acme.example/landing?utm_source=google&utm_medium=cpc&utm_campaign=spring&gclid=abc123",
		"first_at":     "2025-03-01T09:30:00.123Z",
		"first_source": "google",
		"gclid":        "abc123",
		"last_page":    "https://acme.example/contact", "last_referrer": "https://news.example/", "last_at": "2025-03-01T09:41:12.500Z",
	}
	if got := m.Values(adLead()); !reflect.DeepEqual(got, want) {
		t.Errorf("values %v, want %v", got, want)
	}
	for name, r := range map[string]*destination.Record{
		"no attribution": {Lead: &lead.Lead{Email: "ada@example.com"}},
		"no touches":     {Lead: &lead.Lead{Email: "ada@example.com", Attribution: &lead.Attribution{}}},
		"empty touches":  {Lead: &lead.Lead{Email: "ada@example.com", Attribution: &lead.Attribution{First: &lead.Touch{}, Last: &lead.Touch{}}}},
	} {
		if got := m.Values(r); len(got) != 0 {
			t.Errorf("%s: values %v, want none", name, got)
		}
	}

	for _, src := range []string{
		"attribution", "attribution.first", "attribution.middle.landing_page", "attribution.first.page",
		"attribution.first.utm", "attribution.first.utm.", "attribution.first.utm.Source", "attribution.first.click_ids",
		"attribution.first.click_ids.ttclid", "attribution.last.landing_page.x",
	} {
		if _, err := destination.ParseMapping(map[string]string{"field": src}); err == nil {
			t.Errorf("map source %q accepted", src)
		}
	}
}

// The clients file of docs/attribution.md parses, and its map writes what
// the page says it writes for a lead that came from an ad.
func TestDocsAttributionClientsFile(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../docs/attribution.md")
	if err != nil {
		t.Fatal(err)
	}
	var file string
	for _, block := range strings.Split(string(page), "```yaml\n")[1:] {
		if block, _, _ = strings.Cut(block, "```"); strings.HasPrefix(block, "destinations:") {
			file = block
		}
	}
	if file == "" {
		t.Fatal("the page has no clients file")
	}
	set, err := callers.ParseFile([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	dests := set.Destinations()
	if len(dests) != 1 || dests[0].Kind != "hubspot" {
		t.Fatalf("destinations %+v, want the one HubSpot", dests)
	}
	r := adLead()
	r.Lead.Attribution.Last = &lead.Touch{LandingPage: "https://acme.example/contact", At: "2025-03-01T09:41:12.500Z"}
	got := dests[0].Map.Values(r)
	want := map[string]any{
		"first_landing_page": "https://acme.example/landing?utm_source=google&utm_medium=cpc&utm_campaign=spring&gclid=abc123",
		"first_utm_source":   "google", "first_utm_medium": "cpc", "first_utm_campaign": "spring",
		"first_touch_at": "2025-03-01T09:30:00.123Z", "gclid": "abc123",
		"last_landing_page": "https://acme.example/contact",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the page's map writes %v, want %v", got, want)
	}
	// What the page says is left out is mapped, and left out.
	mapped := map[string]bool{}
	for _, e := range dests[0].Map {
		mapped[e.Field] = true
	}
	for _, field := range []string{"first_referrer", "fbclid", "last_utm_campaign"} {
		if !mapped[field] {
			t.Errorf("the page's map has no %s", field)
		}
	}
}
