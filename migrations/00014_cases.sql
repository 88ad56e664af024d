-- 00014_cases: what turns alerts into investigations. The stream opens a case, or attaches a new
-- alert to its group's open case, in the transaction that creates the alert; the case API
-- (assign, comment, change status, close, reopen) changes it, each change one case event.

-- How a workspace groups its alerts into cases: one open case per customer (an alert without a
-- customer goes to its account's), per account, or one case per alert.
ALTER TABLE speculapro.workspaces
    ADD COLUMN case_grouping text NOT NULL DEFAULT 'customer'
        CHECK (case_grouping IN ('customer', 'account', 'alert'));

-- group_key: the grouping a case was opened under ('customer:<uuid>', 'account:<uuid>',
-- 'alert:<uuid>'). version: raised by every change, the case's ETag. disposition: the outcome,
-- set when the case is closed and cleared when it is reopened.
ALTER TABLE speculapro.cases
    ADD COLUMN account_id  uuid,
    ADD COLUMN group_key   text,
    ADD COLUMN version     bigint NOT NULL DEFAULT 1,
    ADD COLUMN disposition text CHECK (disposition IN ('true_positive', 'false_positive', 'inconclusive')),
    ADD COLUMN closed_note text;

-- The stream rewrites an open case's priority, version and updated_at whenever alerts join it,
-- columns no index holds: room left on each page keeps those updates on the page (HOT), with no
-- new index entries.
ALTER TABLE speculapro.cases SET (fillfactor = 80);

-- At most one open case per group: two stream processes writing the same customer's alerts at
-- once (a rebalance) meet on this index, and the second joins the first's case
-- (INSERT … ON CONFLICT (workspace_id, group_key) WHERE status <> 'closed').
CREATE UNIQUE INDEX cases_open_group_idx
    ON speculapro.cases (workspace_id, group_key) WHERE status <> 'closed';

-- Listing cases by status, newest first, with a cursor on (opened_at, id).
DROP INDEX speculapro.cases_status_idx;
CREATE INDEX cases_status_idx ON speculapro.cases (workspace_id, status, opened_at DESC, id DESC);
CREATE INDEX cases_assignee_idx ON speculapro.cases (workspace_id, assignee);

-- The kinds of step a case's timeline records; actor is 'stream' for the stream's steps and the
-- analyst's name for the API's.
ALTER TABLE speculapro.case_events
    ADD CONSTRAINT case_events_kind_check
        CHECK (kind IN ('opened', 'alert_attached', 'assigned', 'commented', 'status_changed', 'closed', 'reopened'));
