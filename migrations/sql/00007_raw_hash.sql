-- +goose Up

-- SHA-256 of the request as it arrived (its Supersedes and its body's raw
-- bytes), beside the fingerprint of its canonical form: a retry sending the
-- very same bytes is recognised without decoding its body again. NULL for
-- keys claimed before this migration (their retries are decoded, as
-- before). The fingerprint alone decides what is the same request.
ALTER TABLE idempotency_keys ADD COLUMN raw_hash bytea;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN raw_hash;
