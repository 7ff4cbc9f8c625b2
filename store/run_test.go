package store_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

// finishOf is the finish of l, read by the run that finishes it, as to with
// a response and the lead's state st.
func finishOf(l *store.Lead, to lead.KeyState, resp response.Final, code response.Code, st lead.State) *store.Finish {
	run := l.Run
	return &store.Finish{
		LeadID: l.ID, ClientID: l.ClientID, Key: l.Key, From: l.KeyState.State, Run: &run,
		To: to, Response: resp, FailureCode: code, Retention: time.Hour,
		Result: &store.Result{State: st, Score: 40, Tier: lead.TierCold},
	}
}

// completed is the finish of l as a completed lead.
func completed(l *store.Lead) *store.Finish {
	s := l.State
	s.Enrichment, s.CRM, s.CRMID, s.Notification = lead.EnrichmentNoData, lead.CRMAccepted, "crm_1", lead.NotificationSent
	return finishOf(l, lead.KeyCompleted,
		response.NewCompleted(&response.Completed{LeadID: l.ID.String(), CRMID: "crm_1", Score: 40, Tier: "cold", Notified: true}), "", s)
}

// toReconciliation is the finish of l that leaves its key awaiting
// reconciliation with the lead's state st.
func toReconciliation(l *store.Lead, st lead.State) *store.Finish {
	return finishOf(l, lead.KeyNeedsReconciliation, response.Final{}, "", st)
}

