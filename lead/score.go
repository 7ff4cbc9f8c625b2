package lead

// Tier is a lead's temperature, from its score.
type Tier string

// Tiers.
const (
	TierHot  Tier = "hot"
	TierWarm Tier = "warm"
	TierCold Tier = "cold"
)

// Score is the deterministic lead score: 40, plus 15 with a company, plus 10
// with a phone, plus 20 for source referral, 15 for linkedin, 5 for ads, plus
// 10 when enrichment returned data; at most 100. The tier is hot from 80, warm
// from 55, else cold. It is the one place the score is computed.
func Score(l *Lead, enriched bool) (score int, tier Tier) {
	score = 40
	if l.Company != "" {
		score += 15
	}
	if l.Phone != "" {
		score += 10
	}
	switch l.Source {
	case "referral":
		score += 20
	case "linkedin":
		score += 15
	case "ads":
		score += 5
	}
	if enriched {
		score += 10
	}
	score = min(score, 100)
	switch {
	case score >= 80:
		tier = TierHot
	case score >= 55:
		tier = TierWarm
	default:
		tier = TierCold
	}
	return score, tier
}
