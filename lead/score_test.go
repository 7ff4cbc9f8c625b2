package lead_test

import (
	"testing"

	"github.com/leadintake/leadintake/lead"
)

func TestScore(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		lead     lead.Lead
		enriched bool
		score    int
		tier     lead.Tier
	}{
		{"Base", lead.Lead{Source: "website"}, false, 40, lead.TierCold},
		{"CompanyReachesWarm", lead.Lead{Source: "website", Company: "C"}, false, 55, lead.TierWarm},
		{"Phone", lead.Lead{Source: "website", Phone: "1"}, false, 50, lead.TierCold},
		{"Referral", lead.Lead{Source: "referral"}, false, 60, lead.TierWarm},
		{"LinkedIn", lead.Lead{Source: "linkedin"}, false, 55, lead.TierWarm},
		{"Ads", lead.Lead{Source: "ads"}, false, 45, lead.TierCold},
		{"OtherSourceCountsForNothing", lead.Lead{Source: "event"}, false, 40, lead.TierCold},
		{"Enriched", lead.Lead{Source: "website"}, true, 50, lead.TierCold},
		{"AdsWithPhoneIsWarmAtFiftyFive", lead.Lead{Source: "ads", Phone: "1"}, false, 55, lead.TierWarm},
		{"HotFromEighty", lead.Lead{Source: "linkedin", Company: "C", Phone: "1"}, false, 80, lead.TierHot},
		{"SeventyFiveIsWarm", lead.Lead{Source: "referral", Company: "C"}, false, 75, lead.TierWarm},
		{"HotFromEnrichment", lead.Lead{Source: "referral", Company: "C"}, true, 85, lead.TierHot},
		// Every rule at once is 95: the cap of 100 is never reached.
		{"Everything", lead.Lead{Source: "referral", Company: "C", Phone: "1"}, true, 95, lead.TierHot},
		// Names and messages carry no points.
		{"OtherFieldsCountForNothing", lead.Lead{Source: "website", Name: "N", Message: "M", Website: "https://x.example"}, false, 40, lead.TierCold},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			score, tier := lead.Score(&tt.lead, tt.enriched)
			if score != tt.score || tier != tt.tier {
				t.Errorf("Score = %d %s, want %d %s", score, tier, tt.score, tt.tier)
			}
			again, _ := lead.Score(&tt.lead, tt.enriched)
			if again != score {
				t.Errorf("Score is not deterministic: %d then %d", score, again)
			}
		})
	}
}
