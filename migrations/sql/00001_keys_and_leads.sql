-- +goose Up

-- One row per client and key: the authority on what a key means. The primary
-- key decides every claim race (INSERT ... ON CONFLICT).
CREATE TABLE idempotency_keys (
    client_id       text        NOT NULL,
    key             text        NOT NULL,
    -- SHA-256 of the request body's RFC 8785 canonical form.
    fingerprint     bytea       NOT NULL,
    state           text        NOT NULL,
    lead_id         uuid        NOT NULL,
    -- The final response, replayed byte for byte. json (not jsonb) keeps the
    -- exact bytes the worker wrote.
    response_status smallint,
    response_body   json,
    -- The error code of a failed key; downstream_unavailable may be re-opened.
    failure_code    text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    expires_at      timestamptz,
    PRIMARY KEY (client_id, key),
    CONSTRAINT idempotency_keys_state_check
        CHECK (state IN ('processing', 'completed', 'failed', 'needs_reconciliation')),
    CONSTRAINT idempotency_keys_finished_check
        CHECK ((state IN ('completed', 'failed')) =
               (response_status IS NOT NULL AND response_body IS NOT NULL
                AND finished_at IS NOT NULL AND expires_at IS NOT NULL)),
    CONSTRAINT idempotency_keys_failure_code_check
        CHECK ((state = 'failed') = (failure_code IS NOT NULL))
);

-- Clean-up deletes expired keys in batches, oldest first.
CREATE INDEX idempotency_keys_expires_at_idx
    ON idempotency_keys (expires_at) WHERE expires_at IS NOT NULL;

-- The reconciler and the metrics look at unfinished keys only; this index
-- stays as small as the work in flight.
CREATE INDEX idempotency_keys_unfinished_idx
    ON idempotency_keys (state, updated_at) WHERE state IN ('processing', 'needs_reconciliation');

-- One row per accepted enquiry. It outlives its key: a retry after the key
-- expired is a new lead under the same external_ref.
CREATE TABLE leads (
    id                 uuid        PRIMARY KEY,
    client_id          text        NOT NULL,
    idempotency_key    text        NOT NULL,
    external_ref       text        NOT NULL,
    -- The validated submission in canonical JSON. Personal data lives here
    -- and nowhere else (not in job arguments, not in logs).
    submission         jsonb       NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    -- Recovery points: each downstream step's result, saved before the next
    -- step starts, so that a retried job resumes instead of repeating a call.
    enrichment_outcome text CHECK (enrichment_outcome IN ('data', 'no_data', 'unavailable')),
    enrichment         jsonb,
    -- Transient failures of the optional steps so far; past a few, the step
    -- is given up with a warning rather than holding the lead back.
    enrichment_failures smallint   NOT NULL DEFAULT 0,
    score              smallint,
    tier               text CHECK (tier IN ('hot', 'warm', 'cold')),
    crm_state          text        NOT NULL DEFAULT 'pending'
        CHECK (crm_state IN ('pending', 'uncertain', 'accepted', 'rejected')),
    crm_id             text,
    notify_outcome     text CHECK (notify_outcome IN ('sent', 'failed')),
    notify_failures    smallint    NOT NULL DEFAULT 0,
    warnings           text[]      NOT NULL DEFAULT '{}',
    finished_at        timestamptz
);

CREATE INDEX leads_external_ref_idx ON leads (external_ref);

-- +goose Down
DROP TABLE leads;
DROP TABLE idempotency_keys;
