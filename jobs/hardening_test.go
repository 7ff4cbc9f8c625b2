package jobs_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/jobs"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// failFinishOnce makes the next n finishing updates of a key (processing to
// completed or failed) fail inside their transaction, as a database that
// breaks just then would.
func failFinishOnce(t *testing.T, b *testBundle, n int) {
	t.Helper()
	b.exec(t, `CREATE SEQUENCE finish_failures`)
	b.exec(t, `
CREATE FUNCTION fail_finish() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'processing' AND NEW.state IN ('completed', 'failed')
       AND nextval('finish_failures') <= `+itoa(n)+` THEN
        RAISE EXCEPTION 'injected failure of the finishing transaction';
    END IF;
    RETURN NEW;
END $$`)
	b.exec(t, `CREATE TRIGGER fail_finish BEFORE UPDATE ON idempotency_keys FOR EACH ROW EXECUTE FUNCTION fail_finish()`)
}

func itoa(n int) string { return string(rune('0' + n)) }

// The notification's outcome is saved when the finishing transaction fails
// (the finish writes it otherwise): sales are not notified again, and a key
// finished by the reconciler says notified:true.
func TestNotificationOutcomeIsARecoveryPoint(t *testing.T) {
	t.Parallel()

	t.Run("NextAttemptDoesNotNotifyAgain", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &setupOpts{MaxAttempts: 3})
		failFinishOnce(t, bundle, 1)
		sub := bundle.submit(t, adaBody)
		got := bundle.waitFinished(t, sub.Key)
		rec := bundle.crmRecord(t, sub.Ref)
		requireCompleted(t, got, completedBody(sub.LeadID, rec.IDs[0], 85, "hot", true))
		if n, _ := bundle.fake.Notification(sub.Ref + ":notify"); n.Deliveries != 1 {
			t.Errorf("%d notification deliveries, want 1", n.Deliveries)
		}
	})

	t.Run("ReconcilerRecordsTheDelivery", func(t *testing.T) {
		t.Parallel()
		// The finish fails on the job's only attempt: River discards the
		// job, and the reconciler finishes the key.
		bundle := setup(t, &setupOpts{MaxAttempts: 1})
		failFinishOnce(t, bundle, 1)
		sub := bundle.submit(t, adaBody)
		testkit.Eventually(t, "the job discarded", func() bool {
			jobs := bundle.leadJobs(t, sub.LeadID)
			return len(jobs) == 1 && jobs[0].State == "discarded"
		})
		bundle.reconcile(t)
		got := bundle.waitFinished(t, sub.Key)
		rec := bundle.crmRecord(t, sub.Ref)
		requireCompleted(t, got, completedBody(sub.LeadID, rec.IDs[0], 85, "hot", true))
		if n, _ := bundle.fake.Notification(sub.Ref + ":notify"); n.Deliveries != 1 {
			t.Errorf("%d notification deliveries, want 1", n.Deliveries)
		}
	})
}

// Two runs of one lead at once (a second job for a lead whose first job is
// still running, as an operator's retry in River UI makes): the run that
// started last owns the lead; the other's writes are refused, and it makes
// no further call.
func TestRunsOfOneLeadAreFenced(t *testing.T) {
	t.Parallel()
	g := newGate(http.MethodPut, "/crm/leads/", 1)
	bundle := setup(t, &setupOpts{Gate: g})
	sub := bundle.submit(t, adaBody)
	g.Arrived(t, 1) // the first run waits for the CRM's answer

	second := bundle.insertJob(t, jobs.ProcessLeadArgs{LeadID: sub.LeadID})
	bundle.waitJob(t, second, "completed")
	got := bundle.waitFinished(t, sub.Key)
	rec := bundle.crmRecord(t, sub.Ref)
	want := completedBody(sub.LeadID, rec.IDs[0], 85, "hot", true)
	requireCompleted(t, got, want)

	g.Open() // the first run gets its answer now
	first := bundle.leadJobs(t, sub.LeadID)[0]
	bundle.waitJob(t, first.ID, "completed")
	if n, _ := bundle.fake.Notification(sub.Ref + ":notify"); n.Deliveries != 1 {
		t.Errorf("%d notification deliveries, want 1: the superseded run notified too", n.Deliveries)
	}
	got, _ = bundle.key(t, sub.Key)
	requireCompleted(t, got, want)
}

