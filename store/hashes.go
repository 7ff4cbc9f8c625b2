package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Keys kept before hashes were keyed hold the plain SHA-256 digests of
// their requests, marked plain_hashes (migration 00011). Until the worker
// keys them (KeyPlainHashes), a claim and a peek compare a retry's digest
// with them instead of its MAC (lead.RequestHash.Matches): a key claimed
// then keeps replaying.

// keyedRow is a key whose plain hashes are replaced by their MACs (see
// rows.go).
type keyedRow struct {
	ClientID    string `db:"client_id" pg:"text"`
	Key         string `db:"key" pg:"text"`
	Plain       []byte `db:"plain" pg:"bytea"`
	Fingerprint []byte `db:"fingerprint_hmac" pg:"bytea"`
	RawHash     []byte `db:"raw_hmac" pg:"bytea"`
}

var keyHashesSQL = `
UPDATE idempotency_keys k
SET fingerprint_hmac = r.fingerprint_hmac, raw_hmac = r.raw_hmac, plain_hashes = false
FROM ` + unnestRows[keyedRow]("r") + `
WHERE k.client_id = r.client_id AND k.key = r.key AND k.plain_hashes AND k.fingerprint_hmac = r.plain`

// KeyPlainHashes keys the hashes of up to limit keys that still hold plain
// ones, in one transaction: each digest d becomes mac(d) (lead.HashKey's
// Digest), which is what a retry of the same request is compared with
// from then on. Keys another transaction holds are skipped; a key taken
// over meanwhile (keyed already) is left as it is. It returns how many keys
// it keyed; fewer than limit means none was left when it looked.
func (s *Store) KeyPlainHashes(ctx context.Context, mac func(digest []byte) []byte, limit int) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
SELECT client_id, key, fingerprint_hmac, raw_hmac FROM idempotency_keys
WHERE plain_hashes
LIMIT $1
FOR UPDATE SKIP LOCKED`, limit)
		if err != nil {
			return err
		}
		keyed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (keyedRow, error) {
			var r keyedRow
			var raw []byte
			if err := row.Scan(&r.ClientID, &r.Key, &r.Plain, &raw); err != nil {
				return r, err
			}
			r.Fingerprint = mac(r.Plain)
			if raw != nil {
				r.RawHash = mac(raw)
			}
			return r, nil
		})
		if err != nil || len(keyed) == 0 {
			return err
		}
		tag, err := tx.Exec(ctx, keyHashesSQL, rowArgs(keyed, nil))
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("key plain hashes: %w", err)
	}
	return n, nil
}
