package jobs_test

import (
	"bytes"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/downstream"
	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/jobs"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

func TestProcessLeadCompletes(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		body   string
		domain string
		score  int
		tier   string
	}{
		// 40 +15 company +20 referral +10 enrichment.
		{"EnrichedReferralIsHot", adaBody, "example.com", 85, "hot"},
		// 40 +10 phone +15 linkedin; no data for the domain.
		{"NoDataIsNeitherBonusNorWarning", noDataBody, "navy.nodata", 65, "warm"},
		// 40 +10 enrichment.
		{"BareWebsiteLeadIsCold", `{"email":"someone@example.org","source":"website"}`, "example.org", 50, "cold"},
		// 40 +15 +10 +20 +10 = 95: every rule at once, under the cap.
		{"EverythingIsHot", `{"email":"x@example.net","source":"referral","company":"C","phone":"+44 20 7946 0018"}`, "example.net", 95, "hot"},
		// 40 +15 +5 ads, no data.
		{"AdsWithCompanyIsWarm", `{"email":"x@shop.nodata","source":"ads","company":"C"}`, "shop.nodata", 60, "warm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, nil)
			sub := bundle.submit(t, tt.body)

			got := bundle.waitFinished(t, sub.Key)
			rec := bundle.crmRecord(t, sub.Ref)
			requireCompleted(t, got, completedBody(sub.LeadID, rec.IDs[0], tt.score, tt.tier, true))

			// The CRM got the lead under its reference, with its score,
			// tier and enrichment.
			if rec.IdempotencyKey != sub.Ref || rec.Writes != 1 {
				t.Errorf("CRM record: Idempotency-Key %q, %d writes; want %q, 1", rec.IdempotencyKey, rec.Writes, sub.Ref)
			}
			crmBody := jsonOf(t, rec.LastBody)
			submitted := jsonOf(t, []byte(tt.body))
			for name, want := range map[string]any{
				"external_ref": sub.Ref, "lead_id": sub.LeadID.String(), "email": submitted["email"],
				"source": submitted["source"], "score": float64(tt.score), "tier": tt.tier,
			} {
				if crmBody[name] != want {
					t.Errorf("CRM body %s = %v, want %v", name, crmBody[name], want)
				}
			}
			if want := enrichmentOf(t, tt.domain); !reflect.DeepEqual(crmBody["enrichment"], want) {
				t.Errorf("CRM body enrichment = %v, want %v", crmBody["enrichment"], want)
			}

			// One notification, under its own key.
			n, ok := bundle.fake.Notification(sub.Ref + ":notify")
			if !ok || n.Deliveries != 1 {
				t.Fatalf("notification %+v (found %t), want one delivery", n, ok)
			}
			notice := jsonOf(t, n.FirstBody)
			for name, want := range map[string]any{
				"lead_id": sub.LeadID.String(), "external_ref": sub.Ref, "score": float64(tt.score),
				"tier": tt.tier, "email": submitted["email"],
			} {
				if notice[name] != want {
					t.Errorf("notification %s = %v, want %v", name, notice[name], want)
				}
			}

			l := bundle.lead(t, sub.LeadID)
			if l.Score == nil || *l.Score != tt.score || l.Tier == nil || *l.Tier != tt.tier ||
				l.CRMID == nil || *l.CRMID != rec.IDs[0] || !l.Finished || len(l.Warnings) != 0 {
				t.Errorf("lead row %+v, want score %d, tier %s, crm_id %s, finished, no warnings", l, tt.score, tt.tier, rec.IDs[0])
			}
			bundle.requireJobs(t, sub.LeadID, "completed")
			if n := bundle.fake.EnrichmentCalls(); n != 1 {
				t.Errorf("%d enrichment calls, want 1", n)
			}
		})
	}

	t.Run("ReplaysTheStoredResponse", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		sub := bundle.submit(t, adaBody)
		got := bundle.waitFinished(t, sub.Key)

		again := bundle.claim(t, sub.Key, adaBody)
		if again.Outcome != store.OutcomeReplayed || again.Response.Status != got.Status || !bytes.Equal(again.Response.Body, got.Raw) {
			t.Fatalf("claim again: %s %d %s, want the stored %d %s", again.Outcome, again.Response.Status, again.Response.Body, got.Status, got.Raw)
		}
		// Kept for the retention from when it finished (an hour here).
		var retention time.Duration
		if err := bundle.pool.QueryRow(t.Context(), `SELECT expires_at - finished_at FROM idempotency_keys WHERE key = $1`,
			sub.Key).Scan(&retention); err != nil {
			t.Fatal(err)
		}
		if retention != time.Hour {
			t.Errorf("key kept %v after it finished, want 1h", retention)
		}
	})

	t.Run("WithTheSimulator", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &setupOpts{Simulate: true})
		sub := bundle.submit(t, adaBody)

		got := bundle.waitFinished(t, sub.Key)
		crmID, _, _ := downstream.Simulator{}.Lookup(t.Context(), &destination.Record{ExternalRef: sub.Ref})
		// The stand-in enrichment counts as data: 75 + 10.
		requireCompleted(t, got, completedBody(sub.LeadID, crmID, 85, "hot", true))
		bundle.requireNoCalls(t)
	})
}