// claimed claims a new key on s and returns its lead, read without a run.
func claimed(t *testing.T, s *store.Store) *store.Lead {
	t.Helper()
	res := claim(t, s, claimParams(t, validBody))
	l, err := s.Lead(t.Context(), res.LeadID)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestRuns(t *testing.T) {
	t.Parallel()

	t.Run("SaveRecordsTheState", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		l, err := s.Lead(t.Context(), claimed(t, s).ID)
		if err != nil {
			t.Fatal(err)
		}
		want := lead.State{Enrichment: lead.EnrichmentData, CRM: lead.CRMUncertain, EnrichmentFailures: 1,
			CRMDestination: "acme-hubspot", CRMPrepared: "person_7", ChannelsSet: true}
		want.Channels[0] = lead.Channel{Name: "sales-slack", State: lead.ChannelUncertain, Failures: 2, Receipt: "1700000000.000100", Since: 1700000000}
		want.Channels[1] = lead.Channel{Name: "sales-mail", State: lead.ChannelSent}
		if err := s.Save(t.Context(), &l.Run, store.SaveParams{State: want, Enrichment: json.RawMessage(`{"industry":"retail"}`), Durable: true}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Lead(t.Context(), l.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != want || string(got.Enrichment) != `{"industry": "retail"}` {
			t.Fatalf("saved %+v %s, read back %+v %s", want, `{"industry":"retail"}`, got.State, got.Enrichment)
		}
	})

	t.Run("OneOfTwoRunsActs", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		id := claimed(t, s).ID
		// Two runs read the lead; the one that saves first takes it.
		first, err := s.Lead(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		second, err := s.Lead(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Save(t.Context(), &second.Run, store.SaveParams{State: lead.State{CRM: lead.CRMPending, Enrichment: lead.EnrichmentNoData}}); err != nil {
			t.Fatalf("first save of the second run: %v", err)
		}
		if err := s.Save(t.Context(), &first.Run, store.SaveParams{State: lead.State{CRM: lead.CRMAccepted}}); !errors.Is(err, store.ErrRunTaken) {
			t.Fatalf("save of the run that came second: %v, want ErrRunTaken", err)
		}
		if done, err := s.Finish(t.Context(), completed(first)); err != nil || done.Applied {
			t.Fatalf("finish of the run that came second: %+v, %v; want nothing done", done, err)
		}

		// A run that starts later takes the lead from the one that holds
		// it, with its first save.
		third, err := s.Lead(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Save(t.Context(), &third.Run, store.SaveParams{State: third.State}); err != nil {
			t.Fatalf("first save of a later run: %v", err)
		}
		if err := s.Save(t.Context(), &second.Run, store.SaveParams{State: lead.State{CRM: lead.CRMAccepted}}); !errors.Is(err, store.ErrRunTaken) {
			t.Fatalf("save of the run that held the lead: %v, want ErrRunTaken", err)
		}
		if done, err := s.Finish(t.Context(), completed(third)); err != nil || !done.Applied {
			t.Fatalf("finish of the run that holds the lead: %+v, %v", done, err)
		}
	})

	t.Run("FinishIsOnce", func(t *testing.T) {
		t.Parallel()
		s, jobs := newStore(t, dbtest.Tx(t), "a")
		l, err := s.Lead(t.Context(), claimed(t, s).ID)
		if err != nil {
			t.Fatal(err)
		}
		if done, err := s.Finish(t.Context(), completed(l)); err != nil || !done.Applied {
			t.Fatalf("finish: %+v, %v", done, err)
		}
		failed := finishOf(l, lead.KeyFailed, response.NewFailed(l.ID.String(), response.CodeDownstreamUnavailable, "x"),
			response.CodeDownstreamUnavailable, l.State)
		if done, err := s.Finish(t.Context(), failed); err != nil || done.Applied {
			t.Fatalf("second finish: %+v, %v; want nothing done", done, err)
		}
		if n := jobs.callbackCount(); n != 1 {
			t.Fatalf("%d callbacks enqueued, want 1: one per finish that happened", n)
		}
		op, err := s.Operation(t.Context(), "a", l.Key)
		if err != nil || op.State != lead.KeyCompleted || op.Response.Status != http.StatusCreated || op.ExpiresAt == nil {
			t.Fatalf("operation: %+v, %v", op, err)
		}
	})

	t.Run("FailingCallbackRollsTheFinishBack", func(t *testing.T) {
		t.Parallel()
		s, jobs := newStore(t, dbtest.Tx(t), "a")
		l, err := s.Lead(t.Context(), claimed(t, s).ID)
		if err != nil {
			t.Fatal(err)
		}
		jobs.failCallbacks.Store(true)
		if _, err := s.Finish(t.Context(), completed(l)); !errors.Is(err, errQueue) {
			t.Fatalf("finish: %v, want the callback's enqueue error", err)
		}
		if op, _ := s.Operation(t.Context(), "a", l.Key); op.State != lead.KeyProcessing {
			t.Fatalf("key %s after a rolled-back finish", op.State)
		}
	})

	t.Run("ReconciliationAndResume", func(t *testing.T) {
		t.Parallel()
		s, jobs := newStore(t, dbtest.Tx(t))
		l, err := s.Lead(t.Context(), claimed(t, s).ID)
		if err != nil {
			t.Fatal(err)
		}
		st := lead.State{Enrichment: lead.EnrichmentData, CRM: lead.CRMUncertain}
		if done, err := s.Finish(t.Context(), toReconciliation(l, st)); err != nil || !done.Applied {
			t.Fatalf("to reconciliation: %+v, %v", done, err)
		}
		refs, err := s.AwaitingReconciliation(t.Context(), 10)
		if err != nil || len(refs) != 1 || refs[0].LeadID != l.ID {
			t.Fatalf("awaiting reconciliation: %+v, %v", refs, err)
		}
		now, err := s.Lead(t.Context(), l.ID)
		if err != nil {
			t.Fatal(err)
		}
		resumed, err := s.Resume(t.Context(), now, lead.Settle(now.State, true, "crm_7"))
		if err != nil || !resumed {
			t.Fatalf("resume: %t, %v", resumed, err)
		}
		jobID := jobs.ids.Load()
		if again, err := s.Resume(t.Context(), now, lead.Settle(now.State, false, "")); err != nil || again {
			t.Fatalf("second resume: %t, %v; want nothing done", again, err)
		}
		after, err := s.Lead(t.Context(), l.ID)
		if err != nil {
			t.Fatal(err)
		}
		if after.KeyState.State != lead.KeyProcessing || after.State.CRM != lead.CRMAccepted || after.State.CRMID != "crm_7" || *after.JobID != jobID {
			t.Fatalf("after resume: %+v", after)
		}
	})

	t.Run("FailedLookUpsGoToTheBack", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		var refs []store.KeyRef
		for range 3 {
			l, err := s.Lead(t.Context(), claimed(t, s).ID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Finish(t.Context(), toReconciliation(l, l.State)); err != nil {
				t.Fatal(err)
			}
			refs = append(refs, store.KeyRef{ClientID: "a", Key: l.Key, LeadID: l.ID})
		}
		if err := s.PostponeReconciliation(t.Context(), refs[0]); err != nil {
			t.Fatal(err)
		}
		got, err := s.AwaitingReconciliation(t.Context(), 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || got[2] != refs[0] {
			t.Fatalf("order %v, want the postponed key %v last", got, refs[0])
		}
	})
}
