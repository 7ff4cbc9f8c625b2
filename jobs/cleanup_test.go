package jobs_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

func TestCleanup(t *testing.T) {
	t.Parallel()

	// insertKey inserts a key by hand: finished keys carry a response and
	// an expiry, unfinished ones neither.
	const insertKey = `
INSERT INTO idempotency_keys (client_id, key, fingerprint, state, lead_id,
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
