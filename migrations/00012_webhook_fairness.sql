-- 00012_webhook_fairness: what the worker needs to claim webhook deliveries fairly, endpoint by
-- endpoint, and to suspend an endpoint that has failed for a long time.

-- The claim takes each endpoint's oldest due deliveries, a few per endpoint and round, so one
-- endpoint's backlog never fills a worker's batch; it walks this index once per endpoint.
CREATE INDEX webhook_deliveries_endpoint_due_idx
    ON speculapro.webhook_deliveries (endpoint_id, next_attempt_at) WHERE status = 'pending';

-- Deliveries in flight (claimed, lease running, outcome not yet recorded), counted per workspace
-- and per endpoint against their concurrency limits on every claim: a small index, as few rows are
-- ever in flight.
CREATE INDEX webhook_deliveries_in_flight_idx
    ON speculapro.webhook_deliveries (workspace_id, endpoint_id) WHERE status = 'pending' AND claimed_by IS NOT NULL;

-- failing_since: when the endpoint's current run of failed attempts began (NULL while its last
-- attempt succeeded); the worker suspends an endpoint that has failed every attempt for
-- SP_WEBHOOK_SUSPEND_AFTER_FAILING.
ALTER TABLE speculapro.webhook_endpoints ADD COLUMN failing_since timestamptz;
