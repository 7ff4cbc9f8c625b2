package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// quarantine claims p's key, judged spam for reasons.
func quarantine(t *testing.T, s *store.Store, p *store.ClaimParams, reasons ...string) *store.ClaimResult {
	t.Helper()
	p.Quarantine, p.Retention = reasons, time.Hour
	res := claim(t, s, p)
	if res.Outcome != store.OutcomeQuarantined || res.State != lead.KeyQuarantined || res.Response.Status != 200 {
		t.Fatalf("quarantine: %+v", res)
	}
	return res
}

// A quarantined enquiry is stored and finished at its claim, without a
// job, announced to the callback as lead.quarantined; its retries replay
// it; a release runs it as a new claim's would, once.
func TestQuarantineAndRelease(t *testing.T) {
	t.Parallel()
	s, jobs := newStore(t, dbtest.Tx(t), "a")
	p := claimParams(t, validBody)
	res := quarantine(t, s, p, "honeypot", "too_fast")
	var body struct {
		Status string `json:"status"`
		LeadID string `json:"lead_id"`
	}
	if err := json.Unmarshal(res.Response.Body, &body); err != nil || body.Status != "received" || body.LeadID != res.LeadID.String() {
		t.Fatalf("response %s", res.Response.Body)
	}
	if jobs.leads.Load() != 0 || jobs.callbackCount() != 1 {
		t.Fatalf("%d lead jobs and %d callbacks, want none and one", jobs.leads.Load(), jobs.callbackCount())
	}
	l, err := s.Lead(t.Context(), res.LeadID)
	if err != nil || l.JobID != nil || l.KeyState.State != lead.KeyQuarantined {
		t.Fatalf("lead %+v %v", l, err)
	}
	again := p
	again.Quarantine = nil
	if r := claim(t, s, again); r.Outcome != store.OutcomeReplayed || r.State != lead.KeyQuarantined {
		t.Fatalf("retry: %+v", r)
	}
	list, err := s.Quarantined(t.Context(), store.QuarantineFilter{ClientID: "a"})
	if err != nil || len(list) != 1 || list[0].Key != p.Key || len(list[0].Reasons) != 2 {
		t.Fatalf("quarantined %+v %v", list, err)
	}
	q, err := s.QuarantinedEnquiry(t.Context(), "a", p.Key, cli)
	if err != nil || !json.Valid(q.Submission) || len(q.Submission) == 0 {
		t.Fatalf("enquiry %+v %v", q, err)
	}

	done, err := s.Release(t.Context(), &store.ReleaseParams{ClientID: "a", Keys: []string{p.Key, testkit.NewKey()}, By: cli})
	if err != nil || len(done.Keys) != 1 || len(done.Skipped) != 1 || done.Skipped[0].State != store.StateNotFound {
		t.Fatalf("release: %+v %v", done, err)
	}
	l, err = s.Lead(t.Context(), res.LeadID)
	if err != nil || l.JobID == nil || l.KeyState.State != lead.KeyProcessing || jobs.leads.Load() != 1 {
		t.Fatalf("lead after release %+v %v", l, err)
	}
	// Released once: now it is processing.
	if again, _ := s.Release(t.Context(), &store.ReleaseParams{ClientID: "a", Keys: []string{p.Key}, By: cli}); len(again.Keys) != 0 || again.Skipped[0].State != string(lead.KeyProcessing) {
		t.Fatalf("second release: %+v", again)
	}
	if list, _ := s.Quarantined(t.Context(), store.QuarantineFilter{}); len(list) != 0 {
		t.Fatalf("still listed after its release: %+v", list)
	}
}

// A quarantined amendment supersedes nothing until it is released.
func TestQuarantinedAmendment(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, dbtest.Tx(t))
	first := claimParams(t, validBody)
	claim(t, s, first)
	amendment := claimParams(t, `{"email":"ada@example.com","source":"website","name":"Ada King"}`)
	amendment.Payload.Supersede(first.Key)
	quarantine(t, s, amendment, "no_signals")
	if op, _ := s.Operation(t.Context(), "a", first.Key); op.SupersededBy != "" {
		t.Fatalf("a quarantined amendment superseded its key: %+v", op)
	}
	if _, err := s.Release(t.Context(), &store.ReleaseParams{ClientID: "a", Keys: []string{amendment.Key}, By: cli}); err != nil {
		t.Fatal(err)
	}
	if op, _ := s.Operation(t.Context(), "a", first.Key); op.SupersededBy != amendment.Key {
		t.Fatalf("the released amendment does not supersede its key: %+v", op)
	}
}

// Under a policy that refuses spam, a new key is refused and nothing is
// stored; a key that exists answers as it stands.
func TestSpamRefusedAtTheClaim(t *testing.T) {
	t.Parallel()
	s, jobs := newStore(t, dbtest.Tx(t))
	p := claimParams(t, validBody)
	p.Refuse = true
	if r := claim(t, s, p); r.Outcome != store.OutcomeSpamRefused {
		t.Fatalf("claim: %+v", r)
	}
	if _, err := s.Operation(context.Background(), "a", p.Key); err == nil || jobs.leads.Load() != 0 {
		t.Fatal("a refused enquiry was stored")
	}
	p.Refuse = false
	first := claim(t, s, p)
	p.Refuse = true
	if r := claim(t, s, p); r.Outcome != store.OutcomeInProgress || r.LeadID != first.LeadID {
		t.Fatalf("refused retry of an existing key: %+v", r)
	}
}

// A quarantined enquiry is personal data like any other: an erasure erases
// it (its content's HMAC too), its key keeps replaying 200 received, and it
// can no longer be released.
func TestQuarantinedEnquiryErased(t *testing.T) {
	t.Parallel()
	db := dbtest.Tx(t)
	s, _ := newStore(t, db)
	p := claimParams(t, validBody)
	p.EmailHMAC, p.ContentHMAC = hashKey.Email("ada@example.com"), hashKey.Content(p.Payload)
	res := quarantine(t, s, p, "too_fast")
	erased, err := s.Erase(t.Context(), &store.EraseParams{
		ClientID: "a", EmailHMAC: hashKey.Email("ada@example.com"), By: cli, Retention: time.Hour,
	})
	if err != nil || erased.Count != 1 || erased.Finished != 0 {
		t.Fatalf("erased %+v %v, want the one lead, finished already", erased, err)
	}
	l, err := s.Lead(t.Context(), res.LeadID)
	if err != nil || !l.Erased() || l.Lead.Email != "" {
		t.Fatalf("lead after the erasure %+v %v", l, err)
	}
	var hmacGone bool
	if err := db.QueryRow(t.Context(), `SELECT content_hmac IS NULL FROM leads WHERE id = $1`, res.LeadID).Scan(&hmacGone); err != nil || !hmacGone {
		t.Errorf("the content's HMAC outlived the erasure (%v)", err)
	}
	if r := claim(t, s, p); r.Outcome != store.OutcomeReplayed || r.Response.Status != 200 {
		t.Fatalf("retry after the erasure: %+v", r)
	}
	done, err := s.Release(t.Context(), &store.ReleaseParams{ClientID: "a", Keys: []string{p.Key}, By: cli})
	if err != nil || len(done.Keys) != 0 || len(done.Skipped) != 1 || done.Skipped[0].State != "erased" {
		t.Fatalf("release of an erased enquiry: %+v %v", done, err)
	}
}
