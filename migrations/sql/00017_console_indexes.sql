-- +goose NO TRANSACTION
-- The indexes of the operator console, built CONCURRENTLY: a deployment
-- with millions of keys keeps taking submissions while they build. A build
-- that failed leaves an invalid index; running the migration again drops it
-- and builds it anew.

-- +goose Up
-- The leads page, newest first across clients, a page at a time: a keyset
-- (created_at, client_id, key), never an offset.
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_created_idx;
CREATE INDEX CONCURRENTLY idempotency_keys_created_idx ON idempotency_keys (created_at, client_id, key);
-- The same page of one client, in one state (or in each state, merged):
-- the filters operators use most (a client's failed keys, its keys still
-- processing) read only the rows they show.
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_client_state_idx;
CREATE INDEX CONCURRENTLY idempotency_keys_client_state_idx ON idempotency_keys (client_id, state, created_at, key);
-- A lead's callbacks, on its page.
DROP INDEX CONCURRENTLY IF EXISTS callbacks_lead_idx;
CREATE INDEX CONCURRENTLY callbacks_lead_idx ON callbacks (lead_id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS callbacks_lead_idx;
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_client_state_idx;
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_created_idx;
