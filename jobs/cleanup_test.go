package jobs_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/leadintake/leadintake/jobs"
)

func TestCleanup(t *testing.T) {
	t.Parallel()

	// insertKey inserts a key by hand: finished keys carry a response and
	// an expiry, unfinished ones neither.
	const insertKey = `
INSERT INTO idempotency_keys (client_id, key, fingerprint_hmac, state, lead_id,
                              response_status, response_body, failure_code, finished_at, expires_at)
SELECT 'client-a', k, '\x00', $2, gen_random_uuid(),
       CASE WHEN $2 IN ('completed', 'failed') THEN 201 END,
       CASE WHEN $2 IN ('completed', 'failed') THEN '{}'::json END,
       CASE WHEN $2 = 'failed' THEN 'downstream_unavailable' END,
       CASE WHEN $2 IN ('completed', 'failed') THEN now() - interval '2 hours' END,
       CASE WHEN $2 IN ('completed', 'failed') THEN now() + $3::interval END
FROM unnest($1::text[]) AS k`

	t.Run("DeletesExpiredKeysOnly", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		for _, k := range []struct {
			keys       []string
			state, ttl string
		}{
			{[]string{"expired-completed"}, "completed", "-1 hour"},
			{[]string{"expired-failed"}, "failed", "-1 second"},
			{[]string{"kept-completed"}, "completed", "1 hour"},
			{[]string{"kept-failed"}, "failed", "1 hour"},
			{[]string{"kept-processing"}, "processing", "0"},
			{[]string{"kept-reconciliation"}, "needs_reconciliation", "0"},
		} {
			bundle.exec(t, insertKey, k.keys, k.state, k.ttl)
		}

		bundle.cleanUp(t)
		want := []string{"kept-completed", "kept-failed", "kept-processing", "kept-reconciliation"}
		if got := bundle.keys(t); !slices.Equal(got, want) {
			t.Errorf("keys left %v, want %v", got, want)
		}
	})

	t.Run("DeletesMoreThanOneBatch", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, nil)
		var expired []string
		for i := range 2500 {
			expired = append(expired, fmt.Sprintf("expired-%04d", i))
		}
		bundle.exec(t, insertKey, expired, "completed", "-1 minute")
		bundle.exec(t, insertKey, []string{"kept"}, "completed", "1 minute")

		bundle.cleanUp(t)
		if got := bundle.keys(t); !slices.Equal(got, []string{"kept"}) {
			t.Errorf("%d keys left, want only kept", len(got))
		}
	})
}

// The clean-up keeps up with any rate: a round does a bounded amount of
// work, and one that leaves work goes on at once (snoozed, so that it never
// overlaps itself) until none is left.
func TestCleanupKeepsUp(t *testing.T) {
	t.Parallel()
	bundle := setup(t, nil)
	bundle.cfg.CleanupBatch, bundle.cfg.CleanupBatches = 2, 3
	bundle.exec(t, `
INSERT INTO idempotency_keys (client_id, key, fingerprint_hmac, state, lead_id, response_status, response_body, finished_at, expires_at)
SELECT 'client-a', 'expired-' || g, '\x00', 'completed', gen_random_uuid(), 201, '{}'::json, now() - interval '2 hours', now() - interval '1 hour'
FROM generate_series(1, 25) g`)
	bundle.exec(t, `
INSERT INTO leads (id, client_id, idempotency_key, external_ref, submission, email_hmac, finished_at)
SELECT gen_random_uuid(), 'client-a', 'old-' || g, 'ref-' || g, '{"email":"ada@example.com"}', '\x01', now() - $1::interval
FROM generate_series(1, 25) g`, (jobs.DefaultLeadRetention + time.Hour).String())

	rounds := 0
	for ; rounds < 100; rounds++ {
		if kind := bundle.cleanUpRound(t); kind == river.EventKindJobCompleted {
			break
		} else if kind != river.EventKindJobSnoozed {
			t.Fatalf("round %d ended %s", rounds+1, kind)
		}
	}
	if got := bundle.keys(t); len(got) != 0 {
		t.Errorf("%d expired keys left once the clean-up completed", len(got))
	}
	var left int
	if err := bundle.pool.QueryRow(context.Background(), `SELECT count(*) FROM leads WHERE erased_at IS NULL`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d leads past LEAD_RETENTION left unerased once the clean-up completed", left)
	}
	if rounds < 2 {
		t.Errorf("done in %d round(s): the rounds' bound of 6 rows was not applied", rounds+1)
	}
}

// Keys kept before hashes were keyed hold plain SHA-256 digests: the
// clean-up keys them, batch by batch, each digest becoming its HMAC under
// PII_HASH_KEY, and leaves keyed ones alone.
func TestCleanupKeysPlainHashes(t *testing.T) {
	t.Parallel()
	bundle := setup(t, nil)
	bundle.cfg.HashKey = hashKey
	bundle.cfg.CleanupBatch, bundle.cfg.CleanupBatches = 2, 3
	digest := sha256.Sum256([]byte(`{"email":"ada@example.com","source":"website"}`))
	raw := sha256.Sum256([]byte(`{"source":"website","email":"ada@example.com"}`))
	bundle.exec(t, `
INSERT INTO idempotency_keys (client_id, key, fingerprint_hmac, raw_hmac, plain_hashes, state, lead_id)
SELECT 'client-a', 'plain-' || g, $1, CASE WHEN g % 2 = 0 THEN $2::bytea END, true, 'processing', gen_random_uuid()
FROM generate_series(1, 15) g`, digest[:], raw[:])
	keyed := hashKey.Digest([]byte("already keyed"))
	bundle.exec(t, `
INSERT INTO idempotency_keys (client_id, key, fingerprint_hmac, state, lead_id)
VALUES ('client-a', 'keyed', $1, 'processing', gen_random_uuid())`, keyed)

	for range 100 {
		if bundle.cleanUpRound(t) == river.EventKindJobCompleted {
			break
		}
	}
	rows, err := bundle.pool.Query(context.Background(), `SELECT key, fingerprint_hmac, raw_hmac, plain_hashes FROM idempotency_keys`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			key         string
			fp, rawHMAC []byte
			plainHashes bool
		)
		if err := rows.Scan(&key, &fp, &rawHMAC, &plainHashes); err != nil {
			t.Fatal(err)
		}
		wantFP := hashKey.Digest(digest[:])
		if key == "keyed" {
			wantFP = keyed
		}
		if plainHashes || !bytes.Equal(fp, wantFP) {
			t.Errorf("key %s: fingerprint %x (plain %v), want %x, keyed", key, fp, plainHashes, wantFP)
		}
		if rawHMAC != nil && !bytes.Equal(rawHMAC, hashKey.Digest(raw[:])) {
			t.Errorf("key %s: raw hash %x, want its HMAC", key, rawHMAC)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// keys returns every key in the table, in order.
func (b *testBundle) keys(t *testing.T) []string {
	t.Helper()
	var keys []string
	if err := b.pool.QueryRow(context.Background(),
		`SELECT coalesce(array_agg(key ORDER BY key), '{}') FROM idempotency_keys`).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	return keys
}
