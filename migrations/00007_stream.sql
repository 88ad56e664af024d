-- 00007_stream: what the stream evaluator needs beyond 00005.

-- Whether a hit raises an alert. A rule with alert = false still records its hits (rule_hits),
-- so a new rule can be watched for a while before it is allowed to page anyone.
ALTER TABLE speculapro.rules ADD COLUMN alert boolean NOT NULL DEFAULT true;

-- Who is told about what. The stream writes one notifications row per enabled subscription whose
-- threshold an alert meets, in the same transaction as the alert (transactional outbox, 00006).
-- event_types empty means every event type; min_severity is the lowest severity that notifies.
CREATE TABLE speculapro.notification_subscriptions (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id  uuid        NOT NULL REFERENCES speculapro.workspaces (id),
    channel       text        NOT NULL CHECK (channel IN ('email', 'webhook')),
    recipient     text        NOT NULL,
    event_types   text[]      NOT NULL DEFAULT '{}',
    min_severity  text        NOT NULL DEFAULT 'low' CHECK (min_severity IN ('low', 'medium', 'high', 'critical')),
    enabled       boolean     NOT NULL DEFAULT true,
    created_at    timestamptz NOT NULL DEFAULT now()
);
-- The stream looks up a workspace's enabled subscriptions for every new alert.
CREATE INDEX notification_subscriptions_workspace_idx
    ON speculapro.notification_subscriptions (workspace_id) WHERE enabled;
SELECT speculapro.enable_workspace_isolation('speculapro.notification_subscriptions');
