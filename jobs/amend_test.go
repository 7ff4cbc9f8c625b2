package jobs_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// amendedBody is adaBody, edited: another name and a phone (score 95, hot).
const amendedBody = `{"email":"ada@example.com","source":"referral","name":"Ada King","company":"Analytical Engines","phone":"+44 20 7946 0001"}`

// amend claims a new key for body that supersedes the key of sub, as the
// API does with a Supersedes header.
func (b *testBundle) amend(t *testing.T, sub *submission, body string) *submission {
	t.Helper()
	payload, err := lead.Decode([]byte(body), &lead.DecodeOpts{})
	if err != nil {
		t.Fatal(err)
	}
	payload.Supersede(sub.Key)
	key := testkit.NewKey()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience)
	defer cancel()
	res, err := b.store.Claim(ctx, &store.ClaimParams{
		ClientID: clientID, Key: key, ExternalRef: intake.ExternalRef(clientID, key), Payload: payload,
		Fingerprint: hashKey.Request(payload.Fingerprint[:]),
	})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if res.Outcome != store.OutcomeClaimed {
		t.Fatalf("amendment: outcome %s, want claimed", res.Outcome)
	}
	b.secrets.add(key)
	// The amendment is referenced under the chain's reference, not its own
	// key's.
	return &submission{Key: key, Ref: sub.Ref, LeadID: res.LeadID, Body: body}
}

func TestAmendments(t *testing.T) {
	t.Parallel()

	t.Run("UpsertUpdatesTheRecordInPlace", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		first := bundle.submit(t, adaBody)
		requireCompleted(t, bundle.waitFinished(t, first.Key), completedBody(first.LeadID, bundle.crmRecord(t, first.Ref).IDs[0], 85, "hot", true))

		second := bundle.amend(t, first, amendedBody)
		got := bundle.waitFinished(t, second.Key)
		rec := bundle.crmRecord(t, first.Ref)
		want := completedBody(second.LeadID, rec.IDs[0], 95, "hot", true)
		want["amends"] = first.LeadID.String()
		requireCompleted(t, got, want)
		if rec.Writes != 2 || rec.IdempotencyKey != first.Ref+":amend:1" {
			t.Errorf("CRM: %d writes, last with Idempotency-Key %q; want 2, the amendment's %q", rec.Writes, rec.IdempotencyKey, first.Ref+":amend:1")
		}
		n, ok := bundle.fake.Notification(first.Ref + ":notify:1")
		if !ok || n.Deliveries != 1 || jsonOf(t, n.FirstBody)["amends"] != first.LeadID.String() {
			t.Errorf("the amendment's notification: %+v %s", n, n.FirstBody)
		}
		// The superseded key's own answer does not change.
		if again, _ := bundle.key(t, first.Key); again.Status != http.StatusCreated || again.Body["lead_id"] != first.LeadID.String() {
			t.Errorf("the superseded key now answers %d %s", again.Status, again.Raw)
		}
	})

	t.Run("CreateModeLeavesAnExistingRecord", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &setupOpts{CRMMode: lead.ModeCreate})
		first := bundle.submit(t, adaBody)
		bundle.waitFinished(t, first.Key)
		rec := bundle.crmRecord(t, first.Ref)

		second := bundle.amend(t, first, amendedBody)
		got := bundle.waitFinished(t, second.Key)
		want := completedBody(second.LeadID, rec.IDs[0], 95, "hot", true, "crm_not_updated")
		want["amends"] = first.LeadID.String()
		requireCompleted(t, got, want)
		if n := bundle.fake.Requests(fake.CRMCreate); n != 1 {
			t.Errorf("%d posts, want 1: a record found is not posted again", n)
		}
	})

	t.Run("CreateModePostsWhenTheOriginalWasRefused", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &setupOpts{CRMMode: lead.ModeCreate})
		bundle.fake.Script(fake.CRMCreate, fake.Fault{Status: http.StatusUnprocessableEntity})
		first := bundle.submit(t, adaBody)
		requireFailed(t, bundle.waitFinished(t, first.Key), first.LeadID, http.StatusUnprocessableEntity, "crm_rejected")

		second := bundle.amend(t, first, amendedBody)
		got := bundle.waitFinished(t, second.Key)
		rec := bundle.crmRecord(t, first.Ref)
		want := completedBody(second.LeadID, rec.IDs[0], 95, "hot", true)
		want["amends"] = first.LeadID.String()
		requireCompleted(t, got, want)
		if rec.IdempotencyKey != first.Ref+":amend:1" {
			t.Errorf("the post carried Idempotency-Key %q, want %q", rec.IdempotencyKey, first.Ref+":amend:1")
		}
	})

	// The original is held by a CRM call that does not answer: the
	// amendment makes no CRM call until the original finishes, and is woken
	// by its finish (its own re-check is an hour away).
	t.Run("WaitsForTheSupersededKey", func(t *testing.T) {
		t.Parallel()
		g := newGate(http.MethodPut, "/crm/leads/", 1)
		bundle := setup(t, &setupOpts{Gate: g, AwaitRecheck: time.Hour})
		first := bundle.submit(t, adaBody)
		g.Arrived(t, 1)
		second := bundle.amend(t, first, amendedBody)
		testkit.Eventually(t, "the amendment to wait", func() bool {
			jobs := bundle.leadJobs(t, second.LeadID)
			return len(jobs) == 1 && jobs[0].State == "scheduled"
		})
		if n := bundle.fake.Requests(fake.CRMUpsert); n != 0 {
			t.Fatalf("%d CRM writes while the original's call hangs, want none", n)
		}
		g.Open()
		bundle.waitFinished(t, first.Key)
		got := bundle.waitFinished(t, second.Key)
		rec := bundle.crmRecord(t, first.Ref)
		want := completedBody(second.LeadID, rec.IDs[0], 95, "hot", true)
		want["amends"] = first.LeadID.String()
		requireCompleted(t, got, want)
		if rec.Writes != 2 || rec.IdempotencyKey != first.Ref+":amend:1" {
			t.Errorf("CRM: %d writes, last %q; want the amendment's write last", rec.Writes, rec.IdempotencyKey)
		}
	})

	t.Run("ChainOfThree", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		first := bundle.submit(t, adaBody)
		second := bundle.amend(t, first, amendedBody)
		third := bundle.amend(t, second, `{"email":"ada@example.com","source":"linkedin","name":"Ada"}`)
		for _, s := range []*submission{first, second, third} {
			bundle.waitFinished(t, s.Key)
		}
		rec := bundle.crmRecord(t, first.Ref)
		if rec.Writes != 3 || rec.IdempotencyKey != first.Ref+":amend:2" {
			t.Errorf("CRM: %d writes, last %q; want 3, the last %q", rec.Writes, rec.IdempotencyKey, first.Ref+":amend:2")
		}
		for _, k := range []string{":notify", ":notify:1", ":notify:2"} {
			if n, ok := bundle.fake.Notification(first.Ref + k); !ok || n.Deliveries != 1 {
				t.Errorf("notification %s: %+v", k, n)
			}
		}
		got, _ := bundle.key(t, third.Key)
		if got.Body["amends"] != second.LeadID.String() {
			t.Errorf("the third amends %v, want the second lead %s", got.Body["amends"], second.LeadID)
		}
	})
}
