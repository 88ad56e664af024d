-- 00009_worker: what the worker needs beyond 00006 to deliver the outbox safely with several
-- workers, rotate signing secrets and suspend endpoints that keep failing.

-- A claimed row stays 'pending': the claim moves next_attempt_at one lease ahead, counts the
-- attempt and names the worker holding it (claimed_by). A worker that dies mid-send leaves the
-- row to come due again when the lease runs out; one that records an outcome does so only while
-- claimed_by and attempts are still its own, so a worker whose lease ran out cannot overwrite the
-- outcome of the worker that took the row over.
ALTER TABLE speculapro.webhook_deliveries ADD COLUMN claimed_by text;
ALTER TABLE speculapro.notifications      ADD COLUMN claimed_by text;

-- Rotation: the previous secret keeps signing (a second v1= signature) until
-- previous_secret_expires_at, so a receiver can switch secrets without losing a delivery.
-- Suspension: consecutive_failures counts deliveries that ended 'failed' in a row (a delivered one
-- resets it); the worker disables the endpoint at SP_WEBHOOK_SUSPEND_AFTER and says why in
-- disabled_reason (as does a 410 Gone, or `speculapro webhook disable`).
ALTER TABLE speculapro.webhook_endpoints
    ADD COLUMN previous_secret_encrypted  bytea,
    ADD COLUMN previous_secret_expires_at timestamptz,
    ADD COLUMN consecutive_failures       integer NOT NULL DEFAULT 0,
    ADD COLUMN disabled_reason            text;

-- The worker's queue-depth metric counts pending rows per outbox; the due index covers it.
