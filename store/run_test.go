package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

// completed is the finish of l as a completed lead.
func completed(l *store.Lead) *store.Finish {
	s := l.State
	s.Enrichment, s.CRM, s.CRMID, s.Notification = lead.EnrichmentNoData, lead.CRMAccepted, "crm_1", lead.NotificationSent
	return &store.Finish{
		KeyState: store.KeyCompleted, State: s, Score: 40, Tier: lead.TierCold, Retention: time.Hour,
		Response: response.NewCompleted(&response.Completed{LeadID: l.ID.String(), CRMID: "crm_1", Score: 40, Tier: "cold", Notified: true}),
	}
}

// claimed claims a new key on s and returns its lead, read without a run.
func claimed(t *testing.T, s *store.Store) *store.Lead {
	t.Helper()
	var jobs atomic.Int64
	res := claim(t, s, claimParams(t, validBody, &jobs))
	l, err := s.LoadLead(t.Context(), res.LeadID)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestRuns(t *testing.T) {
	t.Parallel()

	t.Run("SaveRecordsTheState", func(t *testing.T) {
		t.Parallel()
		s := store.New(dbtest.Tx(t))
		l, err := s.StartRun(t.Context(), claimed(t, s).ID)
		if err != nil {
			t.Fatal(err)
		}
		want := lead.State{Enrichment: lead.EnrichmentData, CRM: lead.CRMUncertain, EnrichmentFailures: 1, NotificationFailures: 2}
		if err := s.Save(t.Context(), &l.Run, want, json.RawMessage(`{"industry":"retail"}`), true); err != nil {
			t.Fatal(err)
		}
		got, err := s.LoadLead(t.Context(), l.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != want || string(got.Enrichment) != `{"industry": "retail"}` {
			t.Fatalf("saved %+v %s, read back %+v %s", want, `{"industry":"retail"}`, got.State, got.Enrichment)
		}
	})

	t.Run("OneOfTwoRunsActs", func(t *testing.T) {
		t.Parallel()
		s := store.New(dbtest.Tx(t))
		id := claimed(t, s).ID
		// Two runs read the lead; the one that saves first takes it.
		first, err := s.StartRun(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		second, err := s.StartRun(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Save(t.Context(), &second.Run, lead.State{CRM: lead.CRMPending, Enrichment: lead.EnrichmentNoData}, nil, false); err != nil {
			t.Fatalf("first save of the second run: %v", err)
		}
		if err := s.Save(t.Context(), &first.Run, lead.State{CRM: lead.CRMAccepted}, nil, false); !errors.Is(err, store.ErrRunTaken) {
			t.Fatalf("save of the run that came second: %v, want ErrRunTaken", err)
		}
		if done, err := s.Finish(t.Context(), first.Run, completed(first), nil); err != nil || done.Applied {
			t.Fatalf("finish of the run that came second: %+v, %v; want nothing done", done, err)
		}

		// A run that starts later takes the lead from the one that holds
		// it, with its first save.
		third, err := s.StartRun(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Save(t.Context(), &third.Run, third.State, nil, false); err != nil {
			t.Fatalf("first save of a later run: %v", err)
		}
		if err := s.Save(t.Context(), &second.Run, lead.State{CRM: lead.CRMAccepted}, nil, false); !errors.Is(err, store.ErrRunTaken) {
			t.Fatalf("save of the run that held the lead: %v, want ErrRunTaken", err)
		}
		if done, err := s.Finish(t.Context(), third.Run, completed(third), nil); err != nil || !done.Applied {
			t.Fatalf("finish of the run that holds the lead: %+v, %v", done, err)
		}
	})

	t.Run("FinishIsOnce", func(t *testing.T) {
		t.Parallel()
		s := store.New(dbtest.Tx(t))
		l, err := s.StartRun(t.Context(), claimed(t, s).ID)
		if err != nil {
			t.Fatal(err)
		}
		ran := 0
		inTx := func(pgx.Tx, *store.Finished) error { ran++; return nil }
		if done, err := s.Finish(t.Context(), l.Run, completed(l), inTx); err != nil || !done.Applied {
			t.Fatalf("finish: %+v, %v", done, err)
		}
		failed := &store.Finish{
			KeyState: store.KeyFailed, FailureCode: response.CodeDownstreamUnavailable, Retention: time.Hour,
			Response: response.NewFailed(l.ID.String(), response.CodeDownstreamUnavailable, "x"), State: l.State,
		}
		if done, err := s.Finish(t.Context(), l.Run, failed, inTx); err != nil || done.Applied {
			t.Fatalf("second finish: %+v, %v; want nothing done", done, err)
		}
		if ran != 2 {
			t.Fatalf("inTx ran %d times, want 2: it runs whether or not there was anything to finish", ran)
		}
		op, err := s.Operation(t.Context(), "a", l.Key)
		if err != nil || op.State != store.KeyCompleted || op.Response.Status != http.StatusCreated || op.ExpiresAt == nil {
			t.Fatalf("operation: %+v, %v", op, err)
		}
	})

	t.Run("FailingInTxRollsTheFinishBack", func(t *testing.T) {
		t.Parallel()
		s := store.New(dbtest.Tx(t))
		l, err := s.StartRun(t.Context(), claimed(t, s).ID)
		if err != nil {
			t.Fatal(err)
		}
		errJob := errors.New("job completion failed")
		if _, err := s.Finish(t.Context(), l.Run, completed(l), func(pgx.Tx, *store.Finished) error { return errJob }); !errors.Is(err, errJob) {
			t.Fatalf("finish: %v, want the completion's error", err)
		}
		if op, _ := s.Operation(t.Context(), "a", l.Key); op.State != store.KeyProcessing {
			t.Fatalf("key %s after a rolled-back finish", op.State)
		}
	})

	t.Run("ReconciliationAndResume", func(t *testing.T) {
		t.Parallel()
		s := store.New(dbtest.Tx(t))
		l, err := s.StartRun(t.Context(), claimed(t, s).ID)
		if err != nil {
			t.Fatal(err)
		}
		st := lead.State{Enrichment: lead.EnrichmentData, CRM: lead.CRMUncertain}
		if done, err := s.Finish(t.Context(), l.Run, &store.Finish{KeyState: store.KeyNeedsReconciliation, State: st}, nil); err != nil || !done.Applied {
			t.Fatalf("to reconciliation: %+v, %v", done, err)
		}
		refs, err := s.AwaitingReconciliation(t.Context(), 10)
		if err != nil || len(refs) != 1 || refs[0].LeadID != l.ID {
			t.Fatalf("awaiting reconciliation: %+v, %v", refs, err)
		}
		var jobID int64 = 4242
		enqueue := func(context.Context, pgx.Tx, uuid.UUID) (int64, error) { return jobID, nil }
		now, err := s.LoadLead(t.Context(), l.ID)
		if err != nil {
			t.Fatal(err)
		}
		resumed, err := s.Resume(t.Context(), now.Run, lead.Settle(now.State, true, "crm_7"), enqueue)
		if err != nil || !resumed {
			t.Fatalf("resume: %t, %v", resumed, err)
		}
		if again, err := s.Resume(t.Context(), now.Run, lead.Settle(now.State, false, ""), enqueue); err != nil || again {
			t.Fatalf("second resume: %t, %v; want nothing done", again, err)
		}
		after, err := s.LoadLead(t.Context(), l.ID)
		if err != nil {
			t.Fatal(err)
		}
		if after.KeyState != store.KeyProcessing || after.State.CRM != lead.CRMAccepted || after.State.CRMID != "crm_7" || *after.JobID != jobID {
			t.Fatalf("after resume: %+v", after)
		}
	})

	t.Run("FailedLookUpsGoToTheBack", func(t *testing.T) {
		t.Parallel()
		s := store.New(dbtest.Tx(t))
		var refs []store.KeyRef
		for range 3 {
			l, err := s.StartRun(t.Context(), claimed(t, s).ID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Finish(t.Context(), l.Run, &store.Finish{KeyState: store.KeyNeedsReconciliation, State: l.State}, nil); err != nil {
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
