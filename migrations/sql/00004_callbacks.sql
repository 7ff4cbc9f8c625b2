-- +goose Up

-- One row per finish of a key whose client has a callback: the outbox of
-- callback deliveries. The row is written by the finishing transaction,
-- with the job that delivers it, so that no finish is announced that did not
-- happen and none that happened is lost. id is the webhook-id of every
-- delivery attempt of it. payload holds the body sent, fixed at the
-- finish: ids and the stored final response, no personal data.
CREATE TABLE callbacks (
    id           uuid        PRIMARY KEY,
    client_id    text        NOT NULL,
    lead_id      uuid        NOT NULL,
    payload      json        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    attempts     integer     NOT NULL DEFAULT 0,
    delivered_at timestamptz,
    given_up_at  timestamptz,
    CONSTRAINT callbacks_end_check CHECK (delivered_at IS NULL OR given_up_at IS NULL)
);

-- The deliveries still owed, for the age of the oldest in the metrics.
CREATE INDEX callbacks_pending_idx ON callbacks (created_at)
    WHERE delivered_at IS NULL AND given_up_at IS NULL;

-- +goose Down
DROP TABLE callbacks;
