-- +goose Up

-- The look-up of a client's leads by email, for erasure on request:
-- HMAC-SHA256 under PII_HASH_KEY of the lower-cased address, so that the
-- address is not stored in clear twice (an unkeyed hash of an email can be
-- reversed by guessing). NULL for leads claimed before this migration and
-- for erased leads.
-- Its index, and the retention's, are built by the next migration,
-- without blocking writes.
ALTER TABLE leads ADD COLUMN email_hmac bytea;

-- An erased lead keeps what is not personal (ids, client, external_ref,
-- crm_id, score, tier, outcome, times) and the time of its erasure; its
-- submission and enrichment are gone.
ALTER TABLE leads ADD COLUMN erased_at timestamptz;
ALTER TABLE leads ALTER COLUMN submission DROP NOT NULL;
-- NOT VALID: the existing rows (all with a submission) are not scanned
-- under this migration's lock; new and updated rows are checked.
ALTER TABLE leads ADD CONSTRAINT leads_erased_check CHECK (erased_at IS NOT NULL OR submission IS NOT NULL) NOT VALID;

-- One row per erasure request, also when nothing matched: who asked, for
-- which client and which address (its HMAC, never the address), how many
-- leads it erased, and when.
CREATE TABLE erasures (
    id           uuid        PRIMARY KEY,
    client_id    text        NOT NULL,
    email_hmac   bytea       NOT NULL,
    erased       integer     NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    via          text        NOT NULL CHECK (via IN ('command', 'admin_api'))
);

-- +goose Down
DROP TABLE erasures;
ALTER TABLE leads DROP CONSTRAINT leads_erased_check;
ALTER TABLE leads ALTER COLUMN submission SET NOT NULL;
ALTER TABLE leads DROP COLUMN erased_at;
ALTER TABLE leads DROP COLUMN email_hmac;
