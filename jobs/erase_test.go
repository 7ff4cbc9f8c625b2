package jobs_test

import (
	"context"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/jobs"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/operator"
)

// erase erases the personal data of every lead of the address, as `api
// erase` does, and returns how many leads it erased.
func (b *testBundle) erase(t *testing.T, email string) int {
	t.Helper()
	op := &operator.Operator{Store: b.store, River: b.river, HashKey: hashKey, Callers: b.callers, KeyRetention: time.Hour}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := op.Erase(ctx, operator.CLI, clientID, email)
	if err != nil {
		t.Fatalf("erase: %v", err)
	}
	return n
}

// erasedLead is what an erased lead keeps, and whether it keeps what it
// must not.
type erasedLead struct {
	Erased         bool
	Submission     bool // the submission is still there
	Enrichment     bool
	EmailHMAC      bool
	ExternalRef    string
	ClientID       string
	CRMID          *string
	Score          *int16
	Finished       bool
	IdempotencyKey string
}

func (b *testBundle) erasedLead(t *testing.T, id uuid.UUID) erasedLead {
	t.Helper()
	var l erasedLead
	err := b.pool.QueryRow(context.Background(), `
SELECT erased_at IS NOT NULL, submission IS NOT NULL, enrichment IS NOT NULL, email_hmac IS NOT NULL,
       external_ref, client_id, crm_id, score, finished_at IS NOT NULL, idempotency_key
FROM leads WHERE id = $1`, id).Scan(&l.Erased, &l.Submission, &l.Enrichment, &l.EmailHMAC,
		&l.ExternalRef, &l.ClientID, &l.CRMID, &l.Score, &l.Finished, &l.IdempotencyKey)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// requireErased checks that a lead holds no personal data any more and
// still holds what is not personal.
func requireErased(t *testing.T, l erasedLead, sub *submission) {
	t.Helper()
	if !l.Erased || l.Submission || l.Enrichment || l.EmailHMAC || !l.Finished {
		t.Errorf("lead after the erasure: %+v, want erased and finished, without submission, enrichment or email hash", l)
	}
	if l.ExternalRef != sub.Ref || l.ClientID != clientID || l.IdempotencyKey != sub.Key {
		t.Errorf("lead after the erasure: %+v, want its reference, client and key kept", l)
	}
}

// An erasure while the CRM call of the lead's run is in flight: the key is
// finished at once as failed, 422 erased, and announced; the call finishes
// (it had started), and the run stops before its next call: no
// notification.
func TestErasureDuringHungCRMCall(t *testing.T) {
	t.Parallel()
	g := newGate(http.MethodPut, "/crm/leads/", 1)
	bundle := setup(t, &setupOpts{Gate: g})
	sub := bundle.submit(t, adaBody)
	g.Arrived(t, 1) // the gate holds this lead's CRM call, and no other
	other := bundle.submit(t, noDataBody)

	// Another spelling of the address: compared lower-cased whole.
	if n := bundle.erase(t, "ADA@example.COM"); n != 1 {
		t.Fatalf("erased %d leads, want 1", n)
	}
	got, _ := bundle.key(t, sub.Key)
	requireFailed(t, got, sub.LeadID, http.StatusUnprocessableEntity, "erased")
	_, body := bundle.callbackOf(t, sub, "lead.failed")
	data, _ := body["data"].(map[string]any)
	resp, _ := data["response"].(map[string]any)
	if rb, _ := resp["body"].(map[string]any); !reflect.DeepEqual(rb, got.Body) || resp["status"] != float64(422) {
		t.Errorf("callback %v, want the key's final response %s", body, got.Raw)
	}

	g.Open()
	first := bundle.leadJobs(t, sub.LeadID)[0]
	bundle.waitJob(t, first.ID, "completed")
	if n := bundle.fake.Requests(fake.Notify); n != 1 {
		t.Errorf("%d notifications, want 1: the other lead's only", n)
	}
	if _, ok := bundle.fake.Notification(sub.Ref + ":notify"); ok {
		t.Error("the erased lead's notification was sent")
	}
	got, _ = bundle.key(t, sub.Key)
	requireFailed(t, got, sub.LeadID, http.StatusUnprocessableEntity, "erased")
	requireErased(t, bundle.erasedLead(t, sub.LeadID), sub)

	// The other address is untouched and finishes.
	bundle.waitFinished(t, other.Key)
	if l := bundle.erasedLead(t, other.LeadID); l.Erased || !l.Submission {
		t.Errorf("another address's lead after the erasure: %+v", l)
	}
	var requests []int
	if err := bundle.pool.QueryRow(context.Background(),
		`SELECT array_agg(count ORDER BY id) FROM audit WHERE action = 'erase' AND actor = 'cli' AND client_id = $1 AND email_hmac = $2`,
		clientID, hashKey.Email("ada@example.com")).Scan(&requests); err != nil || len(requests) != 1 || requests[0] != 1 {
		t.Errorf("erasure records %v (%v), want one of 1 lead", requests, err)
	}
}

// The reconciler meets an erased lead: erased while awaiting
// reconciliation, the lead is finished at once and the reconciler leaves
// it; erased while the reconciler's look-up is in flight, the look-up's
// answer changes nothing: no post, no new job, no notification.
func TestReconcilerMeetsErasedLead(t *testing.T) {
	t.Parallel()

	// unsettled submits a lead whose post's answer is lost and whose
	// look-ups fail until the attempts run out: its key awaits
	// reconciliation. Then look-ups work again.
	unsettled := func(t *testing.T, g *gate) (*testBundle, *submission) {
		t.Helper()
		bundle := setup(t, &setupOpts{CRMMode: lead.ModeCreate, MaxAttempts: 2, Gate: g})
		bundle.fake.Script(fake.CRMCreate, fake.Fault{DropAfterApply: true})
		if err := bundle.fake.SetChaos(fake.CRMLookup, fake.Chaos{FailRate: 1, FailStatus: http.StatusServiceUnavailable}); err != nil {
			t.Fatal(err)
		}
		sub := bundle.submit(t, adaBody)
		bundle.waitKey(t, sub.Key, lead.KeyNeedsReconciliation)
		bundle.requireJobs(t, sub.LeadID, "completed")
		if err := bundle.fake.SetChaos(fake.CRMLookup, fake.Chaos{}); err != nil {
			t.Fatal(err)
		}
		return bundle, sub
	}
	requireLeftAlone := func(t *testing.T, bundle *testBundle, sub *submission) {
		t.Helper()
		got, _ := bundle.key(t, sub.Key)
		requireFailed(t, got, sub.LeadID, http.StatusUnprocessableEntity, "erased")
		requireErased(t, bundle.erasedLead(t, sub.LeadID), sub)
		bundle.requireJobs(t, sub.LeadID, "completed")
		if n := bundle.fake.Requests(fake.CRMCreate); n != 1 {
			t.Errorf("%d posts, want 1", n)
		}
		if n := bundle.fake.Requests(fake.Notify); n != 0 {
			t.Errorf("%d notifications, want none", n)
		}
	}

	t.Run("ErasedBeforeTheRound", func(t *testing.T) {
		t.Parallel()
		bundle, sub := unsettled(t, nil)
		lookups := bundle.fake.Requests(fake.CRMLookup)
		if n := bundle.erase(t, "ada@example.com"); n != 1 {
			t.Fatalf("erased %d leads, want 1", n)
		}
		bundle.reconcile(t)
		if n := bundle.fake.Requests(fake.CRMLookup); n != lookups {
			t.Errorf("%d look-ups after the erasure, want none", n-lookups)
		}
		requireLeftAlone(t, bundle, sub)
	})

	t.Run("ErasedDuringTheLookup", func(t *testing.T) {
		t.Parallel()
		g := newGate(http.MethodGet, "/crm/leads", 1)
		g.Hold = 0 // the job's look-ups pass
		bundle, sub := unsettled(t, g)
		g.holdNext(1) // the reconciler's waits

		round := bundle.insertJob(t, jobs.ReconcileArgs{})
		g.Arrived(t, 1)
		if n := bundle.erase(t, "ada@example.com"); n != 1 {
			t.Fatalf("erased %d leads, want 1", n)
		}
		g.Open()
		bundle.waitJob(t, round, "completed")
		requireLeftAlone(t, bundle, sub)
	})
}

// LEAD_RETENTION after a lead finished, the clean-up erases its personal
// data and keeps the rest; unfinished leads and leads finished more
// recently keep theirs.
func TestRetentionErasesFinishedLeads(t *testing.T) {
	t.Parallel()
	bundle := setup(t, nil)
	old := bundle.submit(t, adaBody)
	recent := bundle.submit(t, noDataBody)
	bundle.waitFinished(t, old.Key)
	bundle.waitFinished(t, recent.Key)
	bundle.exec(t, `UPDATE leads SET finished_at = now() - $2::interval WHERE id = $1`,
		old.LeadID, (jobs.DefaultLeadRetention + time.Minute).String())
	before, _ := bundle.key(t, old.Key)
	kept := bundle.lead(t, old.LeadID)

	bundle.cleanUp(t)
	requireErased(t, bundle.erasedLead(t, old.LeadID), old)
	if after := bundle.lead(t, old.LeadID); *after.Score != *kept.Score || *after.Tier != *kept.Tier || *after.CRMID != *kept.CRMID {
		t.Errorf("lead after retention %+v, want its score, tier and CRM id kept (%+v)", after, kept)
	}
	if l := bundle.erasedLead(t, recent.LeadID); l.Erased || !l.Submission {
		t.Errorf("a recent lead after the clean-up: %+v", l)
	}
	// The key (still within its own retention) replays its response.
	after, _ := bundle.key(t, old.Key)
	if string(after.Raw) != string(before.Raw) {
		t.Errorf("the key's response after the erasure %s, want %s", after.Raw, before.Raw)
	}
}
