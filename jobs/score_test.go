package jobs_test

import (
	"testing"

	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/jobs"
)

func TestScore(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		lead     intake.Lead
		enriched bool
		score    int
		tier     string
	}{
		{"Base", intake.Lead{Source: "website"}, false, 40, jobs.TierCold},
		{"CompanyReachesWarm", intake.Lead{Source: "website", Company: "C"}, false, 55, jobs.TierWarm},
		{"Phone", intake.Lead{Source: "website", Phone: "1"}, false, 50, jobs.TierCold},
		{"Referral", intake.Lead{Source: "referral"}, false, 60, jobs.TierWarm},
		{"LinkedIn", intake.Lead{Source: "linkedin"}, false, 55, jobs.TierWarm},
		{"Ads", intake.Lead{Source: "ads"}, false, 45, jobs.TierCold},
		{"OtherSourceCountsForNothing", intake.Lead{Source: "event"}, false, 40, jobs.TierCold},
		{"Enriched", intake.Lead{Source: "website"}, true, 50, jobs.TierCold},
		{"AdsWithPhoneIsWarmAtFiftyFive", intake.Lead{Source: "ads", Phone: "1"}, false, 55, jobs.TierWarm},
		{"HotFromEighty", intake.Lead{Source: "linkedin", Company: "C", Phone: "1"}, false, 80, jobs.TierHot},
		{"SeventyFiveIsWarm", intake.Lead{Source: "referral", Company: "C"}, false, 75, jobs.TierWarm},
		{"HotFromEnrichment", intake.Lead{Source: "referral", Company: "C"}, true, 85, jobs.TierHot},
		// Every rule at once is 95: the cap of 100 is never reached.
		{"Everything", intake.Lead{Source: "referral", Company: "C", Phone: "1"}, true, 95, jobs.TierHot},
		// Names and messages carry no points.
		{"OtherFieldsCountForNothing", intake.Lead{Source: "website", Name: "N", Message: "M", Website: "https://x.example"}, false, 40, jobs.TierCold},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			score, tier := jobs.Score(&tt.lead, tt.enriched)
			if score != tt.score || tier != tt.tier {
				t.Errorf("Score = %d %s, want %d %s", score, tier, tt.score, tt.tier)
			}
			again, _ := jobs.Score(&tt.lead, tt.enriched)
			if again != score {
				t.Errorf("Score is not deterministic: %d then %d", score, again)
			}
		})
	}
}
