package intake_test

import (
	"context"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/dbtest"
)

func TestStoreClaim(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentSameKeyOneLead", func(t *testing.T) {
		t.Parallel()
		_, pool := dbtest.New(t)
		var jobs sync.Map
		store := intake.NewStore(pool, func(ctx context.Context, tx pgx.Tx, leadID uuid.UUID) error {
			jobs.Store(leadID, true)
			_, err := tx.Exec(ctx, "SELECT 1")
			return err
		})
		sub, err := intake.DecodeSubmission([]byte(`{"email":"a@example.com","source":"website"}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		p := &intake.ClaimParams{ClientID: "acme", Key: "key-concurrent-1", ExternalRef: intake.ExternalRef("acme", "key-concurrent-1"), Submission: sub}
		const n = 50
		results := make([]*intake.ClaimResult, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { results[i], errs[i] = store.Claim(context.Background(), p) })
		}
		wg.Wait()
		claimed := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("claim %d: %v", i, errs[i])
			}
			if results[i].LeadID != results[0].LeadID {
				t.Fatalf("claim %d: lead %s, want %s", i, results[i].LeadID, results[0].LeadID)
			}
			if results[i].Outcome == intake.OutcomeClaimed {
				claimed++
			} else if results[i].Outcome != intake.OutcomeInProgress {
				t.Fatalf("claim %d: outcome %s", i, results[i].Outcome)
			}
		}
		if claimed != 1 {
			t.Fatalf("%d claims won, want 1", claimed)
		}
		var leads, keys int
		if err := pool.QueryRow(context.Background(), "SELECT (SELECT count(*) FROM leads), (SELECT count(*) FROM idempotency_keys)").Scan(&leads, &keys); err != nil {
			t.Fatal(err)
		}
		if leads != 1 || keys != 1 {
			t.Fatalf("leads=%d keys=%d, want 1 and 1", leads, keys)
		}
	})
}
