package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
	"github.com/leadintake/leadintake/store"
)

var hashKey = lead.HashKey("store-test-pii-hash-key-0123456789")

// claimedAs claims a new key for body with its email's HMAC, and returns
// its lead.
func claimedAs(t *testing.T, s *store.Store, body string) *store.Lead {
	t.Helper()
	p := claimParams(t, body)
	p.EmailHMAC = hashKey.Email(p.Payload.Lead.Email)
	res := claim(t, s, p)
	l, err := s.Lead(t.Context(), res.LeadID)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestErase(t *testing.T) {
	t.Parallel()
	const (
		ada = `{"email":"Ada@Example.com","source":"website","name":"Ada","phone":"+44 1","message":"hello",` +
			`"attribution":{"first":{"landing_page":"https://acme.example/landing?utm_campaign=spring-x","utm":{"campaign":"spring-x"},` +
			`"click_ids":{"gclid":"gclid-ada-1"}},"last":{"landing_page":"https://acme.example/contact-ada"}}}`
		other = `{"email":"grace@example.com","source":"website"}`
	)

	t.Run("ErasesEveryLeadOfTheAddress", func(t *testing.T) {
		t.Parallel()
		tx := dbtest.Tx(t)
		s, jobs := newStore(t, tx, "a")
		unfinished := claimedAs(t, s, ada)
		if unfinished.Lead.Attribution == nil || unfinished.Lead.Attribution.First.ClickIDs["gclid"] != "gclid-ada-1" {
			t.Fatalf("the lead before the erasure: %+v", unfinished.Lead)
		}
		finished := claimedAs(t, s, ada)
		kept := claimedAs(t, s, other)
		run, err := s.Lead(t.Context(), finished.ID)
		if err != nil {
			t.Fatal(err)
		}
		done := completed(run)
		if _, err := s.Finish(t.Context(), done); err != nil {
			t.Fatal(err)
		}

		callbacks := jobs.callbackCount()
		// Another spelling of the same address: lower-cased whole.
		erased, err := s.Erase(t.Context(), &store.EraseParams{
			ClientID: "a", EmailHMAC: hashKey.Email("ada@EXAMPLE.com"), By: cli, Retention: time.Hour,
		})
		if err != nil {
			t.Fatal(err)
		}
		if erased.Count != 2 || erased.Finished != 1 || jobs.callbackCount() != callbacks+1 {
			t.Fatalf("erased %+v, want 2 leads and the callback of the one it finished", erased)
		}
		for _, l := range []*store.Lead{unfinished, finished} {
			got, err := s.Lead(t.Context(), l.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Erased() || got.Lead.Email != "" || got.Lead.Attribution != nil || got.Enrichment != nil {
				t.Errorf("lead %s after the erasure: %+v", l.ID, got)
			}
			// Nothing of the submission stays anywhere in the row: its
			// attribution neither.
			var row string
			if err := tx.QueryRow(context.Background(), `SELECT row_to_json(l)::text FROM leads l WHERE id = $1`, l.ID).Scan(&row); err != nil {
				t.Fatal(err)
			}
			for _, personal := range []string{"Ada", "hello", "spring-x", "gclid-ada-1", "contact-ada", "acme.example"} {
				if strings.Contains(row, personal) {
					t.Errorf("lead %s after the erasure holds %q: %s", l.ID, personal, row)
				}
			}
		}
		op, err := s.Operation(t.Context(), "a", unfinished.Key)
		if err != nil || op.State != lead.KeyFailed || op.Response.Status != 422 {
			t.Fatalf("the unfinished key after the erasure: %+v %v", op, err)
		}
		var body struct {
			Error struct{ Code string } `json:"error"`
		}
		if err := json.Unmarshal(op.Response.Body, &body); err != nil || body.Error.Code != "erased" {
			t.Errorf("its response %s", op.Response.Body)
		}
		op, _ = s.Operation(t.Context(), "a", finished.Key)
		if string(op.Response.Body) != string(done.Response.Body) {
			t.Errorf("a finished key's response changed: %s", op.Response.Body)
		}
		if got, _ := s.Lead(t.Context(), kept.ID); got.Erased() || got.Lead.Email != "grace@example.com" {
			t.Errorf("another address's lead was erased: %+v", got)
		}
		// A later run stops at its first step.
		if err := s.Save(t.Context(), &run.Run, store.SaveParams{State: run.State}); err == nil {
			t.Error("a run saved a step of an erased lead")
		}
		records, err := s.Erasures(t.Context(), "a", hashKey.Email("ada@example.com"))
		if err != nil || len(records) != 1 || records[0].Erased != 2 || records[0].Via != store.ViaCLI || records[0].Actor != "cli" {
			t.Errorf("erasure records %+v %v", records, err)
		}
	})

	t.Run("RecordsRequestsThatMatchNothing", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, dbtest.Tx(t))
		claimedAs(t, s, ada)
		for _, client := range []string{"b", "a"} {
			email := "nobody@example.com"
			if client == "b" {
				email = "ada@example.com" // another client's address is another person's
			}
			erased, err := s.Erase(t.Context(), &store.EraseParams{ClientID: client, EmailHMAC: hashKey.Email(email), By: adminAPI})
			if err != nil || erased.Count != 0 {
				t.Fatalf("erase: %+v %v", erased, err)
			}
			if records, _ := s.Erasures(t.Context(), client, hashKey.Email(email)); len(records) != 1 {
				t.Errorf("%d records of a request that matched nothing, want 1", len(records))
			}
		}
	})

	t.Run("RetentionErasesFinishedLeads", func(t *testing.T) {
		t.Parallel()
		tx := dbtest.Tx(t)
		s, _ := newStore(t, tx)
		old, recent, open := claimedAs(t, s, ada), claimedAs(t, s, ada), claimedAs(t, s, other)
		for _, l := range []*store.Lead{old, recent} {
			run, err := s.Lead(t.Context(), l.ID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Finish(t.Context(), completed(run)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tx.Exec(context.Background(), `UPDATE leads SET finished_at = now() - interval '31 days' WHERE id = $1`, old.ID); err != nil {
			t.Fatal(err)
		}
		n, err := s.EraseFinishedBefore(t.Context(), time.Now().Add(-30*24*time.Hour), 100)
		if err != nil || n != 1 {
			t.Fatalf("erased %d, %v; want the one lead past its retention", n, err)
		}
		for l, want := range map[*store.Lead]bool{old: true, recent: false, open: false} {
			if got, _ := s.Lead(t.Context(), l.ID); got.Erased() != want {
				t.Errorf("lead erased %t, want %t", got.Erased(), want)
			}
		}
	})
}

// An erasure racing a retry of the same key, a key that failed on
// transient downstream failures (the retry re-opens it unless its lead is
// erased). The lead's row is held by the test while both queue for it, in
// either order. Erasure first: the re-open finds the lead erased, and the
// retry replays the stored answer. Retry first: the erasure finds the key
// re-opened, and finishes it as erased. Either way no key is left
// processing with an erased lead.
func TestErasureRacesARetry(t *testing.T) {
	t.Parallel()
	const ada = `{"email":"ada@example.com","source":"website","name":"Ada"}`

	for _, eraseFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "ErasureFirst", false: "RetryFirst"}[eraseFirst], func(t *testing.T) {
			t.Parallel()
			_, pool := dbtest.New(t)
			s, _ := newStore(t, pool)
			p := claimParams(t, ada)
			p.EmailHMAC = hashKey.Email("ada@example.com")
			first := claim(t, s, p)
			run, err := s.Lead(t.Context(), first.LeadID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Finish(t.Context(), finishOf(run, lead.KeyFailed,
				response.NewFailed(run.ID.String(), response.CodeDownstreamUnavailable, "x"), response.CodeDownstreamUnavailable, run.State)); err != nil {
				t.Fatal(err)
			}

			// The test holds the lead's row.
			hold, err := pool.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer hold.Rollback(context.WithoutCancel(t.Context()))
			if _, err := hold.Exec(t.Context(), `SELECT FROM leads WHERE id = $1 FOR UPDATE`, first.LeadID); err != nil {
				t.Fatal(err)
			}
			waiting := func(n int) {
				t.Helper()
				testkit.Eventually(t, fmt.Sprintf("%d transactions waiting for a lock", n), func() bool {
					var got int
					err := pool.QueryRow(t.Context(), `
SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got)
					return err == nil && got == n
				})
			}
			type result struct {
				erased *store.Erased
				retry  *store.ClaimResult
				err    error
			}
			results := make(chan result, 2)
			erase := func() {
				e, err := s.Erase(t.Context(), &store.EraseParams{
					ClientID: "a", EmailHMAC: p.EmailHMAC, By: cli, Retention: time.Hour,
				})
				results <- result{erased: e, err: err}
			}
			retry := func() {
				r, err := s.Claim(t.Context(), p)
				results <- result{retry: r, err: err}
			}
			if eraseFirst {
				go erase()
				waiting(1)
				go retry()
			} else {
				go retry()
				waiting(1)
				go erase()
			}
			waiting(2)
			if err := hold.Rollback(t.Context()); err != nil {
				t.Fatal(err)
			}
			var erased *store.Erased
			var retried *store.ClaimResult
			for range 2 {
				r := <-results
				if r.err != nil {
					t.Fatal(r.err)
				}
				if r.erased != nil {
					erased = r.erased
				} else {
					retried = r.retry
				}
			}

			if erased.Count != 1 {
				t.Errorf("erased %d leads, want 1", erased.Count)
			}
			op, err := s.Operation(t.Context(), "a", p.Key)
			if err != nil {
				t.Fatal(err)
			}
			l, err := s.Lead(t.Context(), first.LeadID)
			if err != nil || !l.Erased() {
				t.Fatalf("the lead after both: %+v %v", l, err)
			}
			wantOutcome, wantStatus := store.OutcomeReplayed, response.CodeDownstreamUnavailable.Status()
			if !eraseFirst {
				wantOutcome, wantStatus = store.OutcomeReopened, http.StatusUnprocessableEntity
			}
			if retried.Outcome != wantOutcome || op.State != lead.KeyFailed || op.Response.Status != wantStatus {
				t.Errorf("retry %s, key %s %d; want %s and a failed key with %d",
					retried.Outcome, op.State, op.Response.Status, wantOutcome, wantStatus)
			}
			// The replay's answer is the stored one, whatever the order.
			if again := claim(t, s, p); again.Outcome != store.OutcomeReplayed || again.Response.Status != wantStatus {
				t.Errorf("a later retry: %s %d, want replayed %d", again.Outcome, again.Response.Status, wantStatus)
			}
		})
	}
}
