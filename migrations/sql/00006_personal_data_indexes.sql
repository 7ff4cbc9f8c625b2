-- +goose NO TRANSACTION
-- The indexes of personal data, built CONCURRENTLY: a deployment with
-- millions of leads keeps taking submissions while they build. A build
-- that failed leaves an invalid index; running the migration again drops
-- it and builds it anew.

-- +goose Up
-- The look-up of a client's leads by email, for erasure on request.
DROP INDEX CONCURRENTLY IF EXISTS leads_email_hmac_idx;
CREATE INDEX CONCURRENTLY leads_email_hmac_idx ON leads (client_id, email_hmac) WHERE email_hmac IS NOT NULL;

-- Retention finds the finished leads not yet erased, oldest first.
DROP INDEX CONCURRENTLY IF EXISTS leads_retention_idx;
CREATE INDEX CONCURRENTLY leads_retention_idx ON leads (finished_at) WHERE erased_at IS NULL AND finished_at IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS leads_retention_idx;
DROP INDEX CONCURRENTLY IF EXISTS leads_email_hmac_idx;
