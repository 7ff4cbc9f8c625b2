package migrations_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/leadintake/leadintake/internal/dbtest"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/migrations"
	"github.com/leadintake/leadintake/store"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// A key claimed before hashes were keyed (migration 00011) keeps its plain
// digests, marked plain, and is not a page's; the worker's keying makes
// them the HMACs under PII_HASH_KEY that retries are compared with.
func TestKeysKeptBeforeHashesWereKeyed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, dbtest.Empty(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	riverMigrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := riverMigrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := provider.UpTo(ctx, 10); err != nil {
		t.Fatal(err)
	}
	fingerprint, raw := sha256.Sum256([]byte("canonical")), sha256.Sum256([]byte("raw"))
	if _, err := pool.Exec(ctx, `
INSERT INTO idempotency_keys (client_id, key, fingerprint, raw_hash, state, lead_id)
VALUES ('a', 'before', $1, $2, 'processing', gen_random_uuid())`, fingerprint[:], raw[:]); err != nil {
		t.Fatal(err)
	}

	if err := migrations.Migrate(ctx, pool, nil); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Migrate(ctx, pool, nil); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	read := func() (fp, rw []byte, plain, publishable bool) {
		t.Helper()
		if err := pool.QueryRow(ctx, `
SELECT fingerprint_hmac, raw_hmac, plain_hashes, publishable FROM idempotency_keys WHERE client_id = 'a' AND key = 'before'`).
			Scan(&fp, &rw, &plain, &publishable); err != nil {
			t.Fatal(err)
		}
		return
	}
	fp, rw, plain, publishable := read()
	if !plain || publishable || !bytes.Equal(fp, fingerprint[:]) || !bytes.Equal(rw, raw[:]) {
		t.Fatalf("the key after the migration: plain %v, publishable %v, fingerprint %x: want its digests, plain, not a page's", plain, publishable, fp)
	}

	key := lead.HashKey("migrations-test-pii-hash-key-0123456789")
	n, err := store.New(pool).KeyPlainHashes(ctx, key.Digest, 10)
	if err != nil || n != 1 {
		t.Fatalf("keyed %d keys (%v), want 1", n, err)
	}
	fp, rw, plain, _ = read()
	if plain || !bytes.Equal(fp, key.Digest(fingerprint[:])) || !bytes.Equal(rw, key.Digest(raw[:])) {
		t.Errorf("the key after keying: plain %v, fingerprint %x: want the HMACs of its digests", plain, fp)
	}
	if n, err := store.New(pool).KeyPlainHashes(ctx, key.Digest, 10); err != nil || n != 0 {
		t.Errorf("keyed %d keys again (%v), want none", n, err)
	}
}

// The records of redrives and erasures kept before the audit move to it:
// who (the command or the admin API), what, the client, how many, when, and
// an erasure's address as its HMAC only.
func TestRecordsMoveToTheAudit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, dbtest.Empty(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	riverMigrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := riverMigrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := provider.UpTo(ctx, 14); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
INSERT INTO redrives (id, via, requested_at, client_id, outcome, since, keys, redriven) VALUES
    (gen_random_uuid(), 'cli', now() - interval '2 hours', 'a', NULL, NULL, 2, 1),
    (gen_random_uuid(), 'admin', now() - interval '1 hour', NULL, 'downstream_unavailable', interval '1 day', 0, 7);
INSERT INTO erasures (id, client_id, email_hmac, erased, requested_at, via) VALUES
    (gen_random_uuid(), 'a', '\x0102', 3, now() - interval '3 hours', 'command'),
    (gen_random_uuid(), 'b', '\x0304', 0, now() - interval '30 minutes', 'admin_api')`); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Migrate(ctx, pool, nil); err != nil {
		t.Fatal(err)
	}
	entries, err := store.New(pool).AuditLog(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, fmt.Sprintf("%s %s %s %s %d %s", e.Actor, e.Via, e.Action, e.ClientID, e.Count, e.Detail))
	}
	want := []string{
		`admin admin_api erase b 0 {}`,
		`admin admin_api redrive  7 {"outcome": "downstream_unavailable", "keys_named": 0, "since_seconds": 86400.000000}`,
		`cli cli redrive a 1 {"keys_named": 2}`,
		`cli cli erase a 3 {}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the audit, newest first:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if records, err := store.New(pool).Erasures(ctx, "a", []byte{1, 2}); err != nil || len(records) != 1 || records[0].Erased != 3 {
		t.Errorf("the erasure records of a: %+v %v", records, err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename IN ('redrives', 'erasures')`).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d of the old tables left (%v)", left, err)
	}
}
