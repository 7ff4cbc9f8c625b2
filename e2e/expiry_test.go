package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/store"
)

// A finished key expires after KEY_RETENTION: the clean-up deletes it, the
// operation is gone, and a retry with the same key and body is a new lead,
// sent to the CRM under the same external_ref (one record, written twice).
func TestKeyExpiry(t *testing.T) {
	t.Parallel()
	s := newStack(t, &stackOpts{workerEnv: []string{"KEY_RETENTION=2s", "CLEANUP_INTERVAL=1s"}})
	s.startAPI()
	s.startWorker()

	const key = "expiry-key-0001"
	body := leadBody(42)
	ref := intake.ExternalRef("e2e", key)

	first := s.submit(key, body)
	if first.status != http.StatusAccepted || first.header.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("first submit: %d %s", first.status, first.body)
	}
	firstLead := leadID(t, first.body)
	// The key stays finished for about KEY_RETENTION: short, but a poll
	// every 50 ms sees it.
	s.waitState(key, time.Minute, string(store.KeyCompleted))
	if rec, ok := s.fake.CRM(ref); !ok || rec.Records != 1 || rec.Writes != 1 {
		t.Fatalf("CRM after the first lead: %+v", rec)
	}

	eventually(t, time.Minute, "the expired key is deleted", func() bool {
		return s.count(`SELECT count(*) FROM idempotency_keys WHERE client_id = 'e2e' AND key = $1`, key) == 0
	})
	if r := s.operation(key); r.status != http.StatusNotFound {
		t.Fatalf("GET operation of an expired key: %d %s, want 404", r.status, r.body)
	}
	// The lead itself outlives its key.
	if n := s.count(`SELECT count(*) FROM leads WHERE id = $1`, firstLead); n != 1 {
		t.Fatalf("leads with the first lead id: %d, want 1", n)
	}

	second := s.submit(key, body)
	if second.status != http.StatusAccepted || second.header.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("submit after expiry: %d replayed=%q %s, want 202 and a new claim",
			second.status, second.header.Get("Idempotent-Replayed"), second.body)
	}
	secondLead := leadID(t, second.body)
	if secondLead == firstLead {
		t.Fatalf("the retry after expiry kept lead_id %s, want a new lead", firstLead)
	}

	// The second lead reaches the CRM under the same reference: an update of
	// the one record, not a second one.
	eventually(t, time.Minute, "the second lead's CRM write", func() bool {
		rec, _ := s.fake.CRM(ref)
		return rec.Writes == 2
	})
	eventually(t, time.Minute, "the second lead finishes", func() bool {
		return s.count(`SELECT count(*) FROM leads WHERE id = $1 AND finished_at IS NOT NULL`, secondLead) == 1
	})
	rec, _ := s.fake.CRM(ref)
	if rec.Records != 1 || rec.Writes != 2 || rec.IdempotencyKey != ref {
		t.Fatalf("CRM for %s: %+v, want one record written twice", ref, rec)
	}
	var last struct {
		LeadID      string `json:"lead_id"`
		ExternalRef string `json:"external_ref"`
	}
	if err := json.Unmarshal(rec.LastBody, &last); err != nil {
		t.Fatal(err)
	}
	if last.LeadID != secondLead || last.ExternalRef != ref {
		t.Fatalf("last CRM write: lead_id %s external_ref %s, want %s and %s", last.LeadID, last.ExternalRef, secondLead, ref)
	}
	if n := s.count(`SELECT count(*) FROM leads WHERE external_ref = $1`, ref); n != 2 {
		t.Fatalf("leads under %s: %d, want 2", ref, n)
	}
}

func leadID(t *testing.T, body []byte) string {
	t.Helper()
	var v struct {
		LeadID string `json:"lead_id"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.LeadID == "" {
		t.Fatalf("no lead_id in %s (%v)", body, err)
	}
	return v.LeadID
}
