package downstream_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/downstream"
)

func TestSimulator(t *testing.T) {
	t.Parallel()

	// A cancelled context: a simulator that made any call would fail.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var sim downstream.Simulator
	req := &downstream.EnrichmentRequest{LeadID: "l1", Email: "Ada@Example.com"}

	t.Run("EnrichmentIsDataAndDeterministic", func(t *testing.T) {
		t.Parallel()
		first, err := sim.Enrich(ctx, req)
		if err != nil {
			t.Fatalf("Enrich: %v", err)
		}
		if first == nil || first.CompanySize == nil || first.Industry == nil || first.Seniority == nil || first.Country == nil {
			t.Fatalf("Enrich = %+v, want data in every member", first)
		}
		again, _ := sim.Enrich(ctx, &downstream.EnrichmentRequest{LeadID: "other", Email: "someone.else@example.COM"})
		if !reflect.DeepEqual(first, again) {
			t.Errorf("two leads at one domain: %+v and %+v, want the same", first, again)
		}
		// Not every domain looks alike.
		differs := false
		for _, domain := range []string{"a.example", "b.example", "c.example", "d.example"} {
			other, _ := sim.Enrich(ctx, &downstream.EnrichmentRequest{Email: "x@" + domain})
			differs = differs || !reflect.DeepEqual(first, other)
		}
		if !differs {
			t.Error("every domain gets the same enrichment")
		}
	})

	t.Run("CRMIsDeterministic", func(t *testing.T) {
		t.Parallel()
		lead := crmLead()
		upserted, err := sim.UpsertLead(ctx, lead)
		if err != nil || upserted == "" {
			t.Fatalf("UpsertLead = %q, %v", upserted, err)
		}
		created, err := sim.CreateLead(ctx, lead)
		if err != nil || created != upserted {
			t.Errorf("CreateLead = %q, %v; want %q", created, err, upserted)
		}
		found, ok, err := sim.LookupLead(ctx, lead.ExternalRef)
		if err != nil || !ok || found != upserted {
			t.Errorf("LookupLead = %q, %t, %v; want %q, true", found, ok, err, upserted)
		}
		again, _ := sim.UpsertLead(ctx, crmLead())
		if again != upserted {
			t.Errorf("UpsertLead again = %q, want %q", again, upserted)
		}
		other := crmLead()
		other.ExternalRef = "li_another-reference_987654"
		if id, _ := sim.UpsertLead(ctx, other); id == upserted {
			t.Errorf("two references share the id %q", id)
		}
		if strings.Contains(upserted, leadEmail) {
			t.Errorf("id %q holds the email", upserted)
		}
	})

	t.Run("NotifySucceeds", func(t *testing.T) {
		t.Parallel()
		if err := sim.Notify(ctx, &downstream.Notification{LeadID: "l1", ExternalRef: leadRef}); err != nil {
			t.Errorf("Notify: %v", err)
		}
	})
}
