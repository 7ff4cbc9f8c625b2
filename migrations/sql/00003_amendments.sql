-- +goose Up

-- An amendment (POST with Supersedes) names the key it supersedes; the
-- superseded key names the one key that superseded it. A key is superseded
-- at most once: the claim sets superseded_by only where it is still NULL,
-- under the row's lock.
ALTER TABLE idempotency_keys ADD COLUMN supersedes text;
ALTER TABLE idempotency_keys ADD COLUMN superseded_by text;

-- The amending lead: the lead it amends, and its number along the chain (1
-- for the first amendment, 2 for an amendment of that one...; 0 for a lead
-- that amends nothing). It shares the external_ref of the chain's first
-- lead, so the CRM record is updated in place.
ALTER TABLE leads ADD COLUMN amends uuid;
ALTER TABLE leads ADD COLUMN amendment integer NOT NULL DEFAULT 0;
ALTER TABLE leads ADD CONSTRAINT leads_amendment_check CHECK ((amendment > 0) = (amends IS NOT NULL));

-- In create mode an amendment looks its reference up first: a record found
-- is not posted again, and the amendment completes with the warning
-- crm_not_updated. Saved with the step, like every recovery point.
ALTER TABLE leads ADD COLUMN crm_not_updated boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE leads DROP COLUMN crm_not_updated;
ALTER TABLE leads DROP CONSTRAINT leads_amendment_check;
ALTER TABLE leads DROP COLUMN amendment;
ALTER TABLE leads DROP COLUMN amends;
ALTER TABLE idempotency_keys DROP COLUMN superseded_by;
ALTER TABLE idempotency_keys DROP COLUMN supersedes;
