package jobs_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/leadintake/leadintake/destination"
	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/store"
)

// The CRM in create mode: a POST is not idempotent, so after any outcome
// that may have created the record the worker looks the reference up before
// it ever posts again. Whatever the faults, the CRM ends with one record.
func TestProcessLeadCreateMode(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		opts setupOpts
		// before runs before the submission, with the lead's reference.
		before func(t *testing.T, bundle *testBundle, ref string)
		faults []fake.Fault
		// posts and lookups are the requests the CRM should receive.
		posts, lookups int
	}{
		{
			name:  "CreatesOneRecord",
			posts: 1, lookups: 0,
		},
		{
			name:   "LooksUpAfterLostAnswer",
			faults: []fake.Fault{{DropAfterApply: true}},
			posts:  1, lookups: 1,
		},
		{
			name:   "LooksUpAfterTimeout",
			opts:   setupOpts{Timeout: 2 * time.Second},
			faults: []fake.Fault{{HangAfterApply: true}},
			posts:  1, lookups: 1,
		},
		{
			name:   "LooksUpAfterServerErrorAndPostsAgainOnNotFound",
			faults: []fake.Fault{{Status: http.StatusServiceUnavailable}},
			posts:  2, lookups: 1,
		},
		{
			// Refused for now, certainly not applied: no look-up needed.
			name:   "PostsAgainAfterTooManyRequests",
			faults: []fake.Fault{{Status: http.StatusTooManyRequests}},
			posts:  2, lookups: 0,
		},
		{
			name:   "PostsAgainAfterConnectionDroppedBeforeApply",
			faults: []fake.Fault{{DropBeforeApply: true}},
			posts:  2, lookups: 1,
		},
		{
			name: "AcceptsConflictThroughLookup",
			opts: setupOpts{Fake: fake.Options{CreateConflict: true}},
			before: func(t *testing.T, bundle *testBundle, ref string) {
				// The record exists already, made by an earlier life of
				// the key.
				if _, err := bundle.crm.Write(context.Background(), &destination.Record{
					ExternalRef: ref, Lead: &lead.Lead{Email: "ada@example.com", Source: "referral"},
				}); err != nil {
					t.Fatalf("pre-existing record: %v", err)
				}
			},
			posts: 1, lookups: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := tt.opts
			opts.CRMMode = lead.ModeCreate
			bundle := setup(t, &opts)
			bundle.fake.Script(fake.CRMCreate, tt.faults...)
			key := testkit.NewKey()
			if tt.before != nil {
				tt.before(t, bundle, intake.ExternalRef(clientID, key))
			}
			sub := bundle.submitWith(t, nil, key, adaBody)

			got := bundle.waitFinished(t, sub.Key)
			rec := bundle.crmRecord(t, sub.Ref)
			requireCompleted(t, got, completedBody(sub.LeadID, rec.IDs[0], 85, "hot", true))
			if n := bundle.fake.Requests(fake.CRMCreate); n != tt.posts {
				t.Errorf("%d posts, want %d", n, tt.posts)
			}
			if n := bundle.fake.Requests(fake.CRMLookup); n != tt.lookups {
				t.Errorf("%d look-ups, want %d", n, tt.lookups)
			}
			if n := bundle.fake.Requests(fake.CRMUpsert); n != 0 && tt.before == nil {
				t.Errorf("%d upserts in create mode", n)
			}
			if n, _ := bundle.fake.Notification(sub.Ref + ":notify"); n.Deliveries != 1 {
				t.Errorf("%d notification deliveries, want 1", n.Deliveries)
			}
		})
	}

	// The post is written ahead as uncertain: a worker stopped (or killed)
	// while it is in flight never posts again without a look-up.
	t.Run("LooksUpAfterWorkerStoppedMidPost", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &setupOpts{CRMMode: lead.ModeCreate})
		bundle.fake.Script(fake.CRMCreate, fake.Fault{HangAfterApply: true})
		sub := bundle.submit(t, adaBody)
		testkit.Eventually(t, "the post to be applied", func() bool {
			_, ok := bundle.fake.CRM(sub.Ref)
			return ok
		})

		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience)
		defer cancel()
		if err := bundle.river.StopAndCancel(ctx); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if l := bundle.lead(t, sub.LeadID); l.CRMState != "uncertain" {
			t.Fatalf("lead crm_state %q after a stop mid-post, want uncertain", l.CRMState)
		}

		bundle.startWorker(t)
		got := bundle.waitFinished(t, sub.Key)
		rec := bundle.crmRecord(t, sub.Ref)
		requireCompleted(t, got, completedBody(sub.LeadID, rec.IDs[0], 85, "hot", true))
		if n := bundle.fake.Requests(fake.CRMCreate); n != 1 {
			t.Errorf("%d posts, want 1", n)
		}
		if n := bundle.fake.Requests(fake.CRMLookup); n != 1 {
			t.Errorf("%d look-ups, want 1", n)
		}
	})

	t.Run("RejectsOnClientError", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, &setupOpts{CRMMode: lead.ModeCreate})
		bundle.fake.Script(fake.CRMCreate, fake.Fault{Status: http.StatusBadRequest})
		sub := bundle.submit(t, adaBody)

		got := bundle.waitFinished(t, sub.Key)
		requireFailed(t, got, sub.LeadID, http.StatusUnprocessableEntity, "crm_rejected")
		if n := bundle.fake.Requests(fake.Notify); n != 0 {
			t.Errorf("%d notifications sent for a refused lead, want none", n)
		}
	})
}

// After a key expired, a retry is a new lead under the same reference: in
// create mode it looks the reference up before posting, so the CRM keeps one
// record.
func TestProcessLeadCreateModeAfterKeyExpired(t *testing.T) {
	t.Parallel()
	bundle := setup(t, &setupOpts{CRMMode: lead.ModeCreate})
	sub := bundle.submit(t, adaBody)
	bundle.waitFinished(t, sub.Key)
	bundle.exec(t, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE key = $1`, sub.Key)

	again := bundle.claim(t, sub.Key, adaBody)
	if again.Outcome != store.OutcomeClaimed || again.LeadID == sub.LeadID {
		t.Fatalf("claim after expiry: %s for lead %s, want claimed for a new lead", again.Outcome, again.LeadID)
	}
	got := bundle.waitFinished(t, sub.Key)
	rec := bundle.crmRecord(t, sub.Ref)
	if rec.Records != 1 {
		t.Fatalf("%d CRM records under the reference, want 1", rec.Records)
	}
	requireCompleted(t, got, completedBody(again.LeadID, rec.IDs[0], 85, "hot", true))
	if n := bundle.fake.Requests(fake.CRMCreate); n != 1 {
		t.Errorf("%d posts, want 1", n)
	}
	if n := bundle.fake.Requests(fake.CRMLookup); n != 1 {
		t.Errorf("%d look-ups, want 1", n)
	}
}
