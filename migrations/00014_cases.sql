-- 00014_cases: what alerts need to open and join cases, and what the case API needs to change them.

-- How a workspace groups its alerts into cases: one open case per customer (the default), per
-- account, or one case per alert.
ALTER TABLE speculapro.workspaces
    ADD COLUMN case_grouping text NOT NULL DEFAULT 'customer' CHECK (case_grouping IN ('customer', 'account', 'alert'));

-- group_key is the grouping a case was opened under ('customer:<uuid>', 'account:<uuid>',
-- 'alert:<uuid>'); version is bumped by every change and is the case API's ETag; disposition and
-- closed_note are set when the case is closed and cleared when it is reopened.
ALTER TABLE speculapro.cases
    ADD COLUMN account_id  uuid,
    ADD COLUMN group_key   text,
    ADD COLUMN version     bigint NOT NULL DEFAULT 1,
    ADD COLUMN disposition text CHECK (disposition IN ('true_positive', 'false_positive', 'inconclusive')),
    ADD COLUMN closed_note text;

-- At most one case per group is not closed, so two stream processes cannot open two.
CREATE UNIQUE INDEX cases_open_group_idx ON speculapro.cases (workspace_id, group_key) WHERE status <> 'closed';
-- Open cases, newest first, paged by (opened_at, id).
CREATE INDEX cases_page_idx ON speculapro.cases (workspace_id, status, opened_at DESC, id DESC);
CREATE INDEX cases_assignee_idx ON speculapro.cases (workspace_id, assignee);
