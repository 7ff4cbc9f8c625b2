package store_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

// failedUnavailable claims a key on s and finishes it failed with
// downstream_unavailable, as the worker does at the end of its attempts.
func failedUnavailable(t *testing.T, s *store.Store) *store.Lead {
	t.Helper()
	l := claimed(t, s)
	f := finishOf(l, lead.KeyFailed, response.NewFailed(l.ID.String(), response.CodeDownstreamUnavailable, "the CRM did not answer"),
		response.CodeDownstreamUnavailable, l.State)
	if done, err := s.Finish(t.Context(), f); err != nil || !done.Applied {
		t.Fatalf("finish: %+v %v", done, err)
	}
	return l
}

// auditRows returns the audit as the store lists it, oldest first.
func auditRows(t *testing.T, s *store.Store) []store.AuditEntry {
	t.Helper()
	entries, err := s.AuditLog(t.Context(), store.AuditFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for i, j := 0, len(entries)-1; i < j; i, j = i+1, j-1 {
		entries[i], entries[j] = entries[j], entries[i]
	}
	return entries
}

// Every operator action writes its row of the audit in its own
// transaction: who, through what, what, which keys, how many; a dry run,
// an action that changed nothing (a settle) or showed nothing (an enquiry
// of no key) writes none; without who asks nothing is done.
func TestAudit(t *testing.T) {
	t.Parallel()
	console := &store.Who{Name: "alice", Via: store.ViaConsole}

	t.Run("ReleaseRecordsWhatItReleasedAndLeft", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		p := claimParams(t, validBody)
		quarantine(t, s, p, "honeypot")
		other := claimed(t, s)
		done, err := s.Release(t.Context(), &store.ReleaseParams{ClientID: "a", Keys: []string{p.Key, other.Key}, By: console})
		if err != nil || len(done.Keys) != 1 || len(done.Skipped) != 1 {
			t.Fatalf("release: %+v %v", done, err)
		}
		// A release of nothing that qualifies is recorded too.
		if _, err := s.Release(t.Context(), &store.ReleaseParams{ClientID: "a", Keys: []string{p.Key}, By: cli}); err != nil {
			t.Fatal(err)
		}
		rows := auditRows(t, s)
		if len(rows) != 2 {
			t.Fatalf("%d audit rows, want 2: %+v", len(rows), rows)
		}
		first := rows[0]
		if first.Actor != "alice" || first.Via != store.ViaConsole || first.Action != store.ActionRelease || first.ClientID != "a" ||
			first.Count != 1 || len(first.Keys) != 1 || first.Keys[0].Key != p.Key || time.Since(first.At) > time.Minute {
			t.Errorf("the release's row: %+v", first)
		}
		var detail struct{ Skipped []store.Skipped }
		if err := json.Unmarshal(first.Detail, &detail); err != nil || len(detail.Skipped) != 1 || detail.Skipped[0].Key != other.Key ||
			detail.Skipped[0].State != string(lead.KeyProcessing) {
			t.Errorf("the release's detail %s (%v)", first.Detail, err)
		}
		if second := rows[1]; second.Actor != "cli" || second.Count != 0 || len(second.Keys) != 0 {
			t.Errorf("the second release's row: %+v", second)
		}
	})

	t.Run("RedriveRecordsButNotItsDryRun", func(t *testing.T) {
		t.Parallel()
		tx := dbtest.Tx(t)
		s, _ := newStore(t, tx)
		var keys []string
		for i := range 3 {
			l := failedUnavailable(t, s)
			// One transaction's now() is one time: the finishes are set
			// a minute apart, the first first.
			if _, err := tx.Exec(t.Context(), `UPDATE idempotency_keys SET finished_at = now() - $2 * interval '1 minute' WHERE key = $1`, l.Key, 3-i); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, l.Key)
		}
		dry, err := s.Redrive(t.Context(), &store.RedriveParams{Outcome: response.CodeDownstreamUnavailable, Limit: 2, DryRun: true})
		if err != nil || len(dry.Keys) != 2 || dry.Left != 1 {
			t.Fatalf("dry run: %+v %v", dry, err)
		}
		if rows := auditRows(t, s); len(rows) != 0 {
			t.Fatalf("a dry run was recorded: %+v", rows)
		}
		// Bounded: the two that finished first, one left for the next.
		done, err := s.Redrive(t.Context(), &store.RedriveParams{ClientID: "a", Outcome: response.CodeDownstreamUnavailable, Since: time.Hour, Limit: 2, By: console})
		if err != nil || len(done.Keys) != 2 || done.Keys[0].Key != keys[0] || done.Keys[1].Key != keys[1] || done.Left != 1 {
			t.Fatalf("redrive: %+v %v", done, err)
		}
		next, err := s.Redrive(t.Context(), &store.RedriveParams{Outcome: response.CodeDownstreamUnavailable, Limit: 2, By: cli})
		if err != nil || len(next.Keys) != 1 || next.Keys[0].Key != keys[2] || next.Left != 0 {
			t.Fatalf("the next redrive: %+v %v", next, err)
		}
		rows := auditRows(t, s)
		if len(rows) != 2 || rows[0].Actor != "alice" || rows[0].Action != store.ActionRedrive || rows[0].Count != 2 || len(rows[0].Keys) != 2 ||
			rows[1].Actor != "cli" || rows[1].Count != 1 || rows[1].ClientID != "" {
			t.Fatalf("audit %+v", rows)
		}
		var detail map[string]any
		if err := json.Unmarshal(rows[0].Detail, &detail); err != nil || detail["outcome"] != "downstream_unavailable" ||
			detail["since_seconds"] != 3600.0 || detail["left"] != 1.0 {
			t.Errorf("the redrive's detail %s (%v)", rows[0].Detail, err)
		}
	})

	t.Run("SettleRecordsOnlyWhatResumed", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		l := claimed(t, s)
		if done, err := s.Finish(t.Context(), toReconciliation(l, lead.State{CRM: lead.CRMUncertain})); err != nil || !done.Applied {
			t.Fatalf("to reconciliation: %+v %v", done, err)
		}
		now, err := s.Lead(t.Context(), l.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := s.Settle(t.Context(), now, lead.Settle(now.State, true, "crm_42"), console); err != nil || !ok {
			t.Fatalf("settle: %t %v", ok, err)
		}
		if ok, err := s.Settle(t.Context(), now, lead.Settle(now.State, false, ""), console); err != nil || ok {
			t.Fatalf("second settle: %t %v, want nothing done", ok, err)
		}
		rows := auditRows(t, s)
		if len(rows) != 1 || rows[0].Action != store.ActionSettle || rows[0].Keys[0].Key != l.Key || string(rows[0].Detail) != `{"found": true, "crm_id": "crm_42"}` {
			t.Fatalf("audit %+v", rows)
		}
	})

	t.Run("EnquiryRecordsEachLook", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		l := claimed(t, s)
		e, err := s.Enquiry(t.Context(), "a", l.Key, console)
		if err != nil || e.LeadID != l.ID || !json.Valid(e.Submission) {
			t.Fatalf("enquiry: %+v %v", e, err)
		}
		if _, err := s.Enquiry(t.Context(), "a", testkit.NewKey(), console); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("enquiry of no key: %v, want ErrNotFound", err)
		}
		if _, err := s.QuarantinedEnquiry(t.Context(), "a", l.Key, cli); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("quarantined enquiry of a key not quarantined: %v, want ErrNotFound", err)
		}
		rows := auditRows(t, s)
		if len(rows) != 1 || rows[0].Action != store.ActionShowEnquiry || rows[0].Actor != "alice" || rows[0].Keys[0].Key != l.Key {
			t.Fatalf("audit %+v", rows)
		}
		for _, row := range rows {
			if b, _ := json.Marshal(row); containsAny(string(b), "ada@example.com", "Lovelace") {
				t.Errorf("an audit row holds personal data: %s", b)
			}
		}
	})

	t.Run("NothingWithoutWhoAsks", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		p := claimParams(t, validBody)
		quarantine(t, s, p, "honeypot")
		failed := failedUnavailable(t, s)
		for name, err := range map[string]error{
			"release": second(s.Release(t.Context(), &store.ReleaseParams{ClientID: "a", Keys: []string{p.Key}})),
			"redrive": second(s.Redrive(t.Context(), &store.RedriveParams{ClientID: "a", Keys: []string{failed.Key}})),
			"erase":   second(s.Erase(t.Context(), &store.EraseParams{ClientID: "a", EmailHMAC: hashKey.Email("ada@example.com")})),
			"enquiry": second(s.Enquiry(t.Context(), "a", p.Key, &store.Who{})),
			"unknown": second(s.Enquiry(t.Context(), "a", p.Key, &store.Who{Name: "x", Via: "telepathy"})),
		} {
			if err == nil {
				t.Errorf("%s without who asks: no error", name)
			}
		}
		if op, _ := s.Operation(t.Context(), "a", p.Key); op.State != lead.KeyQuarantined {
			t.Errorf("the quarantined key is %s", op.State)
		}
		if op, _ := s.Operation(t.Context(), "a", failed.Key); op.State != lead.KeyFailed {
			t.Errorf("the failed key is %s", op.State)
		}
		if rows := auditRows(t, s); len(rows) != 0 {
			t.Errorf("audit %+v", rows)
		}
	})

	// The row is written by the action's transaction: when it cannot be
	// written, the action does not happen either.
	t.Run("NoActionWithoutItsRow", func(t *testing.T) {
		t.Parallel()
		tx := dbtest.Tx(t)
		s, _ := newStore(t, tx)
		p := claimParams(t, validBody)
		quarantine(t, s, p, "honeypot")
		failed := failedUnavailable(t, s)
		if _, err := tx.Exec(t.Context(), `
CREATE FUNCTION pg_temp.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'audit refused'; END $$;
CREATE TRIGGER refuse BEFORE INSERT ON audit FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse()`); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Release(t.Context(), &store.ReleaseParams{ClientID: "a", Keys: []string{p.Key}, By: console}); err == nil {
			t.Error("a release whose row failed succeeded")
		}
		if _, err := s.Redrive(t.Context(), &store.RedriveParams{ClientID: "a", Keys: []string{failed.Key}, By: console}); err == nil {
			t.Error("a redrive whose row failed succeeded")
		}
		if _, err := s.Erase(t.Context(), &store.EraseParams{ClientID: "a", EmailHMAC: hashKey.Email("ada@example.com"), By: console}); err == nil {
			t.Error("an erasure whose row failed succeeded")
		}
		if _, err := s.Enquiry(t.Context(), "a", p.Key, console); err == nil {
			t.Error("an enquiry whose look could not be recorded was shown")
		}
		if op, _ := s.Operation(t.Context(), "a", p.Key); op.State != lead.KeyQuarantined {
			t.Errorf("the quarantined key is %s", op.State)
		}
		if op, _ := s.Operation(t.Context(), "a", failed.Key); op.State != lead.KeyFailed {
			t.Errorf("the failed key is %s", op.State)
		}
		var erased int
		if err := tx.QueryRow(t.Context(), `SELECT count(*) FROM leads WHERE erased_at IS NOT NULL`).Scan(&erased); err != nil || erased != 0 {
			t.Errorf("%d leads erased (%v)", erased, err)
		}
	})
}

func second[T any](_ T, err error) error { return err }

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
