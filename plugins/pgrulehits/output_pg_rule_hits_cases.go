package pgrulehits

import "github.com/speculapro/speculapro/internal/caseevent"

// The case parts of a batch's alert write. In insertAlertsAndOutbox,
// casesOfAlerts opens or joins the case of every alert the batch inserts,
// the alerts go into those cases, and caseSteps records the case steps and
// their webhook deliveries: one statement, so an alert, its case and every
// step recorded for it commit together or not at all, with one round trip
// per batch, none per alert.

// The outbox event types of the stream's case steps, as webhook endpoints
// name them in event_types: 'case.' followed by the case event's kind.
const (
	eventCaseOpened        = "case.opened"
	eventCaseAlertAttached = "case.alert_attached"
)

// caseActor is the actor of the case events the stream writes.
const caseActor = "stream"

const (
	// batchHits is the batch's alerting hits, in key order: $1 workspaces,
	// $2 rules, $3 events.
	batchHits = `i AS (
    SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[]) WITH ORDINALITY AS i(ws, rule, ev, n)
)`

	// alertingHits is the batch's alerting hits, each with its alert's
	// dedupe key and id (derived from the key, so both statements name the
	// same alert) and its case's group under the workspace's case_grouping
	// (customer: the customer's, the account's when the event names no
	// customer; account: the account's, the customer's when it names no
	// account; alert: a case of its own).
	alertingHits = `alerting AS MATERIALIZED (
    SELECT f.*,
           CASE WHEN f.grouping = 'customer' AND f.customer_id IS NOT NULL THEN 'customer:' || f.customer_id::text
                WHEN f.grouping <> 'alert' AND f.account_id IS NOT NULL THEN 'account:' || f.account_id::text
                WHEN f.grouping = 'account' AND f.customer_id IS NOT NULL THEN 'customer:' || f.customer_id::text
                ELSE 'alert:' || f.alert_id::text END AS group_key
      FROM (SELECT md5(h.workspace_id::text || '/' || d.key)::uuid AS alert_id, d.key AS dedupe_key, i.n,
                   h.id AS hit_id, h.workspace_id, h.rule_id, h.event_id, h.customer_id, h.account_id, r.severity,
                   coalesce(nullif(r.description, ''), r.name) AS title,
                   h.details || jsonb_build_object('rule_version', h.rule_version, 'score', h.score,
                                                   'event_occurred_at', h.event_occurred_at) AS details,
                   w.case_grouping AS grouping
              FROM i
              JOIN speculapro.rule_hits h ON h.workspace_id = i.ws AND h.rule_id = i.rule AND h.event_id = i.ev
              JOIN speculapro.rules r ON r.id = h.rule_id
              JOIN speculapro.workspaces w ON w.id = h.workspace_id
             CROSS JOIN LATERAL (SELECT h.rule_id::text || ':' || h.event_id::text AS key) d) f
)`

	// casesOfAlerts (CTEs after alertingHits) opens the case of each
	// group with a hit whose alert is not stored yet (fresh: only they
	// touch a case, so a replay changes none), or joins the group's open
	// case (the partial unique index decides, so two processes cannot open
	// two: the second waits for the first and joins its case) and raises
	// its priority to the new alerts' most severe when that is higher (a
	// case's priority is its most severe open alert's). Either way the case
	// row stays locked until the commit, so it is still open when the
	// alerts are inserted, and RETURNING hands the alert insert each case
	// as it now is: the same statement writes the alerts, with no second
	// pass over the hits and no lookup of the case. A case the statement
	// inserted has version 1; one it joined has a higher one. Groups are
	// written in key order, so two processes lock cases in the same order.
	// fresh is read from the statement's snapshot: an alert another process
	// stores after it began still looks new here, and the statement's last
	// column counts it (insertAlertsAndOutbox).
	// case_of holds the case ids as a jsonb object keyed by workspace and
	// group, looked up per alert, and case_bodies the cases by id, looked
	// up per step only when a webhook endpoint wants it: a join between
	// two of the statement's CTEs is planned from an estimate of one row a
	// side, a nested loop comparing every alert with every case (a quarter
	// of a million comparisons for a batch of 500), where a lookup in a
	// jsonb object is a binary search.
	casesOfAlerts = `fresh AS (
    SELECT * FROM alerting h
     WHERE NOT EXISTS (SELECT 1 FROM speculapro.alerts a
                        WHERE a.workspace_id = h.workspace_id AND a.dedupe_key = h.dedupe_key)
), groups AS (
    SELECT workspace_id, group_key,
           (array_agg(customer_id ORDER BY n))[1] AS customer_id,
           (array_agg(account_id ORDER BY n))[1] AS account_id,
           (array_agg(severity ORDER BY ` + severityRank + `severity) DESC, n))[1] AS priority,
           (array_agg(title ORDER BY ` + severityRank + `severity) DESC, n))[1] AS title
      FROM fresh
     GROUP BY workspace_id, group_key
), touched AS (
    INSERT INTO speculapro.cases AS c (workspace_id, customer_id, account_id, group_key, title, priority)
    SELECT g.workspace_id, g.customer_id, CASE WHEN g.group_key LIKE 'customer:%' THEN NULL ELSE g.account_id END,
           g.group_key, g.title, g.priority
      FROM groups g
     ORDER BY g.workspace_id, g.group_key
        ON CONFLICT (workspace_id, group_key) WHERE status <> 'closed' DO UPDATE
       SET priority = CASE WHEN ` + severityRank + `excluded.priority) > ` + severityRank + `c.priority)
                           THEN excluded.priority ELSE c.priority END,
           version = c.version + 1, updated_at = now()
    RETURNING c.id, c.workspace_id, c.group_key, c.version = 1 AS opened, c.status, c.priority, c.title,
              c.customer_id, c.account_id, c.opened_at, c.version, c.assignee, c.disposition
), case_of AS (
    SELECT jsonb_object_agg(c.workspace_id::text || '/' || c.group_key, c.id) AS ids FROM touched c
), case_bodies AS (
    SELECT jsonb_object_agg(c.id::text, ` + caseevent.CaseSQL + `) AS bodies
      FROM touched c
)`

	// caseSteps (CTEs of insertAlertsAndOutbox, after payloads): step_rows
	// is an 'opened' step for each case the statement opened and an
	// 'alert_attached' step per new alert; steps writes them (actor
	// 'stream'); case_deliveries queues each for every enabled webhook
	// endpoint of the workspace subscribed to its type ('case.' and the
	// kind), the step's id as the delivery's event_id, with the case as it
	// is after this transaction and the step: caseevent's one shape of a
	// case.* body, the same as the case API's. The alert an alert_attached
	// step attached is named in the step's body, as the API names what its
	// changes change; its own alert.created delivery carries it whole.
	caseSteps = `step_rows AS MATERIALIZED (
    SELECT gen_random_uuid() AS id, s.*
      FROM (SELECT c.workspace_id, c.id AS case_id, 'opened' AS kind, 0 AS step, NULL::uuid AS alert_id,
                   jsonb_build_object('group_key', c.group_key, 'priority', c.priority) AS body
              FROM touched c
             WHERE c.opened
            UNION ALL
            SELECT p.workspace_id, p.case_id, 'alert_attached', 1, p.id,
                   jsonb_build_object('alert_id', p.id, 'rule_id', p.alert -> 'rule_id', 'severity', p.severity)
              FROM payloads p) s
), steps AS (
    INSERT INTO speculapro.case_events (id, workspace_id, case_id, kind, actor, body)
    SELECT s.id, s.workspace_id, s.case_id, s.kind, '` + caseActor + `', s.body
      FROM step_rows s
     ORDER BY s.case_id, s.step, s.alert_id
    RETURNING kind
), case_deliveries AS (
    INSERT INTO speculapro.webhook_deliveries (workspace_id, endpoint_id, event_type, event_id, payload)
    SELECT s.workspace_id, e.id, 'case.' || s.kind, s.id,
           jsonb_build_object('type', 'case.' || s.kind, 'id', s.id, 'workspace_id', s.workspace_id, 'created_at', now(),
                              'case', (SELECT bodies FROM case_bodies) -> s.case_id::text,
                              'event', jsonb_build_object('kind', s.kind, 'actor', '` + caseActor + `', 'body', s.body))
      FROM step_rows s
      JOIN speculapro.webhook_endpoints e
        ON e.workspace_id = s.workspace_id AND e.enabled
       AND (cardinality(e.event_types) = 0 OR 'case.' || s.kind = ANY (e.event_types))
     ORDER BY s.id, e.id
        ON CONFLICT (endpoint_id, event_id) DO NOTHING
    RETURNING 1
)`

	// severityRank orders severities and priorities (low < medium < high <
	// critical); the value and a closing parenthesis follow it.
	severityRank = `array_position(ARRAY['low', 'medium', 'high', 'critical'], `
)
