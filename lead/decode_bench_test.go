package lead_test

import (
	"testing"

	"github.com/leadintake/leadintake/lead"
)

// benchBody is a typical submission of about 400 bytes.
const benchBody = `{"email":"someone@example.com","name":"Some Body","company":"Acme Corporation Limited",` +
	`"phone":"+44 20 7946 0000","source":"website","website":"https://example.com/some/path",` +
	`"message":"Hello, I would like to hear more about your product and pricing for a team of fifty people. Thanks!",` +
	`"utm":{"source":"google","medium":"cpc","campaign":"winter"},"consent":true}`

func BenchmarkDecodeSubmission(b *testing.B) {
	body := []byte(benchBody)
	opts := &lead.DecodeOpts{AllowedSources: []string{"website", "linkedin", "referral", "ads", "event"}}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lead.Decode(body, opts); err != nil {
			b.Fatal(err)
		}
	}
}
