package store_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leadintake/leadintake/internal/pgserver"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/migrations"
	"github.com/leadintake/leadintake/store"
)

// waitingPrimary starts a PostgreSQL server of its own, migrated, whose
// commits then wait for a synchronous standby that never comes: a primary
// cut off from its standby, as in a failover. It returns a pool on it.
func waitingPrimary(t *testing.T) *pgxpool.Pool {
	t.Helper()
	bin, err := pgserver.FindBin()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir, err := pgserver.NewDir(bin)
	if err != nil {
		t.Fatal(err)
	}
	port, err := pgserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Init(ctx, "primary", port); err != nil {
		dir.Remove(ctx)
		t.Fatal(err)
	}
	if err := dir.Start(ctx, "primary"); err != nil {
		dir.Remove(ctx)
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, pgserver.URL(port, "postgres"))
	if err != nil {
		dir.Remove(ctx)
		t.Fatal(err)
	}
	// Cleanups run last first: the server stops before the pool closes,
	// which ends the commits still waiting for the standby.
	t.Cleanup(pool.Close)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		dir.Remove(ctx)
	})
	if err := migrations.Migrate(ctx, pool, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{"ALTER SYSTEM SET synchronous_standby_names = 'absent'", "SELECT pg_reload_conf()"} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	// The reload is asynchronous: every new session has it once one does.
	testkit.EventuallyWithin(t, time.Minute, "synchronous_standby_names in force", func() bool {
		conn, err := pgx.Connect(ctx, pgserver.URL(port, "postgres"))
		if err != nil {
			return false
		}
		defer conn.Close(context.WithoutCancel(ctx))
		var v string
		return conn.QueryRow(ctx, "SHOW synchronous_standby_names").Scan(&v) == nil && v == "absent"
	})
	// The pool's sessions may predate it: new ones only.
	pool.Reset()
	return pool
}

// A claim whose commit waits for the synchronous standby fails at its
// deadline, and leaves nothing that a later transaction on that primary
// could read: its commit is never cancelled, for a cancelled wait commits
// on the primary all the same, and a retry would then be answered from a
// key the standby never got, which a failover loses.
func TestClaimWaitingForTheStandby(t *testing.T) {
	t.Parallel()
	pool := waitingPrimary(t)

	for _, tc := range []struct {
		name    string
		grouped bool
	}{{"Single", false}, {"Grouped", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore(t, pool)
			if tc.grouped {
				if err := s.GroupClaims(store.GroupOpts{Timeout: time.Second}); err != nil {
					t.Fatal(err)
				}
			}
			p := claimParams(t, validBody)
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			_, err := s.Claim(ctx, p)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("claim while the commit waits: %v, want the deadline", err)
			}
			// A cancelled wait would make the key visible within moments.
			visible := testkit.Within(3*time.Second, func() bool {
				var n int
				if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM idempotency_keys WHERE key = $1", p.Key).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n != 0
			})
			if visible {
				t.Fatal("the key the standby never got is visible on the primary")
			}
		})
	}
}
