-- +goose Up
-- The W3C traceparent of the request that last claimed or re-opened a
-- lead's key: the lead's jobs, downstream calls and callback deliveries
-- continue that trace, whoever starts them (a retry, a redrive, a release,
-- the reconciler). It holds ids only (trace id, span id, flags). NULL for a
-- lead claimed before it, or without a trace.
ALTER TABLE leads ADD COLUMN IF NOT EXISTS trace_parent text;

-- +goose Down
ALTER TABLE leads DROP COLUMN IF EXISTS trace_parent;
