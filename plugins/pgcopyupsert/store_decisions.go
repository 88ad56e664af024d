package pgcopyupsert

import (
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/event"
)

// eventDecisionCreated is the outbox event type of a stored decision, as
// webhook endpoints name it in event_types.
const eventDecisionCreated = "decision.created"

// insertDecisionsAndWebhooks stores each decided transaction's decision
// (one decisions row per transaction: UNIQUE (workspace_id,
// transaction_id), and the row's id is the transaction's, so a replay finds
// it) and, for the decisions this statement inserted and only those, a
// decision.created webhook delivery per enabled endpoint of the workspace
// whose event_types is empty or names it (event_id: the decision's id). So
// a replayed batch, or the same decision spooled and delivered twice,
// queues no second delivery. It runs in the batch's transaction, so the
// transaction row, its decision and its webhooks commit together.
const insertDecisionsAndWebhooks = `
WITH d AS (
    INSERT INTO speculapro.decisions
           (id, workspace_id, transaction_id, transaction_occurred_at, external_id, decision, reason, score,
            rule_ids, decided_at, latency_ms)
    SELECT t.tx, t.ws, t.tx, t.at, t.ext, t.outcome, t.reason, t.score, COALESCE(r.rules, '{}'),
           COALESCE(t.decided, now()), t.latency
      FROM unnest($1::uuid[], $2::uuid[], $3::timestamptz[], $4::text[], $5::text[], $6::text[],
                  $7::numeric[], $8::text[], $9::timestamptz[], $10::int[])
           AS t(tx, ws, at, ext, outcome, reason, score, rules_text, decided, latency)
           CROSS JOIN LATERAL (SELECT NULLIF(t.rules_text, '')::uuid[] AS rules) r
     ORDER BY t.tx
        ON CONFLICT (workspace_id, transaction_id) DO NOTHING
    RETURNING id, workspace_id, transaction_id, transaction_occurred_at, external_id, decision, reason, score,
              rule_ids, decided_at, latency_ms
)
INSERT INTO speculapro.webhook_deliveries (workspace_id, endpoint_id, event_type, event_id, payload)
SELECT d.workspace_id, e.id, '` + eventDecisionCreated + `', d.id,
       jsonb_build_object('type', '` + eventDecisionCreated + `', 'id', d.id, 'workspace_id', d.workspace_id,
                          'created_at', d.decided_at,
                          'decision', jsonb_build_object('id', d.id, 'transaction_id', d.transaction_id,
                                                         'transaction_occurred_at', d.transaction_occurred_at,
                                                         'external_id', d.external_id, 'decision', d.decision,
                                                         'reason', d.reason, 'score', d.score,
                                                         'rule_ids', to_jsonb(d.rule_ids),
                                                         'decided_at', d.decided_at, 'latency_ms', d.latency_ms))
  FROM d
  JOIN speculapro.webhook_endpoints e
    ON e.workspace_id = d.workspace_id AND e.enabled
   AND (cardinality(e.event_types) = 0 OR '` + eventDecisionCreated + `' = ANY (e.event_types))
 ORDER BY d.id, e.id
    ON CONFLICT (endpoint_id, event_id) DO NOTHING`

// queueDecisions adds to b the decisions of the decided transactions among
// rows (none: nothing is queued, and it returns false) with their webhook
// deliveries.
func queueDecisions(b *pgx.Batch, rows []*event.Envelope) bool {
	var n int
	for _, e := range rows {
		if e.Decision != nil {
			n++
		}
	}
	if n == 0 {
		return false
	}
	txs, wss := make([]event.UUID, 0, n), make([]event.UUID, 0, n)
	ats, decided := make([]time.Time, 0, n), make([]*time.Time, 0, n)
	exts, outcomes, rules := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	reasons := make([]*string, 0, n)
	scores := make([]float64, 0, n)
	latencies := make([]*int32, 0, n)
	for _, e := range rows {
		d := e.Decision
		if d == nil {
			continue
		}
		txs, wss, ats, exts = append(txs, e.ID), append(wss, e.WorkspaceID), append(ats, e.OccurredAt), append(exts, e.ExternalID)
		outcomes = append(outcomes, string(d.Outcome))
		reasons = append(reasons, textOrNil(strings.Join(d.Reasons, ",")))
		scores = append(scores, d.Score)
		ids := make([]string, len(d.RuleIDs))
		for i, id := range d.RuleIDs {
			ids[i] = id.String()
		}
		rules = append(rules, pgTextArray(ids))
		decided = append(decided, timeOrNil(d.DecidedAt))
		var lat *int32
		if d.LatencyMS > 0 {
			v := int32(min(d.LatencyMS, 1<<31-1))
			lat = &v
		}
		latencies = append(latencies, lat)
	}
	b.Queue(insertDecisionsAndWebhooks, txs, wss, ats, exts, outcomes, reasons, scores, rules, decided, latencies)
	return true
}

// pgTextArray is ids as a PostgreSQL array literal ("" for none): unnest
// cannot take an array of arrays of differing lengths, so each row's rule
// IDs travel as text and are cast back.
func pgTextArray(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	return "{" + strings.Join(ids, ",") + "}"
}
