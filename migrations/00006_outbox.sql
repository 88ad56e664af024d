-- 00006_outbox: notifications and webhook deliveries, written in the same transaction as the
-- change they announce and sent later by the worker (transactional outbox). The worker claims due
-- rows with SELECT … FOR UPDATE SKIP LOCKED on the *_due_idx indexes, so several workers share
-- the load without sending a row twice.

CREATE TABLE speculapro.notifications (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id     uuid        NOT NULL,
    dedupe_key       text        NOT NULL,
    kind             text        NOT NULL,               -- alert.created, case.assigned, …
    channel          text        NOT NULL,               -- email, slack, …
    recipient        text        NOT NULL,
    payload          jsonb       NOT NULL DEFAULT '{}',
    status           text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    sent_at          timestamptz,
    UNIQUE (workspace_id, dedupe_key)
);
CREATE INDEX notifications_due_idx ON speculapro.notifications (next_attempt_at) WHERE status = 'pending';
SELECT speculapro.enable_workspace_isolation('speculapro.notifications');

-- secret_encrypted signs deliveries (HMAC); it is stored encrypted like every other secret.
CREATE TABLE speculapro.webhook_endpoints (
    id                uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id      uuid        NOT NULL REFERENCES speculapro.workspaces (id),
    url               text        NOT NULL,
    secret_encrypted  bytea       NOT NULL,
    event_types       text[]      NOT NULL DEFAULT '{}',  -- empty: every event type
    enabled           boolean     NOT NULL DEFAULT true,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoints_workspace_idx ON speculapro.webhook_endpoints (workspace_id) WHERE enabled;
SELECT speculapro.enable_workspace_isolation('speculapro.webhook_endpoints');

CREATE TABLE speculapro.webhook_deliveries (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id     uuid        NOT NULL,
    endpoint_id      uuid        NOT NULL REFERENCES speculapro.webhook_endpoints (id),
    event_type       text        NOT NULL,
    event_id         uuid        NOT NULL,
    payload          jsonb       NOT NULL,
    status           text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_error       text,
    response_status  integer,
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    UNIQUE (endpoint_id, event_id)
);
CREATE INDEX webhook_deliveries_due_idx ON speculapro.webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint_idx ON speculapro.webhook_deliveries (workspace_id, endpoint_id, created_at DESC);
SELECT speculapro.enable_workspace_isolation('speculapro.webhook_deliveries');
