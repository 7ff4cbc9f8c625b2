package intake_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/dbtest"
)

func TestStoreClaim(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		pool *pgxpool.Pool
		// enqueued records the leads whose job was inserted in a claim.
		enqueued *sync.Map
		params   *intake.ClaimParams
	}
	// setup returns a store whose enqueue fails with enqueueErr, if set,
	// and otherwise records the lead in a real statement of the claim's
	// transaction.
	setup := func(t *testing.T, enqueueErr error) (*intake.Store, *testBundle) {
		t.Helper()
		_, pool := dbtest.New(t)
		bundle := &testBundle{pool: pool, enqueued: &sync.Map{}}
		store := intake.NewStore(pool, func(ctx context.Context, tx pgx.Tx, leadID uuid.UUID) error {
			if enqueueErr != nil {
				return enqueueErr
			}
			bundle.enqueued.Store(leadID, true)
			_, err := tx.Exec(ctx, "SELECT 1")
			return err
		})
		sub, err := intake.DecodeSubmission([]byte(validBody), nil)
		if err != nil {
			t.Fatal(err)
		}
		key := newKey()
		bundle.params = &intake.ClaimParams{ClientID: "a", Key: key, ExternalRef: intake.ExternalRef("a", key), Submission: sub}
		return store, bundle
	}
	enqueuedCount := func(m *sync.Map) int {
		n := 0
		m.Range(func(any, any) bool { n++; return true })
		return n
	}

	t.Run("ConcurrentSameKeyOneLead", func(t *testing.T) {
		t.Parallel()
		store, bundle := setup(t, nil)
		const n = 50
		results := make([]*intake.ClaimResult, n)
		errs := make([]error, n)
		together(n, func(i int) { results[i], errs[i] = store.Claim(context.Background(), bundle.params) })

		claimed := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("claim %d: %v", i, errs[i])
			}
			if results[i].LeadID != results[0].LeadID {
				t.Fatalf("claim %d: lead %s, want %s", i, results[i].LeadID, results[0].LeadID)
			}
			switch results[i].Outcome {
			case intake.OutcomeClaimed:
				claimed++
			case intake.OutcomeInProgress:
			default:
				t.Fatalf("claim %d: outcome %s", i, results[i].Outcome)
			}
		}
		if claimed != 1 {
			t.Fatalf("%d claims won, want 1", claimed)
		}
		if n := enqueuedCount(bundle.enqueued); n != 1 {
			t.Fatalf("%d jobs enqueued, want 1", n)
		}
		var leads, keys int
		if err := bundle.pool.QueryRow(context.Background(),
			"SELECT (SELECT count(*) FROM leads), (SELECT count(*) FROM idempotency_keys)").Scan(&leads, &keys); err != nil {
			t.Fatal(err)
		}
		if leads != 1 || keys != 1 {
			t.Fatalf("leads=%d keys=%d, want 1 and 1", leads, keys)
		}
	})

	t.Run("EnqueueFailureLeavesNothing", func(t *testing.T) {
		t.Parallel()
		errQueue := errors.New("queue refused")
		failing, bundle := setup(t, errQueue)
		if _, err := failing.Claim(context.Background(), bundle.params); !errors.Is(err, errQueue) {
			t.Fatalf("claim: %v, want the enqueue's error", err)
		}
		var leads, keys int
		if err := bundle.pool.QueryRow(context.Background(),
			"SELECT (SELECT count(*) FROM leads), (SELECT count(*) FROM idempotency_keys)").Scan(&leads, &keys); err != nil {
			t.Fatal(err)
		}
		if leads != 0 || keys != 0 {
			t.Fatalf("leads=%d keys=%d after a failed enqueue, want none", leads, keys)
		}

		// The key is still free.
		store := intake.NewStore(bundle.pool, func(context.Context, pgx.Tx, uuid.UUID) error { return nil })
		res, err := store.Claim(context.Background(), bundle.params)
		if err != nil || res.Outcome != intake.OutcomeClaimed {
			t.Fatalf("claim after the failure: %+v, %v; want claimed", res, err)
		}
	})

	t.Run("OperationNotFound", func(t *testing.T) {
		t.Parallel()
		store, bundle := setup(t, nil)
		if _, err := store.Claim(context.Background(), bundle.params); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Operation(context.Background(), "b", bundle.params.Key); !errors.Is(err, intake.ErrNotFound) {
			t.Fatalf("another client's key: %v, want ErrNotFound", err)
		}
		if _, err := store.Operation(context.Background(), "a", newKey()); !errors.Is(err, intake.ErrNotFound) {
			t.Fatalf("unknown key: %v, want ErrNotFound", err)
		}
		op, err := store.Operation(context.Background(), "a", bundle.params.Key)
		if err != nil || op.State != intake.StateProcessing {
			t.Fatalf("own key: %+v, %v", op, err)
		}
	})
}

func TestIsUnavailable(t *testing.T) {
	t.Parallel()

	pgErr := func(code string) error { return fmt.Errorf("claim: %w", &pgconn.PgError{Code: code}) }
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("claim: begin: %w", context.DeadlineExceeded), true},
		{errors.New("dial tcp 127.0.0.1:5432: connect: connection refused"), true},
		{pgErr("08006"), true},  // connection failure
		{pgErr("40001"), true},  // serialization failure
		{pgErr("40P01"), true},  // deadlock
		{pgErr("53300"), true},  // too many connections
		{pgErr("57P01"), true},  // admin shutdown
		{pgErr("57014"), true},  // query cancelled
		{pgErr("23505"), false}, // unique violation
		{pgErr("23514"), false}, // check violation
		{pgErr("42601"), false}, // syntax error
		{pgErr("22P02"), false}, // invalid text representation
	} {
		if got := intake.IsUnavailable(tt.err); got != tt.want {
			t.Errorf("IsUnavailable(%v) = %t, want %t", tt.err, got, tt.want)
		}
	}
}
