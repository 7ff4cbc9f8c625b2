-- +goose Up

-- Whether the key was claimed through a publishable key (a web page) of its
-- client. A page reaches only such keys: polls, amendments and its own
-- Idempotency-Key find no other key of the client. Keys claimed before this
-- migration count as not submitted through a publishable key. The constant
-- default makes this a change of the catalogue only, whatever the table's
-- size.
ALTER TABLE idempotency_keys ADD COLUMN publishable boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN publishable;
