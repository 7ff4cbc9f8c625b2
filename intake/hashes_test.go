package intake_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"net/http"
	"testing"

	"github.com/gowebpki/jcs"

	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
)

// testHashKey is the test API's PII_HASH_KEY.
var testHashKey = lead.HashKey("intake-test-pii-hash-key-0123456789")

// storedHashes reads what client a's key keeps of its request.
func storedHashes(t *testing.T, api *testAPI, key string) (fingerprint, raw []byte, plain bool) {
	t.Helper()
	err := api.Pool.QueryRow(context.Background(), `
SELECT fingerprint_hmac, raw_hmac, plain_hashes FROM idempotency_keys WHERE client_id = 'a' AND key = $1`, key).
		Scan(&fingerprint, &raw, &plain)
	if err != nil {
		t.Fatal(err)
	}
	return fingerprint, raw, plain
}

// No column holds a plain hash of a body: the fingerprint and the hash of
// the raw request are HMACs under PII_HASH_KEY of their SHA-256 digests.
func TestStoredHashesAreKeyed(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, nil)
	key := testkit.NewKey()
	api.send(t, api.submission(key, validBody)).requireAccepted(t, key, false)
	fingerprint, raw, plain := storedHashes(t, api, key)
	canonical, err := jcs.Transform([]byte(validBody))
	if err != nil {
		t.Fatal(err)
	}
	plainFingerprint, plainRaw := sha256.Sum256(canonical), sha256.Sum256([]byte(validBody))
	if plain || bytes.Equal(fingerprint, plainFingerprint[:]) || bytes.Equal(raw, plainRaw[:]) {
		t.Fatalf("the key keeps a plain SHA-256 of the body (plain_hashes %v)", plain)
	}
	if !bytes.Equal(fingerprint, testHashKey.Digest(plainFingerprint[:])) || !bytes.Equal(raw, testHashKey.Digest(plainRaw[:])) {
		t.Errorf("fingerprint %x, raw %x: not the HMACs of the digests under PII_HASH_KEY", fingerprint, raw)
	}
}

// A key kept before hashes were keyed holds their plain digests until the
// worker keys them: meanwhile its retries still replay, and another body
// is still refused.
func TestPlainHashesStillReplay(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, nil)
	key := testkit.NewKey()
	api.send(t, api.submission(key, validBody)).requireAccepted(t, key, false)
	finishKey(t, api, key, finish{Body: `{"status":"completed","lead_id":"L1","crm_id":"crm_1","score":85,"tier":"hot","notified":true,"warnings":[]}`})
	canonical, err := jcs.Transform([]byte(validBody))
	if err != nil {
		t.Fatal(err)
	}
	plainFingerprint, plainRaw := sha256.Sum256(canonical), sha256.Sum256([]byte(validBody))
	if _, err := api.Pool.Exec(context.Background(), `
UPDATE idempotency_keys SET fingerprint_hmac = $2, raw_hmac = $3, plain_hashes = true WHERE client_id = 'a' AND key = $1`,
		key, plainFingerprint[:], plainRaw[:]); err != nil {
		t.Fatal(err)
	}
	reordered := `{"name":"Ada Lovelace","source":"website","email":"ada@example.com"}`
	for _, body := range []string{validBody, reordered} {
		res := api.send(t, api.submission(key, body))
		if res.Status != http.StatusCreated || res.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry %s of a key with plain hashes: %d %s, want its replay", body, res.Status, res.Body)
		}
	}
	api.send(t, api.submission(key, otherBody)).requireError(t, http.StatusUnprocessableEntity, response.CodeKeyReused)
}
