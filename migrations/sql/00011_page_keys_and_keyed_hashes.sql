-- +goose NO TRANSACTION
-- +goose Up

-- Whether the key was claimed through a publishable key (a web page) of its
-- client. A page reaches only such keys: polls, amendments and its own
-- Idempotency-Key find no other key of the client. Keys claimed before this
-- migration count as not submitted through a publishable key. A constant
-- default makes this a change of the catalogue only, whatever the table's
-- size.
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS publishable boolean NOT NULL DEFAULT false;

-- The fingerprint and the hash of the raw request are kept keyed by
-- PII_HASH_KEY (an HMAC-SHA256 of the SHA-256 digest): a plain hash of a
-- short enquiry tells whoever guesses it whether an address was submitted.
-- The key is not the migration's to know: the rows kept before are keyed by
-- the worker, in batches (plain_hashes marks them until then; new claims
-- write keyed hashes), and both are compared meanwhile. Every row is plain
-- until the columns are renamed below: a process of an earlier release
-- still writes plain hashes until then, and cannot read or write them
-- after (its statements fail, and it answers 503, which callers retry,
-- rather than comparing a plain hash with a keyed one and refusing a
-- retry as idempotency_key_reused).
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS plain_hashes boolean NOT NULL DEFAULT true;

-- What the worker keys next; empty once every row is keyed.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idempotency_keys_plain_hashes_idx
    ON idempotency_keys (client_id, key) WHERE plain_hashes;

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM information_schema.columns
               WHERE table_schema = current_schema() AND table_name = 'idempotency_keys' AND column_name = 'fingerprint') THEN
        ALTER TABLE idempotency_keys RENAME COLUMN fingerprint TO fingerprint_hmac;
        ALTER TABLE idempotency_keys RENAME COLUMN raw_hash TO raw_hmac;
        ALTER TABLE idempotency_keys ALTER COLUMN plain_hashes SET DEFAULT false;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
ALTER TABLE idempotency_keys RENAME COLUMN fingerprint_hmac TO fingerprint;
ALTER TABLE idempotency_keys RENAME COLUMN raw_hmac TO raw_hash;
DROP INDEX IF EXISTS idempotency_keys_plain_hashes_idx;
ALTER TABLE idempotency_keys DROP COLUMN IF EXISTS plain_hashes;
ALTER TABLE idempotency_keys DROP COLUMN IF EXISTS publishable;
