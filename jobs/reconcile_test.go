package jobs_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/jobs"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// In create mode, a post that may have been applied and look-ups that fail
// until the attempts run out leave the key in needs_reconciliation; the
// reconciler settles it once the look-up answers.
func TestReconcileNeedsReconciliation(t *testing.T) {
	t.Parallel()

	lookupsFail := fake.Chaos{FailRate: 1, FailStatus: http.StatusServiceUnavailable}

	// setup submits a lead whose post meets postFault and whose look-ups
	// all fail, and waits until its key needs reconciliation.
	setupUnsettled := func(t *testing.T, postFault fake.Fault) (*testBundle, *submission) {
		t.Helper()
		bundle := setup(t, &setupOpts{CRMMode: lead.ModeCreate, MaxAttempts: 2})
		bundle.fake.Script(fake.CRMCreate, postFault)
		if err := bundle.fake.SetChaos(fake.CRMLookup, lookupsFail); err != nil {
			t.Fatal(err)
		}
		sub := bundle.submit(t, adaBody)

		got := bundle.waitKey(t, sub.Key, lead.KeyNeedsReconciliation, lead.KeyCompleted, lead.KeyFailed)
		if got.State != lead.KeyNeedsReconciliation || got.Status != 0 || got.Raw != nil {
			t.Fatalf("key %s with response %d %s, want needs_reconciliation without a response", got.State, got.Status, got.Raw)
		}
		// The job is done; the key waits for the reconciler.
		bundle.requireJobs(t, sub.LeadID, "completed")
		if n := bundle.fake.Requests(fake.Notify); n != 0 {
			t.Errorf("%d notifications before the CRM's acceptance is known, want none", n)
		}
		if n := bundle.fake.Requests(fake.CRMCreate); n != 1 {
			t.Errorf("%d posts, want 1: never post again while a look-up cannot settle", n)
		}
		return bundle, sub
	}
	lookupsWork := func(t *testing.T, bundle *testBundle) {
		t.Helper()
		if err := bundle.fake.SetChaos(fake.CRMLookup, fake.Chaos{}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("ResumesWithTheRecordFound", func(t *testing.T) {
		t.Parallel()
		// The post was applied, its answer lost.
		bundle, sub := setupUnsettled(t, fake.Fault{DropAfterApply: true})
		rec := bundle.crmRecord(t, sub.Ref)
		lookupsWork(t, bundle)

		bundle.reconcile(t)
		got := bundle.waitFinished(t, sub.Key)
		requireCompleted(t, got, completedBody(sub.LeadID, rec.IDs[0], 85, "hot", true))
		bundle.crmRecord(t, sub.Ref)
		if n := bundle.fake.Requests(fake.CRMCreate); n != 1 {
			t.Errorf("%d posts, want 1", n)
		}
		if n, _ := bundle.fake.Notification(sub.Ref + ":notify"); n.Deliveries != 1 {
			t.Errorf("%d notification deliveries, want 1", n.Deliveries)
		}
		if n := bundle.fake.Requests(fake.Enrichment); n != 1 {
			t.Errorf("%d enrichment requests, want 1: the lead resumes at its notification", n)
		}
		bundle.requireJobs(t, sub.LeadID, "completed", "completed")
	})

	t.Run("PostsAgainOnNotFound", func(t *testing.T) {
		t.Parallel()
		// The post failed with a 5xx: maybe applied, in fact not.
		bundle, sub := setupUnsettled(t, fake.Fault{Status: http.StatusServiceUnavailable})
		if _, ok := bundle.fake.CRM(sub.Ref); ok {
			t.Fatal("the CRM holds a record the fault did not apply")
		}
		lookupsWork(t, bundle)

		bundle.reconcile(t)
		got := bundle.waitFinished(t, sub.Key)
		rec := bundle.crmRecord(t, sub.Ref)
		requireCompleted(t, got, completedBody(sub.LeadID, rec.IDs[0], 85, "hot", true))
		if n := bundle.fake.Requests(fake.CRMCreate); n != 2 {
			t.Errorf("%d posts, want 2", n)
		}
		if n, _ := bundle.fake.Notification(sub.Ref + ":notify"); n.Deliveries != 1 {
			t.Errorf("%d notification deliveries, want 1", n.Deliveries)
		}
	})

	t.Run("LeavesKeyWhileLookupFails", func(t *testing.T) {
		t.Parallel()
		bundle, sub := setupUnsettled(t, fake.Fault{DropAfterApply: true})
		lookups := bundle.fake.Requests(fake.CRMLookup)

		bundle.reconcile(t)
		if n := bundle.fake.Requests(fake.CRMLookup); n != lookups+1 {
			t.Errorf("the reconciler made %d look-ups, want 1", n-lookups)
		}
		if got, _ := bundle.key(t, sub.Key); got.State != lead.KeyNeedsReconciliation {
			t.Fatalf("key %s after a failed look-up, want still needs_reconciliation", got.State)
		}
		bundle.requireJobs(t, sub.LeadID, "completed")

		// The next round, with the look-up working, settles it.
		lookupsWork(t, bundle)
		bundle.reconcile(t)
		got := bundle.waitFinished(t, sub.Key)
		rec := bundle.crmRecord(t, sub.Ref)
		requireCompleted(t, got, completedBody(sub.LeadID, rec.IDs[0], 85, "hot", true))
	})
}

// A key still processing whose job ended without a final response (the
// rescuer discarded it, an operator deleted it) is finished by the
// reconciler as its last attempt would have.
func TestReconcileOrphans(t *testing.T) {
	t.Parallel()

	// Enqueue modes of the claim.
	const (
		jobGone      = "gone"      // no job at all
		jobDiscarded = "discarded" // discarded before it ran
		jobWaiting   = "waiting"   // scheduled later: alive, not an orphan
	)
	tests := []struct {
		name string
		job  string
		// crm is the lead's CRM state when its job ended; crmID its id.
		crm, crmID string
		// want is the key's state after a round; wantBody its body.
		want     lead.KeyState
		wantBody func(sub *submission) map[string]any
		status   int
	}{
		{
			name: "FailsWhenCRMNeverReached", job: jobDiscarded, crm: "pending",
			want: lead.KeyFailed, status: http.StatusBadGateway,
		},
		{
			name: "FailsWhenJobGone", job: jobGone, crm: "pending",
			want: lead.KeyFailed, status: http.StatusBadGateway,
		},
		{
			name: "CompletesWhenCRMAccepted", job: jobDiscarded, crm: "accepted", crmID: "crm_424242",
			want: lead.KeyCompleted, status: http.StatusCreated,
			wantBody: func(sub *submission) map[string]any {
				// No enrichment was recorded (75), and the notification
				// counts as failed.
				return completedBody(sub.LeadID, "crm_424242", 75, "warm", false, "notification_failed")
			},
		},
		{
			name: "AwaitsReconciliationWhenCreateUncertain", job: jobGone, crm: "uncertain",
			want: lead.KeyNeedsReconciliation,
		},
		{
			name: "LeavesLiveJobAlone", job: jobWaiting, crm: "pending",
			want: lead.KeyProcessing,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, nil)
			var enqueue enqueueFunc = noJob
			if tt.job != jobGone {
				// Scheduled far ahead, so that the running client never
				// works it before the test has decided its fate.
				enqueue = func(ctx context.Context, tx pgx.Tx, leadID uuid.UUID) (int64, error) {
					res, err := bundle.river.InsertTx(ctx, tx, jobs.ProcessLeadArgs{LeadID: leadID},
						&river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
					if err != nil {
						return 0, err
					}
					return res.Job.ID, nil
				}
			}
			sub := bundle.submitWith(t, enqueue, testkit.NewKey(), adaBody)
			if tt.job == jobDiscarded {
				bundle.exec(t, `UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE kind = 'process_lead'`)
			}
			var crmID *string
			if tt.crmID != "" {
				crmID = &tt.crmID
			}
			bundle.exec(t, `UPDATE leads SET crm_state = $2, crm_id = $3 WHERE id = $1`, sub.LeadID, tt.crm, crmID)

			bundle.reconcile(t)
			got, _ := bundle.key(t, sub.Key)
			switch {
			case tt.want == lead.KeyFailed:
				requireFailed(t, got, sub.LeadID, tt.status, "downstream_unavailable")
			case tt.wantBody != nil:
				requireCompleted(t, got, tt.wantBody(sub))
			case got.State != tt.want || got.Raw != nil:
				t.Fatalf("key %s with response %s, want %s without one", got.State, got.Raw, tt.want)
			}
			bundle.requireNoCalls(t)
			if l := bundle.lead(t, sub.LeadID); l.Finished != (tt.status != 0) {
				t.Errorf("lead row finished %t, want %t", l.Finished, tt.status != 0)
			}
		})
	}

	t.Run("FailedOrphanReopens", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		sub := bundle.submitWith(t, noJob, testkit.NewKey(), adaBody)
		bundle.reconcile(t)
		requireFailed(t, bundle.waitFinished(t, sub.Key), sub.LeadID, http.StatusBadGateway, "downstream_unavailable")

		if again := bundle.claim(t, sub.Key, adaBody); again.Outcome != store.OutcomeReopened || again.LeadID != sub.LeadID {
			t.Fatalf("claim again: %s for %s, want reopened for %s", again.Outcome, again.LeadID, sub.LeadID)
		}
		got := bundle.waitFinished(t, sub.Key)
		rec := bundle.crmRecord(t, sub.Ref)
		requireCompleted(t, got, completedBody(sub.LeadID, rec.IDs[0], 85, "hot", true))
	})
}
