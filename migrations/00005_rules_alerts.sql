-- 00005_rules_alerts: what the stream evaluator and the decision API read and write, and what
-- analysts work on. The stream may replay: rows it writes carry a deterministic id or a dedupe key
-- with a UNIQUE constraint, so ON CONFLICT DO NOTHING makes a replay harmless.

-- A rule is a Bloblang expression evaluated against an event and the account's running totals.
-- version increases on every edit so a hit records exactly what fired.
CREATE TABLE speculapro.rules (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id  uuid        NOT NULL REFERENCES speculapro.workspaces (id),
    name          text        NOT NULL,
    description   text,
    applies_to    text        NOT NULL DEFAULT 'transaction' CHECK (applies_to IN ('transaction', 'account_event')),
    expression    text        NOT NULL,
    severity      text        NOT NULL DEFAULT 'medium' CHECK (severity IN ('low', 'medium', 'high', 'critical')),
    action        text        NOT NULL DEFAULT 'alert' CHECK (action IN ('alert', 'review', 'decline')),
    score         numeric(9,4) NOT NULL DEFAULT 0,
    enabled       boolean     NOT NULL DEFAULT true,
    version       integer     NOT NULL DEFAULT 1,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, name)
);
-- The evaluator loads a workspace's enabled rules.
CREATE INDEX rules_enabled_idx ON speculapro.rules (workspace_id) WHERE enabled;
SELECT speculapro.enable_workspace_isolation('speculapro.rules');

-- One row per rule that fired on one event. event_occurred_at locates the event's
-- partition (transactions are keyed by (id, occurred_at)).
CREATE TABLE speculapro.rule_hits (
    id                       uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id             uuid        NOT NULL,
    rule_id                  uuid        NOT NULL REFERENCES speculapro.rules (id),
    rule_version             integer     NOT NULL,
    event_id                 uuid        NOT NULL,      -- transaction or account event id
    event_occurred_at        timestamptz NOT NULL,
    customer_id              uuid,
    account_id               uuid,
    score                    numeric(9,4),
    details                  jsonb       NOT NULL DEFAULT '{}',
    hit_at                   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, rule_id, event_id)
);
CREATE INDEX rule_hits_event_idx    ON speculapro.rule_hits (workspace_id, event_id);
CREATE INDEX rule_hits_customer_idx ON speculapro.rule_hits (workspace_id, customer_id, hit_at DESC);
SELECT speculapro.enable_workspace_isolation('speculapro.rule_hits');

-- The decision API's answer for a transaction, kept for audit even when the transaction itself
-- has not reached the persister yet (it is copied onto transactions.decision* when it does).
CREATE TABLE speculapro.decisions (
    id                        uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id              uuid        NOT NULL,
    transaction_id            uuid        NOT NULL,
    transaction_occurred_at   timestamptz NOT NULL,
    external_id               text        NOT NULL,
    decision                  text        NOT NULL CHECK (decision IN ('approve', 'review', 'decline')),
    reason                    text,
    score                     numeric(9,4),
    rule_ids                  uuid[]      NOT NULL DEFAULT '{}',
    decided_at                timestamptz NOT NULL DEFAULT now(),
    latency_ms                integer,
    UNIQUE (workspace_id, transaction_id)
);
CREATE INDEX decisions_decided_idx ON speculapro.decisions (workspace_id, decided_at DESC);
SELECT speculapro.enable_workspace_isolation('speculapro.decisions');

CREATE TABLE speculapro.cases (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id  uuid        NOT NULL REFERENCES speculapro.workspaces (id),
    customer_id   uuid,
    title         text        NOT NULL,
    status        text        NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'investigating', 'closed')),
    priority      text        NOT NULL DEFAULT 'medium' CHECK (priority IN ('low', 'medium', 'high', 'critical')),
    assignee      text,
    resolution    text,
    opened_at     timestamptz NOT NULL DEFAULT now(),
    closed_at     timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX cases_status_idx   ON speculapro.cases (workspace_id, status, opened_at DESC);
CREATE INDEX cases_customer_idx ON speculapro.cases (workspace_id, customer_id) WHERE customer_id IS NOT NULL;
SELECT speculapro.enable_workspace_isolation('speculapro.cases');

-- dedupe_key is chosen by the writer (e.g. rule id + event id) so a replayed hit raises no second alert.
CREATE TABLE speculapro.alerts (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id    uuid        NOT NULL,
    dedupe_key      text        NOT NULL,
    rule_id         uuid        REFERENCES speculapro.rules (id),
    rule_hit_id     uuid        REFERENCES speculapro.rule_hits (id),
    customer_id     uuid,
    account_id      uuid,
    event_id        uuid,
    severity        text        NOT NULL DEFAULT 'medium' CHECK (severity IN ('low', 'medium', 'high', 'critical')),
    status          text        NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'acknowledged', 'closed')),
    title           text        NOT NULL,
    details         jsonb       NOT NULL DEFAULT '{}',
    case_id         uuid        REFERENCES speculapro.cases (id),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, dedupe_key)
);
CREATE INDEX alerts_status_idx   ON speculapro.alerts (workspace_id, status, created_at DESC);
CREATE INDEX alerts_customer_idx ON speculapro.alerts (workspace_id, customer_id, created_at DESC);
CREATE INDEX alerts_case_idx     ON speculapro.alerts (case_id) WHERE case_id IS NOT NULL;
SELECT speculapro.enable_workspace_isolation('speculapro.alerts');

-- The case's timeline: comments, status changes, alerts attached. Append-only.
CREATE TABLE speculapro.case_events (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id  uuid        NOT NULL,
    case_id       uuid        NOT NULL REFERENCES speculapro.cases (id),
    kind          text        NOT NULL,                   -- comment, status_changed, alert_attached, …
    actor         text,
    body          jsonb       NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX case_events_case_idx ON speculapro.case_events (workspace_id, case_id, created_at);
SELECT speculapro.enable_workspace_isolation('speculapro.case_events');
