-- 00013_rule_mode: shadow rules, and what rule analytics count.

-- A shadow rule is evaluated wherever live rules are, with the same features, and its hits are
-- stored, but it raises no alert, queues no notification or webhook and never changes a decision.
-- Switching a rule between the modes is a new version (rules apply bumps it like any other change).
ALTER TABLE speculapro.rules
    ADD COLUMN mode text NOT NULL DEFAULT 'live' CHECK (mode IN ('live', 'shadow'));

-- Whether the hit was made by a shadow version of its rule. A boolean rather than a copy of the
-- mode: the one question every reader of a hit asks is "did this act?" (alerts, case work and
-- precision count only live hits), and rules keeps only a rule's current version, so the mode a
-- past version fired in must be kept on the hit itself.
ALTER TABLE speculapro.rule_hits
    ADD COLUMN shadow boolean NOT NULL DEFAULT false;

-- How many events each rule version was evaluated on, per hour of evaluation: the denominator of a
-- rule's hit rate. The stream adds each batch's counts in the same transaction as the batch's hits
-- and progress, so a batch written twice (a retry, a replay) counts once, like its hits. shadow is
-- the version's mode (a version has one). A deleted rule's counts go with it: a rule is only
-- deleted when nothing refers to it.
CREATE TABLE speculapro.rule_evaluations (
    workspace_id  uuid        NOT NULL,
    rule_id       uuid        NOT NULL REFERENCES speculapro.rules (id) ON DELETE CASCADE,
    rule_version  integer     NOT NULL,
    hour          timestamptz NOT NULL,
    shadow        boolean     NOT NULL DEFAULT false,
    events        bigint      NOT NULL,
    PRIMARY KEY (workspace_id, rule_id, rule_version, hour)
);
CREATE INDEX rule_evaluations_rule_idx ON speculapro.rule_evaluations (rule_id);
SELECT speculapro.enable_workspace_isolation('speculapro.rule_evaluations');

-- rules stats reads a workspace's hits since a time.
CREATE INDEX rule_hits_hit_at_idx ON speculapro.rule_hits (workspace_id, hit_at);
