-- +goose Up

-- run fences the attempts at a lead: each run of its job takes the next
-- number, and every write of a run is conditional on still holding the
-- latest, so that two runs at once (a job retried by hand while another runs,
-- a rescue of a job whose first run still writes) never both act.
ALTER TABLE leads ADD COLUMN run integer NOT NULL DEFAULT 0;

-- job_id is the River job that works the lead now: set with the job's insert
-- in the claim's (or re-open's, or reconciliation's) transaction. The
-- reconciler asks River about that job, not River's tables about the lead.
ALTER TABLE leads ADD COLUMN job_id bigint;

-- Leads claimed before this migration: their newest job.
UPDATE leads l SET job_id = (
    SELECT max(j.id) FROM river_job j
    WHERE j.kind = 'process_lead' AND j.args->>'lead_id' = l.id::text)
WHERE l.finished_at IS NULL;

-- reconcile_after orders the keys awaiting reconciliation: a key whose
-- look-up failed goes to the back of the line, behind the keys not tried yet.
ALTER TABLE idempotency_keys ADD COLUMN reconcile_after timestamptz;

CREATE INDEX idempotency_keys_reconcile_idx
    ON idempotency_keys (reconcile_after NULLS FIRST, updated_at) WHERE state = 'needs_reconciliation';

-- +goose Down
DROP INDEX idempotency_keys_reconcile_idx;
ALTER TABLE idempotency_keys DROP COLUMN reconcile_after;
ALTER TABLE leads DROP COLUMN job_id;
ALTER TABLE leads DROP COLUMN run;
