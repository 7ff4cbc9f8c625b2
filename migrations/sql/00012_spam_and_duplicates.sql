-- +goose NO TRANSACTION
-- Spam kept out of the CRM, and possible duplicates flagged. Run without a
-- transaction so that the index builds CONCURRENTLY and the constraints are
-- validated without blocking writes; every statement can run again.

-- +goose Up
-- A web page's enquiry judged spam is stored and finished at once,
-- quarantined, until an operator releases it: a finished state with a
-- response (200 received) and no failure code.
ALTER TABLE idempotency_keys
    DROP CONSTRAINT IF EXISTS idempotency_keys_state_check,
    ADD CONSTRAINT idempotency_keys_state_check
        CHECK (state IN ('processing', 'completed', 'failed', 'needs_reconciliation', 'quarantined')) NOT VALID;
ALTER TABLE idempotency_keys VALIDATE CONSTRAINT idempotency_keys_state_check;
ALTER TABLE idempotency_keys
    DROP CONSTRAINT IF EXISTS idempotency_keys_finished_check,
    ADD CONSTRAINT idempotency_keys_finished_check
        CHECK ((state IN ('completed', 'failed', 'quarantined')) =
               (response_status IS NOT NULL AND response_body IS NOT NULL
                AND finished_at IS NOT NULL AND expires_at IS NOT NULL)) NOT VALID;
ALTER TABLE idempotency_keys VALIDATE CONSTRAINT idempotency_keys_finished_check;

-- The verdict's reasons (no_signals, honeypot, too_fast, captcha_failed)
-- of a quarantined lead, kept after its release.
ALTER TABLE leads ADD COLUMN IF NOT EXISTS spam_reasons text[];

-- Possible duplicates: an HMAC under PII_HASH_KEY of the lead's canonical
-- body without its utm (the email included), NULL once its personal data is
-- erased; and the earlier lead of the same client with the same one,
-- claimed within DUPLICATE_WINDOW under another key (another external
-- reference: not along an amendment chain), found at the claim.
ALTER TABLE leads ADD COLUMN IF NOT EXISTS content_hmac bytea;
ALTER TABLE leads ADD COLUMN IF NOT EXISTS duplicate_of uuid;
DROP INDEX CONCURRENTLY IF EXISTS leads_content_hmac_idx;
CREATE INDEX CONCURRENTLY leads_content_hmac_idx ON leads (client_id, content_hmac, created_at) WHERE content_hmac IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS leads_content_hmac_idx;
ALTER TABLE leads DROP COLUMN IF EXISTS duplicate_of;
ALTER TABLE leads DROP COLUMN IF EXISTS content_hmac;
ALTER TABLE leads DROP COLUMN IF EXISTS spam_reasons;
ALTER TABLE idempotency_keys
    DROP CONSTRAINT IF EXISTS idempotency_keys_finished_check,
    ADD CONSTRAINT idempotency_keys_finished_check
        CHECK ((state IN ('completed', 'failed')) =
               (response_status IS NOT NULL AND response_body IS NOT NULL
                AND finished_at IS NOT NULL AND expires_at IS NOT NULL));
ALTER TABLE idempotency_keys
    DROP CONSTRAINT IF EXISTS idempotency_keys_state_check,
    ADD CONSTRAINT idempotency_keys_state_check
        CHECK (state IN ('processing', 'completed', 'failed', 'needs_reconciliation'));
