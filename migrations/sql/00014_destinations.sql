-- +goose Up

-- Destinations: the downstreams are configured by name (the clients file's
-- destinations, besides the environment's enrichment, crm and
-- notification), so their names are no longer a fixed list. Existing rows
-- are kept as they are.
ALTER TABLE downstreams DROP CONSTRAINT IF EXISTS downstreams_name_check;
ALTER TABLE leads DROP CONSTRAINT IF EXISTS leads_waiting_for_check;
ALTER TABLE leads DROP CONSTRAINT IF EXISTS leads_booked_for_check;
ALTER TABLE lead_calls DROP CONSTRAINT IF EXISTS lead_calls_step_check;
ALTER TABLE lead_calls ADD CONSTRAINT lead_calls_step_check CHECK (step IN
    ('enrichment', 'crm', 'crm_lookup', 'crm_token', 'crm_person', 'notification', 'notification_lookup'));

-- A destination that refused its credentials is down until a call is
-- accepted again (a corrected clients file): unauthorized says why it is.
ALTER TABLE downstreams ADD COLUMN unauthorized boolean NOT NULL DEFAULT false;

-- The delivery log names each call's destination and its kind; NULL for a
-- call logged before destinations (its step says which of the
-- environment's three it went to).
ALTER TABLE lead_calls ADD COLUMN destination text;
ALTER TABLE lead_calls ADD COLUMN kind text;

-- A lead keeps the CRM destination of its first CRM step (a write that may
-- have been applied is looked up where it was made), what that
-- destination's preparing step gave (Pipedrive's person), and the state of
-- each of its notification channels: [{"name", "state", "failures",
-- "receipt", "since"}], NULL until its channels are chosen.
-- notify_outcome is every channel's end: none for a client without any.
ALTER TABLE leads ADD COLUMN crm_destination text;
ALTER TABLE leads ADD COLUMN crm_prepared text;
ALTER TABLE leads ADD COLUMN channels jsonb;
ALTER TABLE leads DROP CONSTRAINT IF EXISTS leads_notify_outcome_check;
ALTER TABLE leads ADD CONSTRAINT leads_notify_outcome_check CHECK (notify_outcome IN ('sent', 'failed', 'none'));

-- +goose Down
ALTER TABLE leads DROP CONSTRAINT leads_notify_outcome_check;
UPDATE leads SET notify_outcome = NULL WHERE notify_outcome = 'none';
ALTER TABLE leads ADD CONSTRAINT leads_notify_outcome_check CHECK (notify_outcome IN ('sent', 'failed'));
ALTER TABLE leads DROP COLUMN channels;
ALTER TABLE leads DROP COLUMN crm_prepared;
ALTER TABLE leads DROP COLUMN crm_destination;
ALTER TABLE lead_calls DROP COLUMN kind;
ALTER TABLE lead_calls DROP COLUMN destination;
ALTER TABLE downstreams DROP COLUMN unauthorized;
ALTER TABLE lead_calls DROP CONSTRAINT lead_calls_step_check;
ALTER TABLE lead_calls ADD CONSTRAINT lead_calls_step_check CHECK (step IN ('enrichment', 'crm', 'crm_lookup', 'notification'));
