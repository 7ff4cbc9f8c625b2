package fake_test

import (
	"slices"
	"testing"

	"github.com/leadintake/leadintake/downstream/fake"
)

// TestTraceParents: every request's traceparent is recorded by target, a
// faulted one's too, and Reset forgets them.
func TestTraceParents(t *testing.T) {
	b := setup(t, nil)
	const tp1 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	const tp2 = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01"
	b.fake.Script(fake.CRMUpsert, fake.Fault{Status: 503})
	for _, tp := range []string{tp1, tp2} {
		if _, err := b.do("PUT", "/crm/leads/li_ref1", lead("li_ref1"), "Idempotency-Key", "li_ref1", "traceparent", tp); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.upsert("li_ref2"); err != nil {
		t.Fatal(err)
	}
	if got, want := b.fake.TraceParents(fake.CRMUpsert), []string{tp1, tp2, ""}; !slices.Equal(got, want) {
		t.Fatalf("TraceParents(crm_upsert) = %q, want %q", got, want)
	}
	if got := b.fake.TraceParents(fake.Notify); len(got) != 0 {
		t.Fatalf("TraceParents(notify) = %q, want none", got)
	}
	b.fake.Reset()
	if got := b.fake.TraceParents(fake.CRMUpsert); len(got) != 0 {
		t.Fatalf("after Reset: %q", got)
	}
}
