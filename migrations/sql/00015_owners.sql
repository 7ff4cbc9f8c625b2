-- +goose Up

-- A lead's owner, chosen once, by the save before its first CRM step
-- (owner_decided; owner NULL when no rule matched or every owner of the
-- pool was away), and kept: a retry, a re-open, a redrive or a release
-- never chooses again, and an amendment takes its chain's.
ALTER TABLE leads ADD COLUMN owner text;
ALTER TABLE leads ADD COLUMN owner_decided boolean NOT NULL DEFAULT false;

-- The turn of each pool (a client's rule's owners, by the pool's key):
-- how many leads it has given an owner. The next lead's owner is the one
-- after, among the pool's owners not away: the rotation is kept here, not
-- in a process, so that any number of workers take turns fairly.
CREATE TABLE owner_turns (
    pool text   PRIMARY KEY,
    turn bigint NOT NULL DEFAULT 0
);

-- +goose Down
DROP TABLE owner_turns;
ALTER TABLE leads DROP COLUMN owner_decided;
ALTER TABLE leads DROP COLUMN owner;