// In create mode, a lead whose reference an earlier lead used (its key
// expired and was submitted again) looks the reference up, finds nothing,
// and posts: that post too is written ahead as uncertain, so a post whose
// outcome is unknown on the last attempt leaves the key for reconciliation,
// not failed.
func TestCreateAfterExpiryMarksThePostUncertain(t *testing.T) {
	t.Parallel()
	bundle := setup(t, &setupOpts{CRMMode: lead.ModeCreate, MaxAttempts: 1})
	// The first lead is refused by the CRM: no record under the reference.
	bundle.fake.Script(fake.CRMCreate,
		fake.Fault{Status: http.StatusUnprocessableEntity},
		fake.Fault{Status: http.StatusServiceUnavailable})
	first := bundle.submit(t, adaBody)
	requireFailed(t, bundle.waitFinished(t, first.Key), first.LeadID, http.StatusUnprocessableEntity, "crm_rejected")

	bundle.exec(t, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE key = $1`, first.Key)
	again := bundle.claim(t, first.Key, adaBody)
	if again.Outcome != store.OutcomeClaimed || again.LeadID == first.LeadID {
		t.Fatalf("claim after expiry: %s for %s, want a new lead", again.Outcome, again.LeadID)
	}
	got := bundle.waitKey(t, first.Key, lead.KeyNeedsReconciliation, lead.KeyCompleted, lead.KeyFailed)
	if got.State != lead.KeyNeedsReconciliation {
		t.Fatalf("key %s (%d %s) after an uncertain post on the last attempt, want needs_reconciliation", got.State, got.Status, got.Raw)
	}
	if n := bundle.fake.Requests(fake.CRMLookup); n != 1 {
		t.Errorf("%d look-ups, want 1 before the post", n)
	}
}

// The reconciler settles each key on its own: a look-up that hangs, a key
// that keeps failing, a lead row that is gone hold back no other key, and
// the orphans are finished whatever the look-ups do.
func TestReconcilerDoesNotStall(t *testing.T) {
	t.Parallel()

	// unsettled claims a lead without a job and leaves its key in
	// needs_reconciliation after an uncertain post, as a job would.
	unsettled := func(t *testing.T, b *testBundle) *submission {
		t.Helper()
		sub := b.submitWith(t, noJob, testkit.NewKey(), adaBody)
		b.exec(t, `UPDATE idempotency_keys SET state = 'needs_reconciliation' WHERE key = $1`, sub.Key)
		b.exec(t, `UPDATE leads SET crm_state = 'uncertain' WHERE id = $1`, sub.LeadID)
		return sub
	}

	t.Run("HangingLookUpHoldsBackNoOtherKey", func(t *testing.T) {
		t.Parallel()
		g := newGate(http.MethodGet, "/crm/leads", 1)
		bundle := setup(t, &setupOpts{CRMMode: lead.ModeCreate, Gate: g, Timeout: 3 * testkit.Patience})
		hung := unsettled(t, bundle)
		g.Query = "external_ref=" + hung.Ref // its look-up, and no other, hangs
		bundle.exec(t, `UPDATE idempotency_keys SET updated_at = now() - interval '1 hour' WHERE key = $1`, hung.Key)
		other := unsettled(t, bundle)
		orphan := bundle.submitWith(t, noJob, testkit.NewKey(), adaBody)

		// The two periodic rounds, as the worker inserts them.
		bundle.insertJob(t, jobs.ReconcileArgs{})
		bundle.insertJob(t, jobs.FinishOrphansArgs{})
		g.Arrived(t, 1)
		requireCompleted(t, bundle.waitFinished(t, other.Key), completedBody(other.LeadID, bundle.crmRecord(t, other.Ref).IDs[0], 85, "hot", true))
		requireFailed(t, bundle.waitFinished(t, orphan.Key), orphan.LeadID, http.StatusBadGateway, "downstream_unavailable")
		if got, _ := bundle.key(t, hung.Key); got.State != lead.KeyNeedsReconciliation {
			t.Fatalf("the hung key is %s, want still needs_reconciliation", got.State)
		}
	})

	t.Run("FailingKeysMoveToTheBack", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &setupOpts{CRMMode: lead.ModeCreate})
		// More keys than one round takes: every look-up of the first
		// round fails.
		const n = 101
		subs := make([]*submission, n)
		for i := range subs {
			subs[i] = unsettled(t, bundle)
			bundle.exec(t, `UPDATE idempotency_keys SET updated_at = now() - make_interval(secs => $2) WHERE key = $1`, subs[i].Key, n-i)
		}
		if err := bundle.fake.SetChaos(fake.CRMLookup, fake.Chaos{FailRate: 1}); err != nil {
			t.Fatal(err)
		}
		bundle.reconcile(t)
		if err := bundle.fake.SetChaos(fake.CRMLookup, fake.Chaos{}); err != nil {
			t.Fatal(err)
		}
		bundle.reconcile(t)
		// The newest key was not looked at in the first round: it comes
		// before the keys whose look-up just failed.
		last := subs[n-1]
		bundle.waitFinished(t, last.Key)
	})

	t.Run("MissingLeadRowAbortsNothing", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &setupOpts{CRMMode: lead.ModeCreate})
		gone := unsettled(t, bundle)
		bundle.exec(t, `UPDATE idempotency_keys SET updated_at = now() - interval '1 hour' WHERE key = $1`, gone.Key)
		bundle.exec(t, `DELETE FROM leads WHERE id = $1`, gone.LeadID)
		other := unsettled(t, bundle)
		bundle.reconcile(t)
		requireCompleted(t, bundle.waitFinished(t, other.Key), completedBody(other.LeadID, bundle.crmRecord(t, other.Ref).IDs[0], 85, "hot", true))
	})

	t.Run("RoundsDoNotOverlap", func(t *testing.T) {
		t.Parallel()
		g := newGate(http.MethodGet, "/crm/leads", 1)
		bundle := setup(t, &setupOpts{CRMMode: lead.ModeCreate, Gate: g})
		unsettled(t, bundle)
		bundle.insertJob(t, jobs.ReconcileArgs{})
		g.Arrived(t, 1) // the round is under way
		res, err := bundle.river.Insert(context.Background(), jobs.ReconcileArgs{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !res.UniqueSkippedAsDuplicate {
			t.Errorf("a second round was enqueued (job %d) while one runs", res.Job.ID)
		}
	})
}
