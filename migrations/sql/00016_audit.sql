-- +goose Up

-- One row per operator action, written in the action's own transaction: a
-- release, a redrive, a settle, an erasure on request, and every look at a
-- lead's enquiry (its personal data). Who acted (actor: cli, admin, or a
-- console login), through what (via: cli, admin_api, console), what and
-- when, which client and keys, and how many it changed. No personal data:
-- an erasure keeps the HMAC of its address under PII_HASH_KEY, as its
-- record always did. detail holds the action's own parameters (a redrive's
-- outcome and since, the keys it left and why, a settle's CRM id).
CREATE TABLE audit (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    actor      text        NOT NULL CHECK (actor <> ''),
    via        text        NOT NULL CHECK (via IN ('cli', 'admin_api', 'console')),
    action     text        NOT NULL CHECK (action IN ('release', 'redrive', 'settle', 'erase', 'show_enquiry')),
    client_id  text,
    -- [{"client_id", "key"}]: the keys the action changed or showed.
    keys       jsonb       NOT NULL DEFAULT '[]',
    count      integer     NOT NULL,
    email_hmac bytea,
    detail     jsonb       NOT NULL DEFAULT '{}'
);
-- `api audit list --since`, newest first.
CREATE INDEX audit_at_idx ON audit (at);

-- The audit replaces the records of redrives and erasures: their rows move
-- to it, in the order they were made, and the tables go.
INSERT INTO audit (at, actor, via, action, client_id, count, email_hmac, detail)
SELECT at, actor, via, action, client_id, count, email_hmac, detail FROM (
    SELECT requested_at AS at, via AS actor, CASE via WHEN 'cli' THEN 'cli' ELSE 'admin_api' END AS via,
           'redrive' AS action, client_id, redriven AS count, NULL::bytea AS email_hmac,
           jsonb_strip_nulls(jsonb_build_object('outcome', outcome, 'since_seconds', extract(epoch FROM since), 'keys_named', keys)) AS detail
    FROM redrives
    UNION ALL
    SELECT requested_at, CASE via WHEN 'command' THEN 'cli' ELSE 'admin' END, CASE via WHEN 'command' THEN 'cli' ELSE 'admin_api' END,
           'erase', client_id, erased, email_hmac, '{}'::jsonb
    FROM erasures
) old
ORDER BY at;
DROP TABLE redrives;
DROP TABLE erasures;

-- +goose Down
CREATE TABLE erasures (
    id           uuid        PRIMARY KEY,
    client_id    text        NOT NULL,
    email_hmac   bytea       NOT NULL,
    erased       integer     NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    via          text        NOT NULL CHECK (via IN ('command', 'admin_api'))
);
INSERT INTO erasures (id, client_id, email_hmac, erased, requested_at, via)
SELECT gen_random_uuid(), client_id, email_hmac, count, at, CASE via WHEN 'cli' THEN 'command' ELSE 'admin_api' END
FROM audit WHERE action = 'erase' AND client_id IS NOT NULL AND email_hmac IS NOT NULL;
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
INSERT INTO redrives (id, via, requested_at, client_id, outcome, since, keys, redriven)
SELECT gen_random_uuid(), CASE via WHEN 'cli' THEN 'cli' ELSE 'admin' END, at, client_id, detail->>'outcome',
       (detail->>'since_seconds')::float8 * interval '1 second', coalesce((detail->>'keys_named')::int, 0), count
FROM audit WHERE action = 'redrive';
DROP TABLE audit;
