package pgwritetest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/caseevent"
)

// caseChecks are what must hold of the cases the stream wrote, each a query
// counting the rows that break it (the database's every workspace, read as
// a superuser). They restate the grouping and priority rules independently
// of the stream's statement.
var caseChecks = []struct{ what, query string }{
	{"alerts in no case", `SELECT count(*) FROM speculapro.alerts WHERE case_id IS NULL`},
	{"alerts whose case is not the open case of their group", `
SELECT count(*) FROM speculapro.alerts a
  JOIN speculapro.workspaces w ON w.id = a.workspace_id
  JOIN speculapro.cases c ON c.id = a.case_id
 WHERE c.group_key <> CASE
       WHEN w.case_grouping = 'customer' AND a.customer_id IS NOT NULL THEN 'customer:' || a.customer_id::text
       WHEN w.case_grouping <> 'alert' AND a.account_id IS NOT NULL THEN 'account:' || a.account_id::text
       WHEN w.case_grouping = 'account' AND a.customer_id IS NOT NULL THEN 'customer:' || a.customer_id::text
       ELSE 'alert:' || a.id::text END`},
	{"alerts or case events of a case that does not exist", `
SELECT (SELECT count(*) FROM speculapro.alerts a
         WHERE a.case_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM speculapro.cases c WHERE c.id = a.case_id))
     + (SELECT count(*) FROM speculapro.case_events e
         WHERE NOT EXISTS (SELECT 1 FROM speculapro.cases c WHERE c.id = e.case_id))`},
	{"cases holding no alert", `
SELECT count(*) FROM speculapro.cases c
 WHERE NOT EXISTS (SELECT 1 FROM speculapro.alerts a WHERE a.case_id = c.id)`},
	{"cases without exactly one 'opened' event", `
SELECT count(*) FROM speculapro.cases c
 WHERE (SELECT count(*) FROM speculapro.case_events e WHERE e.case_id = c.id AND e.kind = 'opened') <> 1`},
	{"alerts without exactly one 'alert_attached' event in their case", `
SELECT count(*) FROM speculapro.alerts a
 WHERE (SELECT count(*) FROM speculapro.case_events e
         WHERE e.case_id = a.case_id AND e.kind = 'alert_attached' AND e.body ->> 'alert_id' = a.id::text) <> 1`},
	{"'alert_attached' events beyond one per alert", `
SELECT (SELECT count(*) FROM speculapro.case_events WHERE kind = 'alert_attached')
     - (SELECT count(*) FROM speculapro.alerts)`},
	{"case events not written by the stream", `
SELECT count(*) FROM speculapro.case_events WHERE actor IS DISTINCT FROM 'stream'`},
	{"groups with more than one open case", `
SELECT count(*) FROM (SELECT 1 FROM speculapro.cases WHERE status <> 'closed'
                       GROUP BY workspace_id, group_key HAVING count(*) > 1) g`},
	{"cases whose priority is not their most severe open alert's", `
SELECT count(*) FROM speculapro.cases c
 WHERE c.priority IS DISTINCT FROM (
       SELECT a.severity FROM speculapro.alerts a WHERE a.case_id = c.id AND a.status <> 'closed'
        ORDER BY array_position(ARRAY['low', 'medium', 'high', 'critical'], a.severity) DESC LIMIT 1)`},
	{"case events of a subscribed endpoint without exactly one delivery", `
SELECT count(*) FROM speculapro.case_events e
  JOIN speculapro.webhook_endpoints w
    ON w.workspace_id = e.workspace_id AND w.enabled
   AND (cardinality(w.event_types) = 0 OR 'case.' || e.kind = ANY (w.event_types))
 WHERE (SELECT count(*) FROM speculapro.webhook_deliveries d
         WHERE d.endpoint_id = w.id AND d.event_id = e.id AND d.event_type = 'case.' || e.kind) <> 1`},
	{"case deliveries beyond one per event and subscribed endpoint", `
SELECT count(*) FROM speculapro.webhook_deliveries d
 WHERE d.event_type LIKE 'case.%'
   AND NOT EXISTS (SELECT 1 FROM speculapro.case_events e JOIN speculapro.webhook_endpoints w ON w.id = d.endpoint_id
                    WHERE e.id = d.event_id AND 'case.' || e.kind = d.event_type AND w.enabled
                      AND (cardinality(w.event_types) = 0 OR d.event_type = ANY (w.event_types)))`},
}

// CaseFaults checks the cases, case events and case deliveries in conn's
// database: every alert in exactly one case, the open case of its group;
// every case holding an alert; no alert or case event of a missing case;
// each case opened once; one 'alert_attached' event per alert; at most one
// open case per group; each case's priority its most severe open alert's;
// each case event delivered once to each subscribed endpoint and to no
// other. It returns one line per broken rule, none when all hold.
func CaseFaults(t testing.TB, conn *pgx.Conn) []string {
	t.Helper()
	var faults []string
	for _, c := range caseChecks {
		if n := Count(t, conn, c.query); n != 0 {
			faults = append(faults, fmt.Sprintf("%s: %d", c.what, n))
		}
	}
	return faults
}

// CaseBodyFault says how a case.* webhook body differs from caseevent's one
// shape (its keys BodyKeys, its case's CaseKeys, its event's EventKeys, the
// type 'case.' and the event's kind), nil when it has it.
func CaseBodyFault(body []byte) error {
	var b struct {
		Type  string         `json:"type"`
		Case  map[string]any `json:"case"`
		Event map[string]any `json:"event"`
	}
	var top map[string]any
	if err := json.Unmarshal(body, &top); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return fmt.Errorf("case or event not an object: %w", err)
	}
	for _, k := range []struct {
		what string
		got  map[string]any
		want []string
	}{{"body", top, caseevent.BodyKeys}, {"case", b.Case, caseevent.CaseKeys}, {"event", b.Event, caseevent.EventKeys}} {
		if got, want := slices.Sorted(maps.Keys(k.got)), slices.Sorted(slices.Values(k.want)); !slices.Equal(got, want) {
			return fmt.Errorf("%s keys %v, want %v", k.what, got, want)
		}
	}
	if kind, _ := b.Event["kind"].(string); b.Type != "case."+kind {
		return fmt.Errorf("type %q for an event of kind %q", b.Type, kind)
	}
	return nil
}