// The CRM in upsert mode: transient answers are retried from the step that
// failed; a refusal ends the lead.
func TestProcessLeadUpsert(t *testing.T) {
	t.Parallel()

	t.Run("RetriesOnServiceUnavailable", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		bundle.fake.Script(fake.CRMUpsert, fake.Fault{Status: 503}, fake.Fault{Status: 503})
		sub := bundle.submit(t, adaBody)

		got := bundle.waitFinished(t, sub.Key)
		rec := bundle.crmRecord(t, sub.Ref)
		requireCompleted(t, got, completedBody(sub.LeadID, rec.IDs[0], 85, "hot", true))
		if n := bundle.fake.Requests(fake.CRMUpsert); n != 3 {
			t.Errorf("%d CRM requests, want 3", n)
		}
		// The enrichment's result was kept from the first attempt.
		if n := bundle.fake.Requests(fake.Enrichment); n != 1 {
			t.Errorf("%d enrichment requests, want 1: the retries must resume at the CRM", n)
		}
		if n, _ := bundle.fake.Notification(sub.Ref + ":notify"); n.Deliveries != 1 {
			t.Errorf("%d notification deliveries, want 1", n.Deliveries)
		}
		if runs := bundle.requireJobs(t, sub.LeadID, "completed"); runs[0].Attempt != 3 || runs[0].Errors != 2 {
			t.Errorf("job %+v, want completed at attempt 3 after 2 errors", runs[0])
		}
	})

	t.Run("RetriesTransientClientErrors", func(t *testing.T) {
		t.Parallel()
		for _, status := range []int{http.StatusRequestTimeout, http.StatusConflict, http.StatusTooManyRequests} {
			t.Run(statusName(status), func(t *testing.T) {
				t.Parallel()
				bundle := setup(t, nil)
				bundle.fake.Script(fake.CRMUpsert, fake.Fault{Status: status})
				sub := bundle.submit(t, adaBody)

				got := bundle.waitFinished(t, sub.Key)
				rec := bundle.crmRecord(t, sub.Ref)
				requireCompleted(t, got, completedBody(sub.LeadID, rec.IDs[0], 85, "hot", true))
				if n := bundle.fake.Requests(fake.CRMUpsert); n != 2 {
					t.Errorf("%d CRM requests, want 2", n)
				}
			})
		}
	})

	t.Run("RejectsOnClientError", func(t *testing.T) {
		t.Parallel()
		for _, status := range []int{http.StatusBadRequest, http.StatusNotFound, http.StatusUnprocessableEntity} {
			t.Run(statusName(status), func(t *testing.T) {
				t.Parallel()
				bundle := setup(t, nil)
				bundle.fake.Script(fake.CRMUpsert, fake.Fault{Status: status})
				sub := bundle.submit(t, adaBody)

				got := bundle.waitFinished(t, sub.Key)
				requireFailed(t, got, sub.LeadID, http.StatusUnprocessableEntity, "crm_rejected")
				if n := bundle.fake.Requests(fake.Notify); n != 0 {
					t.Errorf("%d notifications sent for a refused lead, want none", n)
				}
				if n := bundle.fake.Requests(fake.CRMUpsert); n != 1 {
					t.Errorf("%d CRM requests, want 1", n)
				}
				// Completed with its final response: never retried.
				if runs := bundle.requireJobs(t, sub.LeadID, "completed"); runs[0].Attempt != 1 {
					t.Errorf("job %+v, want completed at its first attempt", runs[0])
				}
				if l := bundle.lead(t, sub.LeadID); l.CRMState != "rejected" || !l.Finished {
					t.Errorf("lead row %+v, want crm_state rejected, finished", l)
				}
				// A refusal is a verdict: replayed, never re-opened.
				if again := bundle.claim(t, sub.Key, adaBody); again.Outcome != store.OutcomeReplayed {
					t.Errorf("claim again: %s, want replayed", again.Outcome)
				}
			})
		}
	})

	t.Run("HonoursRetryAfter", func(t *testing.T) {
		t.Parallel()
		for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
			t.Run(statusName(status), func(t *testing.T) {
				t.Parallel()
				// The retry policy's longest delay is 50 ms: only the
				// Retry-After can hold the next attempt back 2 s.
				bundle := setup(t, nil)
				bundle.fake.Script(fake.CRMUpsert, fake.Fault{Status: status, RetryAfter: "2"})
				sub := bundle.submit(t, adaBody)

				got := bundle.waitFinished(t, sub.Key)
				rec := bundle.crmRecord(t, sub.Ref)
				requireCompleted(t, got, completedBody(sub.LeadID, rec.IDs[0], 85, "hot", true))
				at := bundle.hits.times(http.MethodPut, "/crm/leads/")
				if len(at) != 2 {
					t.Fatalf("%d CRM requests, want 2", len(at))
				}
				if gap := at[1].Sub(at[0]); gap < 1500*time.Millisecond {
					t.Errorf("second CRM request %v after the first, want at least ~2 s (Retry-After: 2)", gap)
				}
			})
		}
	})

	// The external reference outlives the key: a submission after the key
	// expired is a new lead, which updates the same record.
	t.Run("UpdatesTheSameRecordAfterKeyExpired", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		sub := bundle.submit(t, adaBody)
		bundle.waitFinished(t, sub.Key)
		bundle.exec(t, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE key = $1`, sub.Key)

		again := bundle.claim(t, sub.Key, noDataBody)
		if again.Outcome != store.OutcomeClaimed || again.LeadID == sub.LeadID {
			t.Fatalf("claim after expiry: %s for lead %s, want claimed for a new lead", again.Outcome, again.LeadID)
		}
		got := bundle.waitFinished(t, sub.Key)
		rec := bundle.crmRecord(t, sub.Ref)
		requireCompleted(t, got, completedBody(again.LeadID, rec.IDs[0], 65, "warm", true))
		if rec.Writes != 2 {
			t.Errorf("%d writes to the record, want 2", rec.Writes)
		}
		if l := bundle.lead(t, sub.LeadID); !l.Finished || *l.Score != 85 {
			t.Errorf("first lead row %+v, want it left as it finished", l)
		}
	})

	t.Run("FailsWhenAttemptsRunOutThenReopens", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &setupOpts{MaxAttempts: 2})
		bundle.fake.Script(fake.CRMUpsert, fake.Fault{Status: 503}, fake.Fault{Status: 503})
		sub := bundle.submit(t, adaBody)

		got := bundle.waitFinished(t, sub.Key)
		requireFailed(t, got, sub.LeadID, http.StatusBadGateway, "downstream_unavailable")
		if n := bundle.fake.Requests(fake.Notify); n != 0 {
			t.Errorf("%d notifications sent for an undelivered lead, want none", n)
		}
		bundle.requireJobs(t, sub.LeadID, "completed")

		// The same submission again re-opens the key for the same lead.
		again := bundle.claim(t, sub.Key, adaBody)
		if again.Outcome != store.OutcomeReopened || again.LeadID != sub.LeadID {
			t.Fatalf("claim again: %s for lead %s, want reopened for %s", again.Outcome, again.LeadID, sub.LeadID)
		}
		got = bundle.waitFinished(t, sub.Key)
		rec := bundle.crmRecord(t, sub.Ref)
		requireCompleted(t, got, completedBody(sub.LeadID, rec.IDs[0], 85, "hot", true))
		if n := bundle.fake.Requests(fake.Enrichment); n != 1 {
			t.Errorf("%d enrichment requests, want 1: the re-opened lead resumes at the CRM", n)
		}
		bundle.requireJobs(t, sub.LeadID, "completed", "completed")
	})
}

// A failed enrichment or notification does not fail the lead: it completes
// with a warning.
func TestProcessLeadOptionalSteps(t *testing.T) {
	t.Parallel()

	always503 := fake.Chaos{FailRate: 1, FailStatus: http.StatusServiceUnavailable}
	tests := []struct {
		name     string
		script   map[fake.Target]fake.Fault
		chaos    map[fake.Target]fake.Chaos
		body     string
		score    int
		tier     string
		notified bool
		warnings []string
	}{
		{
			name:   "EnrichmentRefused",
			script: map[fake.Target]fake.Fault{fake.Enrichment: {Status: http.StatusBadRequest}},
			body:   adaBody, score: 75, tier: "warm", notified: true,
			warnings: []string{"enrichment_unavailable"},
		},
		{
			name:  "EnrichmentUnavailableOnEveryTry",
			chaos: map[fake.Target]fake.Chaos{fake.Enrichment: always503},
			body:  adaBody, score: 75, tier: "warm", notified: true,
			warnings: []string{"enrichment_unavailable"},
		},
		{
			// Waiting an hour for an optional step would hold the lead
			// back: it is given up at once.
			name:   "EnrichmentAsksForALongWait",
			script: map[fake.Target]fake.Fault{fake.Enrichment: {Status: http.StatusServiceUnavailable, RetryAfter: "3600"}},
			body:   adaBody, score: 75, tier: "warm", notified: true,
			warnings: []string{"enrichment_unavailable"},
		},
		{
			name: "EnrichmentWithoutData",
			body: noDataBody, score: 65, tier: "warm", notified: true,
		},
		{
			name:   "NotificationRefused",
			script: map[fake.Target]fake.Fault{fake.Notify: {Status: http.StatusBadRequest}},
			body:   adaBody, score: 85, tier: "hot", notified: false,
			warnings: []string{"notification_failed"},
		},
		{
			name:   "NotificationNotFound",
			script: map[fake.Target]fake.Fault{fake.Notify: {Status: http.StatusNotFound}},
			body:   adaBody, score: 85, tier: "hot", notified: false,
			warnings: []string{"notification_failed"},
		},
		{
			name:  "NotificationUnavailableOnEveryTry",
			chaos: map[fake.Target]fake.Chaos{fake.Notify: always503},
			body:  adaBody, score: 85, tier: "hot", notified: false,
			warnings: []string{"notification_failed"},
		},
		{
			name: "BothRefused",
			script: map[fake.Target]fake.Fault{
				fake.Enrichment: {Status: http.StatusForbidden},
				fake.Notify:     {Status: http.StatusBadRequest},
			},
			body: adaBody, score: 75, tier: "warm", notified: false,
			warnings: []string{"enrichment_unavailable", "notification_failed"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, nil)
			for target, f := range tt.script {
				bundle.fake.Script(target, f)
			}
			for target, c := range tt.chaos {
				if err := bundle.fake.SetChaos(target, c); err != nil {
					t.Fatal(err)
				}
			}
			sub := bundle.submit(t, tt.body)

			got := bundle.waitFinished(t, sub.Key)
			rec := bundle.crmRecord(t, sub.Ref)
			requireCompleted(t, got, completedBody(sub.LeadID, rec.IDs[0], tt.score, tt.tier, tt.notified, tt.warnings...))
			if l := bundle.lead(t, sub.LeadID); strings.Join(l.Warnings, ",") != strings.Join(tt.warnings, ",") {
				t.Errorf("lead row warnings %v, want %v", l.Warnings, tt.warnings)
			}
			// Each step ran once to success; a failing optional step was
			// tried again on transient failures only.
			if n := bundle.fake.Requests(fake.CRMUpsert); n != 1 {
				t.Errorf("%d CRM requests, want 1", n)
			}
			for target, c := range tt.chaos {
				if c.FailStatus >= 500 && bundle.fake.Requests(target) < 2 {
					t.Errorf("%d %s requests: a transient failure was not retried", bundle.fake.Requests(target), target)
				}
			}
			for target := range tt.script {
				if n := bundle.fake.Requests(target); n != 1 {
					t.Errorf("%d %s requests, want 1: a refusal is not retried", n, target)
				}
			}
		})
	}
}

// Runs of a job whose key needs nothing more complete (or are cancelled)
// without a call.
func TestProcessLeadWithNothingToDo(t *testing.T) {
	t.Parallel()

	finishKey := `
UPDATE idempotency_keys
SET state = 'completed', response_status = 201, response_body = '{"status":"completed"}',
    finished_at = now(), expires_at = now() + interval '1 hour'
WHERE key = $1`
	tests := []struct {
		name string
		// prepare puts the key in the state under test.
		prepare string
		// state is the key's state afterwards; "" when it is gone.
		state lead.KeyState
	}{
		{"KeyAlreadyFinished", finishKey, lead.KeyCompleted},
		{"KeyNeedsReconciliation", `UPDATE idempotency_keys SET state = 'needs_reconciliation' WHERE key = $1`, lead.KeyNeedsReconciliation},
		{"KeyDeleted", `DELETE FROM idempotency_keys WHERE key = $1`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bundle := setup(t, nil)
			// Claimed without a job; the job comes once the key is set up.
			sub := bundle.submitWith(t, noJob, testkit.NewKey(), adaBody)
			bundle.exec(t, tt.prepare, sub.Key)
			before, _ := bundle.key(t, sub.Key)

			bundle.waitJob(t, bundle.insertJob(t, jobs.ProcessLeadArgs{LeadID: sub.LeadID}), "completed")
			bundle.requireNoCalls(t)
			after, ok := bundle.key(t, sub.Key)
			if ok != (tt.state != "") || after.State != before.State || !bytes.Equal(after.Raw, before.Raw) {
				t.Errorf("key %+v after the job, want it untouched (%+v)", after, before)
			}
		})
	}

	t.Run("UnknownLeadIsCancelled", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		sub := &submission{LeadID: uuid.New()}

		bundle.waitJob(t, bundle.insertJob(t, jobs.ProcessLeadArgs{LeadID: sub.LeadID}), "cancelled")
		bundle.requireNoCalls(t)
	})
}

// statusName names a status for a subtest: "TooManyRequests".
func statusName(code int) string {
	return strings.ReplaceAll(http.StatusText(code), " ", "")
}

// Many leads, two worker processes and a CRM that fails, drops and hangs at
// random: every lead completes, with one record each and one notification.
func TestProcessLeadUnderChaos(t *testing.T) {
	t.Parallel()

	const leads = 20
	tests := []struct {
		mode   lead.Mode
		target fake.Target
	}{
		{lead.ModeUpsert, fake.CRMUpsert},
		{lead.ModeCreate, fake.CRMCreate},
	}
	for _, tt := range tests {
		t.Run(strings.ToUpper(string(tt.mode[:1]))+string(tt.mode[1:]), func(t *testing.T) {
			t.Parallel()
			// Twelve attempts at 30 % faults: all failing is a one in two
			// million chance per lead.
			bundle := setup(t, &setupOpts{CRMMode: tt.mode, MaxAttempts: 12, Timeout: 2 * time.Second})
			bundle.startWorker(t)
			if err := bundle.fake.SetChaos(tt.target, fake.Chaos{FailRate: 0.15, DropRate: 0.1, HangRate: 0.05, Seed: 7}); err != nil {
				t.Fatal(err)
			}

			subs := make([]*submission, leads)
			for i := range subs {
				subs[i] = bundle.submit(t, fmt.Sprintf(`{"email":"lead%d@example.com","source":"referral","company":"C"}`, i))
			}
			for _, sub := range subs {
				got := bundle.waitFinished(t, sub.Key)
				rec := bundle.crmRecord(t, sub.Ref)
				requireCompleted(t, got, completedBody(sub.LeadID, rec.IDs[0], 85, "hot", true))
				if n, _ := bundle.fake.Notification(sub.Ref + ":notify"); n.Deliveries != 1 {
					t.Errorf("%d notification deliveries, want 1", n.Deliveries)
				}
			}
			if totals := bundle.fake.State().Totals; totals.CRMRecords != leads || totals.DuplicateRefs != 0 {
				t.Errorf("CRM totals %+v, want %d records and no duplicate", totals, leads)
			}
		})
	}
}
