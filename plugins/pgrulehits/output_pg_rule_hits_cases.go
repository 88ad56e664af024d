package pgrulehits

// The case parts of the alert statement (insertAlertsAndOutbox): which
// alerts are new and which case each joins, the case rows, the case events
// and their webhook deliveries. They run in the statement that inserts the
// alerts, so an alert, its case and every step recorded for it commit
// together or not at all, with no round trip per alert.

// The outbox event types of the stream's case steps, as webhook endpoints
// name them in event_types: 'case.' followed by the case event's kind.
const (
	eventCaseOpened        = "case.opened"
	eventCaseAlertAttached = "case.alert_attached"
)

// caseActor is the actor of the case events the stream writes.
const caseActor = "stream"

const (
	// freshAlertsAndCases: fresh is the hits whose alert is not stored yet,
	// each with its alert's id and its case's group under the workspace's
	// case_grouping (customer: the customer's open case, the account's when
	// the event names no customer; account: the account's, the customer's
	// when it names no account; alert: a case of its own). groups is one
	// row per group, its priority the most severe of its new alerts.
	// case_rows opens each group's case, or joins the group's open case and
	// raises its priority to the new alerts' when they are more severe (the
	// case's priority is its most severe open alert's). The groups are
	// written in key order, so two processes lock cases in the same order.
	freshAlertsAndCases = `fresh AS MATERIALIZED (
    SELECT f.*,
           CASE WHEN f.grouping = 'customer' AND f.customer_id IS NOT NULL THEN 'customer:' || f.customer_id::text
                WHEN f.grouping <> 'alert' AND f.account_id IS NOT NULL THEN 'account:' || f.account_id::text
                WHEN f.grouping = 'account' AND f.customer_id IS NOT NULL THEN 'customer:' || f.customer_id::text
                ELSE 'alert:' || f.alert_id::text END AS group_key
      FROM (SELECT gen_random_uuid() AS alert_id, i.n, h.id AS hit_id, h.workspace_id, h.rule_id, h.event_id,
                   h.customer_id, h.account_id, r.severity, coalesce(nullif(r.description, ''), r.name) AS title,
                   h.details || jsonb_build_object('rule_version', h.rule_version, 'score', h.score,
                                                   'event_occurred_at', h.event_occurred_at) AS details,
                   w.case_grouping AS grouping
              FROM i
              JOIN speculapro.rule_hits h ON h.workspace_id = i.ws AND h.rule_id = i.rule AND h.event_id = i.ev
              JOIN speculapro.rules r ON r.id = h.rule_id
              JOIN speculapro.workspaces w ON w.id = h.workspace_id
             WHERE NOT EXISTS (SELECT 1 FROM speculapro.alerts a
                                WHERE a.workspace_id = h.workspace_id
                                  AND a.dedupe_key = h.rule_id::text || ':' || h.event_id::text)) f
), groups AS (
    SELECT workspace_id, group_key,
           (array_agg(customer_id ORDER BY n))[1] AS customer_id,
           (array_agg(account_id ORDER BY n))[1] AS account_id,
           (array_agg(severity ORDER BY ` + severityRank + `severity) DESC, n))[1] AS priority,
           (array_agg(title ORDER BY ` + severityRank + `severity) DESC, n))[1] AS title
      FROM fresh
     GROUP BY workspace_id, group_key
), case_rows AS (
    INSERT INTO speculapro.cases AS c (workspace_id, customer_id, account_id, group_key, title, priority)
    SELECT g.workspace_id, g.customer_id, CASE WHEN g.group_key LIKE 'customer:%' THEN NULL ELSE g.account_id END,
           g.group_key, g.title, g.priority
      FROM groups g
     ORDER BY g.workspace_id, g.group_key
        ON CONFLICT (workspace_id, group_key) WHERE status <> 'closed' DO UPDATE
       SET priority = CASE WHEN ` + severityRank + `excluded.priority) > ` + severityRank + `c.priority)
                           THEN excluded.priority ELSE c.priority END,
           version = c.version + 1, updated_at = now()
    RETURNING c.id, c.workspace_id, c.group_key, c.status, c.priority, c.title, c.customer_id, c.account_id,
              c.opened_at, c.version, c.xmax = 0 AS opened
)`

	// caseStepsAndOutbox: steps records an 'opened' event for each case
	// case_rows inserted (and attached an alert to) and an 'alert_attached'
	// event per new alert; case_deliveries queues each step for every
	// enabled webhook endpoint of the workspace subscribed to its type
	// ('case.' and the kind), the event's id as the delivery's event_id.
	caseStepsAndOutbox = `steps AS (
    INSERT INTO speculapro.case_events (workspace_id, case_id, kind, actor, body)
    SELECT s.workspace_id, s.case_id, s.kind, '` + caseActor + `', s.body
      FROM (SELECT k.workspace_id, k.id AS case_id, 'opened' AS kind, 0 AS step, NULL::uuid AS alert_id,
                   jsonb_build_object('group_key', k.group_key, 'priority', k.priority) AS body
              FROM case_rows k
             WHERE k.opened AND EXISTS (SELECT 1 FROM new_alerts a WHERE a.case_id = k.id)
            UNION ALL
            SELECT a.workspace_id, a.case_id, 'alert_attached', 1, a.id,
                   jsonb_build_object('alert_id', a.id, 'rule_id', a.rule_id, 'severity', a.severity)
              FROM new_alerts a) s
     ORDER BY s.case_id, s.step, s.alert_id
    RETURNING id, workspace_id, case_id, kind, body, created_at
), case_payloads AS (
    SELECT e.id, e.workspace_id, 'case.' || e.kind AS type,
           jsonb_build_object('type', 'case.' || e.kind, 'id', e.id, 'workspace_id', e.workspace_id,
                              'created_at', e.created_at,
                              'case', jsonb_build_object('id', k.id, 'status', k.status, 'priority', k.priority,
                                                         'title', k.title, 'customer_id', k.customer_id,
                                                         'account_id', k.account_id, 'group_key', k.group_key,
                                                         'opened_at', k.opened_at, 'version', k.version))
           || CASE WHEN p.id IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('alert', p.payload -> 'alert') END
           AS payload
      FROM steps e
      JOIN case_rows k ON k.id = e.case_id
      LEFT JOIN payloads p ON p.id = (e.body ->> 'alert_id')::uuid
), case_deliveries AS (
    INSERT INTO speculapro.webhook_deliveries (workspace_id, endpoint_id, event_type, event_id, payload)
    SELECT p.workspace_id, e.id, p.type, p.id, p.payload
      FROM case_payloads p
      JOIN speculapro.webhook_endpoints e
        ON e.workspace_id = p.workspace_id AND e.enabled
       AND (cardinality(e.event_types) = 0 OR p.type = ANY (e.event_types))
     ORDER BY p.id, e.id
        ON CONFLICT (endpoint_id, event_id) DO NOTHING
    RETURNING 1
)`

	// severityRank orders severities and priorities (low < medium < high <
	// critical); it is called with the value in parentheses after it.
	severityRank = `array_position(ARRAY['low', 'medium', 'high', 'critical'], `
)
