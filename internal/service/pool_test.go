package service

import (
	"context"
	"testing"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/scratchdb"
)

// OpenPool's settings apply where the URL says nothing, and the URL wins
// where it does: an operator may set synchronous_commit in DATABASE_URL.
func TestOpenPoolSettings(t *testing.T) {
	t.Parallel()
	opts := PoolOpts{
		MaxConns: 7, ApplicationName: "leadintake-test",
		RuntimeParams: map[string]string{"synchronous_commit": "off", "statement_timeout": "5s"},
	}
	for _, tc := range []struct {
		url                        string
		maxConns                   int32
		app, syncCommit, statement string
	}{
		{"postgres://u@127.0.0.1:1/db", 7, "leadintake-test", "off", "5s"},
		{"postgres://u@127.0.0.1:1/db?pool_max_conns=3&application_name=mine&synchronous_commit=on", 3, "mine", "on", "5s"},
	} {
		pool, err := OpenPool(context.Background(), tc.url, opts)
		if err != nil {
			t.Fatal(err)
		}
		cfg := pool.Config()
		pool.Close()
		p := cfg.ConnConfig.RuntimeParams
		if cfg.MaxConns != tc.maxConns || p["application_name"] != tc.app || p["synchronous_commit"] != tc.syncCommit || p["statement_timeout"] != tc.statement {
			t.Errorf("%s: max %d, params %v", tc.url, cfg.MaxConns, p)
		}
	}
}

// A pool that asks for a writable server drops a connection once its server
// reports that it takes no writes (as a primary fenced or demoted in a
// failover does, on the connection's next answer), and the next statement
// runs on a new connection; a pool that does not ask keeps it.
func TestOpenPoolDropsReadOnlyConnections(t *testing.T) {
	t.Parallel()
	dbURL, _ := dbtest.New(t)
	for _, tc := range []struct {
		attrs string
		drop  bool
	}{
		{"read-write", true},
		{"primary", true},
		{"any", false},
		{"", false},
	} {
		t.Run("target_session_attrs="+tc.attrs, func(t *testing.T) {
			t.Parallel()
			params := map[string]string{}
			if tc.attrs != "" {
				params["target_session_attrs"] = tc.attrs
			}
			u, err := scratchdb.WithDatabase(dbURL, "", params)
			if err != nil {
				t.Fatal(err)
			}
			// One connection: every statement would run on it.
			pool, err := OpenPool(t.Context(), u, PoolOpts{MaxConns: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			var before, after int
			if err := pool.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&before); err != nil {
				t.Fatal(err)
			}
			// The session's server now refuses writes, and reports it.
			if _, err := pool.Exec(t.Context(), "SET default_transaction_read_only = on"); err != nil {
				t.Fatal(err)
			}
			_, writeErr := pool.Exec(t.Context(), "CREATE TEMP TABLE t (x int)")
			if err := pool.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&after); err != nil {
				t.Fatal(err)
			}
			if tc.drop && (writeErr != nil || after == before) {
				t.Fatalf("write: %v; backend %d, then %d: want the write on a new connection", writeErr, before, after)
			}
			if !tc.drop && (writeErr == nil || after != before) {
				t.Fatalf("write: %v; backend %d, then %d: want the connection kept, and the write refused", writeErr, before, after)
			}
		})
	}
}
