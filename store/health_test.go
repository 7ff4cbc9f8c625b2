package store_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/store"
)

// A primary fenced for a switchover, or a standby that a stale connection
// still reaches, refuses writes with read_only_sql_transaction: the store
// is unavailable (a 503, retried), not broken (a 500).
func TestIsUnavailableOnAReadOnlyServer(t *testing.T) {
	t.Parallel()
	url, _ := dbtest.New(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	s, _ := newStore(t, pool)
	_, err = s.Claim(t.Context(), claimParams(t, validBody))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("claim on a read-only server: %v; want SQLSTATE 25006", err)
	}
	if !store.IsUnavailable(err) {
		t.Fatalf("IsUnavailable(%v) = false, want true", err)
	}
}
