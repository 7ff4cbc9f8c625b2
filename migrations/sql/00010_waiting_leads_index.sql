-- +goose NO TRANSACTION
-- The index of the leads that wait for a downstream, built CONCURRENTLY: a
-- deployment with millions of leads keeps taking submissions while it
-- builds. A build that failed leaves an invalid index; running the
-- migration again drops it and builds it anew.

-- +goose Up
-- The waiting leads of a downstream, oldest first: what a recovery wakes,
-- and what the metrics count.
DROP INDEX CONCURRENTLY IF EXISTS leads_waiting_idx;
CREATE INDEX CONCURRENTLY leads_waiting_idx ON leads (waiting_for, waiting_since) WHERE waiting_for IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS leads_waiting_idx;
