// Package dbtest gives tests a real, migrated PostgreSQL database of their
// own (New), or a transaction on one shared by a package's tests, rolled
// back after (Tx). Nothing is mocked: each database is a clone of a
// template that holds every migration, made once per schema version and
// reused by every package.
//
// The server is TEST_DATABASE_URL, else DATABASE_URL, else
// postgres://postgres@127.0.0.1:5432/postgres.
package dbtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leadintake/leadintake/internal/scratchdb"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/migrations"
)

// ServerURL returns the URL of the PostgreSQL server tests use.
func ServerURL() string { return scratchdb.ServerURL(os.Getenv) }

// templateLock serialises template creation across test processes.
const templateLock int64 = 0x6c69_7465_6d70_6c00

// New creates a fresh database with every migration applied, drops it when
// the test ends, and returns its URL and a pool on it.
func New(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	admin, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		t.Fatalf("dbtest: connect to %s: %v (is PostgreSQL running? make test runs a private one: scripts/postgres.sh)", scratchdb.Redacted(ServerURL()), err)
	}
	tmpl, err := ensureTemplate(ctx, admin)
	admin.Close(context.WithoutCancel(ctx))
	if err != nil {
		t.Fatalf("dbtest: template: %v", err)
	}
	db, err := scratchdb.Create(ctx, ServerURL(), "leadintake_test_", tmpl)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := db.Drop(ctx); err != nil {
			t.Logf("dbtest: %v", err)
		}
	})

	dbURL := db.URL
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatalf("dbtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return dbURL, pool
}

// ensureTemplate returns the name of the template database for the current
// migrations, creating it if no earlier test run did.
func ensureTemplate(ctx context.Context, admin *pgx.Conn) (string, error) {
	name := "leadintake_tmpl_" + schemaVersion()
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLock); err != nil {
		return "", err
	}
	defer func() { _, _ = admin.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", templateLock) }()

	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1 AND datistemplate)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	// A half-built template from an interrupted run is rebuilt.
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	tmplURL, err := scratchdb.WithDatabase(ServerURL(), name, nil)
	if err != nil {
		return "", err
	}
	pool, err := pgxpool.New(ctx, tmplURL)
	if err != nil {
		return "", err
	}
	err = migrations.Migrate(ctx, pool, nil)
	pool.Close()
	if err != nil {
		return "", fmt.Errorf("migrate: %w", err)
	}
	// Marked as a template last: only a complete one is ever cloned.
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+name+" WITH is_template true"); err != nil {
		return "", err
	}
	return name, nil
}

// schemaVersion hashes our migrations and the River version, so that any
// change to either gets a new template.
func schemaVersion() string {
	h := sha256.New()
	_ = fs.WalkDir(migrations.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS(), path)
		h.Write([]byte(path))
		h.Write(b)
		return err
	})
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/riverqueue/river/riverdriver/riverpgxv5" {
				h.Write([]byte(dep.Version))
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// Empty creates a database without any table (a copy of template0), drops
// it when the test ends, and returns its URL: for tests of the migrations.
func Empty(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := scratchdb.Create(ctx, ServerURL(), "leadintake_empty_", "template0")
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := db.Drop(ctx); err != nil {
			t.Logf("dbtest: %v", err)
		}
	})
	return db.URL
}

var shared struct {
	once sync.Once
	pool *pgxpool.Pool
	err  error
}

// Tx returns a transaction on a migrated database shared by the package's
// tests, rolled back when the test ends: the cheapest isolation, for tests
// whose writes need not be seen by other connections. The database is
// dropped once the binary's tests have run (testkit.Main).
func Tx(t testing.TB) pgx.Tx {
	t.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		admin, err := pgx.Connect(ctx, ServerURL())
		if err != nil {
			shared.err = fmt.Errorf("connect to %s: %w (is PostgreSQL running? make test runs a private one: scripts/postgres.sh)", scratchdb.Redacted(ServerURL()), err)
			return
		}
		tmpl, err := ensureTemplate(ctx, admin)
		admin.Close(context.WithoutCancel(ctx))
		if err != nil {
			shared.err = fmt.Errorf("template: %w", err)
			return
		}
		db, err := scratchdb.Create(ctx, ServerURL(), "leadintake_test_shared_", tmpl)
		if err != nil {
			shared.err = err
			return
		}
		shared.pool, shared.err = pgxpool.New(ctx, db.URL)
		testkit.AtExit(func() {
			if shared.pool != nil {
				shared.pool.Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = db.Drop(ctx)
		})
	})
	if shared.err != nil {
		t.Fatalf("dbtest: %v", shared.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tx, err := shared.pool.Begin(ctx)
	if err != nil {
		t.Fatalf("dbtest: begin: %v", err)
	}
	t.Cleanup(func() {
		// The test's context is gone by now: the rollback gets its own.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tx.Rollback(ctx)
	})
	return tx
}

// Traced returns a second pool on the database at url whose statements
// tracer sees (a counter of a test's statements), closed when the test
// ends.
func Traced(t testing.TB, url string, tracer pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("dbtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}
