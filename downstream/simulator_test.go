package downstream_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/downstream"
)

// The Simulator stands in for every destination.
var _ destination.CRM = downstream.Simulator{}

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
		crm, _ := sim.Destination(&destination.Config{Name: "crm", Kind: "http"})
		if c := crm.Capabilities(); !c.Upsert || !c.ConsistentLookup {
			t.Errorf("Capabilities = %+v, want an upsert with a consistent look-up", c)
		}
		r := record()
		written, err := crm.Write(ctx, r)
		if err != nil || written == "" {
			t.Fatalf("Write = %q, %v", written, err)
		}
		found, ok, err := crm.Lookup(ctx, r)
		if err != nil || !ok || found != written {
			t.Errorf("Lookup = %q, %t, %v; want %q, true", found, ok, err, written)
		}
		again, _ := crm.Write(ctx, record())
		if again != written {
			t.Errorf("Write again = %q, want %q", again, written)
		}
		// An amendment is written under its chain's reference: the same
		// record.
		amendment := record()
		amendment.Amendment, amendment.Amends = 1, "l0"
		if id, _ := crm.Write(ctx, amendment); id != written {
			t.Errorf("Write of an amendment = %q, want %q", id, written)
		}
		if id, err := crm.Update(ctx, written, record()); err != nil || id != written {
			t.Errorf("Update = %q, %v; want %q", id, err, written)
		}
		if p, err := crm.Prepare(ctx, r); p != "" || err != nil {
			t.Errorf("Prepare = %q, %v; want nothing", p, err)
		}
		other := record()
		other.ExternalRef = "li_another-reference_987654"
		if id, _ := crm.Write(ctx, other); id == written {
			t.Errorf("two references share the id %q", id)
		}
		if strings.Contains(written, leadEmail) {
			t.Errorf("id %q holds the email", written)
		}
	})

	t.Run("NotifySucceeds", func(t *testing.T) {
		t.Parallel()
		_, ch := sim.Destination(&destination.Config{Name: "notification", Kind: "http"})
		if c := ch.Capabilities(); !c.Dedupes {
			t.Errorf("Capabilities = %+v, want a channel that dedupes", c)
		}
		if _, err := ch.Send(ctx, record(), ""); err != nil {
			t.Errorf("Send: %v", err)
		}
		if _, found, err := ch.Find(ctx, record(), time.Now()); err != nil || !found {
			t.Errorf("Find = %t, %v; want found", found, err)
		}
	})
}
