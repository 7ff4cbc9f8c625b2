-- +goose Up

-- One row per downstream: what every worker of the database knows of it,
-- so that an outage is learnt once, probed once per PROBE_INTERVAL, and a
-- rate limit is one budget shared by all workers.
CREATE TABLE downstreams (
    name          text        PRIMARY KEY CHECK (name IN ('enrichment', 'crm', 'notification')),
    up            boolean     NOT NULL DEFAULT true,
    -- The detector: transient failures in a row since the last success,
    -- and the distinct leads among them (at most two are kept: an outage
    -- needs at least two).
    failures      integer     NOT NULL DEFAULT 0,
    failing_leads uuid[]      NOT NULL DEFAULT '{}',
    down_since    timestamptz,
    -- While down: when the next probe (one lead's real call) may start.
    next_probe_at timestamptz,
    -- A 429 or 503 with Retry-After holds every lead's calls until then.
    held_until    timestamptz,
    -- The rate limit's token bucket: the tokens left at tokens_at. They go
    -- below zero while calls are booked ahead of the tokens they will use.
    tokens        double precision,
    tokens_at     timestamptz,
    CONSTRAINT downstreams_down_check CHECK (up = (down_since IS NULL))
);
INSERT INTO downstreams (name) VALUES ('enrichment'), ('crm'), ('notification');

-- A lead waiting for a downstream (down, holding calls, or out of rate):
-- what it waits for and since when; a call booked ahead in the rate limit,
-- and when it may start. delivery_since is when its delivery started, its
-- claim or its latest re-open: DELIVERY_MAX_AGE counts from it (NULL:
-- created_at).
ALTER TABLE leads ADD COLUMN waiting_for text CHECK (waiting_for IN ('enrichment', 'crm', 'notification'));
ALTER TABLE leads ADD COLUMN waiting_since timestamptz;
ALTER TABLE leads ADD COLUMN booked_for text CHECK (booked_for IN ('enrichment', 'crm', 'notification'));
ALTER TABLE leads ADD COLUMN booked_at timestamptz;
ALTER TABLE leads ADD COLUMN delivery_since timestamptz;

-- (The index of waiting leads is built by the next migration, without
-- blocking writes.)

-- The delivery log: every downstream call of a lead, oldest first. No
-- personal data, no bodies: the step, the attempt of the lead's job it
-- started in, when, how long, and how it ended (the HTTP status, timeout,
-- connection_error, or not_sent when a limit or an outage held it). It lives
-- as long as the lead's key.
CREATE TABLE lead_calls (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lead_id     uuid        NOT NULL,
    step        text        NOT NULL CHECK (step IN ('enrichment', 'crm', 'crm_lookup', 'notification')),
    attempt     integer     NOT NULL,
    started_at  timestamptz NOT NULL,
    duration_ms integer     NOT NULL,
    outcome     text        NOT NULL
);
CREATE INDEX lead_calls_lead_idx ON lead_calls (lead_id, id);

-- One row per redrive of failed keys: who asked (the command or the admin
-- API), when, what it selected and how many keys it re-opened.
CREATE TABLE redrives (
    id           uuid        PRIMARY KEY,
    via          text        NOT NULL CHECK (via IN ('cli', 'admin')),
    requested_at timestamptz NOT NULL DEFAULT now(),
    client_id    text,
    outcome      text,
    since        interval,
    keys         integer     NOT NULL,
    redriven     integer     NOT NULL
);

-- +goose Down
DROP TABLE redrives;
DROP TABLE lead_calls;
ALTER TABLE leads DROP COLUMN delivery_since;
ALTER TABLE leads DROP COLUMN booked_at;
ALTER TABLE leads DROP COLUMN booked_for;
ALTER TABLE leads DROP COLUMN waiting_since;
ALTER TABLE leads DROP COLUMN waiting_for;
DROP TABLE downstreams;
