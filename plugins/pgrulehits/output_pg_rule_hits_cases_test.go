package pgrulehits

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/devtools/pgwritetest"
	"github.com/speculapro/speculapro/internal/event"
)

// failFaults fails t with each broken case rule pgwritetest.CaseFaults found.
func failFaults(t *testing.T, faults []string) {
	t.Helper()
	for _, f := range faults {
		t.Error(f)
	}
}

// Each workspace groups the same alerts by its own setting: one case per
// customer (the account's when the event names no customer), per account,
// or per alert.
func TestCasesGroupAlertsByTheWorkspaceSetting(t *testing.T) {
	h := newHitsHarness(t)
	byAccount, byAlert := h.workspace("by-account"), h.workspace("by-alert")
	h.exec("UPDATE speculapro.workspaces SET case_grouping = 'account' WHERE id = $1", byAccount)
	h.exec("UPDATE speculapro.workspaces SET case_grouping = 'alert' WHERE id = $1", byAlert)
	noCustomer := func(e *event.Envelope) {
		if e.AccountExternalID == "acc-3" {
			e.CustomerExternalID = ""
		}
	}
	for _, ws := range []event.UUID{h.ws, byAccount, byAlert} {
		rule := h.rules["large_amount"]
		if ws != h.ws {
			rule = h.rule(ws, testRule{name: "large_amount", severity: "high", alert: true})
		}
		// 30 events: customers cust-0..6 (n%7), accounts acc-0..10 (n%11);
		// the 3 events of acc-3 (n = 3, 14, 25) name no customer.
		h.writeHits(evaluatedWith(t, ws, 0, 30, noCustomer, rule))
	}
	for _, c := range []struct {
		ws         event.UUID
		cases      int
		groupsLike string
	}{
		// 7 customers (each has events naming it), and acc-3's
		// customerless events in one account case.
		{h.ws, 7 + 1, "customer:% account:%"},
		{byAccount, 11, "account:%"},
		{byAlert, 30, "alert:%"},
	} {
		if got := h.count("SELECT count(*) FROM speculapro.cases WHERE workspace_id = $1", c.ws); got != c.cases {
			t.Errorf("workspace grouped %s: %d cases, want %d", c.groupsLike, got, c.cases)
		}
	}
	if got := h.count(`SELECT count(*) FROM speculapro.cases c WHERE c.workspace_id = $1 AND c.group_key LIKE 'account:%'
   AND (SELECT count(*) FROM speculapro.alerts a WHERE a.case_id = c.id) = 3`, h.ws); got != 1 {
		t.Errorf("%d account cases holding acc-3's 3 customerless alerts in the customer-grouped workspace, want 1", got)
	}
	failFaults(t, pgwritetest.CaseFaults(t, h.conn))
}

// A case's priority is its most severe open alert's: a more severe alert
// raises it, a milder one leaves it. A replay changes nothing, not even the
// version. Once closed, the group's next alert opens a new case.
func TestCasePriorityFollowsTheMostSevereAlertAndAClosedCaseIsNotJoined(t *testing.T) {
	h := newHitsHarness(t)
	ep := h.endpoint(h.ws, true, eventCaseOpened, eventCaseAlertAttached)
	low := h.rule(h.ws, testRule{name: "low_alert", severity: "low", alert: true})
	oneCustomer := func(e *event.Envelope) { e.CustomerExternalID = "cust-x" }
	caseOf := func() (id event.UUID, priority string, version int64) {
		t.Helper()
		if err := h.conn.QueryRow(context.Background(),
			"SELECT id, priority, version FROM speculapro.cases WHERE status <> 'closed'").Scan(&id, &priority, &version); err != nil {
			t.Fatalf("reading the open case: %v", err)
		}
		return id, priority, version
	}
	steps := []struct {
		from, to     int
		rule         testRule
		priority     string
		version      int64
		events, outs int // case events and case deliveries so far
	}{
		{0, 2, low, "low", 1, 1 + 2, 3},
		{2, 3, h.rules["large_amount"], "high", 2, 4, 4},
		{3, 5, h.rules["velocity"], "high", 3, 6, 6},
		{3, 5, h.rules["velocity"], "high", 3, 6, 6}, // a replay
	}
	var first event.UUID
	for i, s := range steps {
		h.writeHits(evaluatedWith(t, h.ws, s.from, s.to, oneCustomer, s.rule))
		id, priority, version := caseOf()
		if i == 0 {
			first = id
		}
		if id != first || priority != s.priority || version != s.version {
			t.Errorf("step %d: case %s priority %s version %d, want case %s priority %s version %d",
				i, id, priority, version, first, s.priority, s.version)
		}
		got := fmt.Sprint(h.count("SELECT count(*) FROM speculapro.case_events"),
			h.count("SELECT count(*) FROM speculapro.webhook_deliveries WHERE endpoint_id = $1", ep))
		if want := fmt.Sprint(s.events, s.outs); got != want {
			t.Errorf("step %d: case events and deliveries %s, want %s", i, got, want)
		}
	}
	var payloadOK bool
	if err := h.conn.QueryRow(context.Background(), `
SELECT count(*) = 1 AND bool_and(d.payload ->> 'type' = 'case.opened' AND d.payload -> 'case' ->> 'id' = $2::text
       AND d.payload -> 'case' ->> 'group_key' LIKE 'customer:%' AND d.payload ->> 'id' = e.id::text
       AND e.actor = 'stream' AND e.kind = 'opened'
       AND d.payload -> 'event' = jsonb_build_object('kind', e.kind, 'actor', e.actor, 'body', e.body))
  FROM speculapro.webhook_deliveries d JOIN speculapro.case_events e ON e.id = d.event_id
 WHERE d.endpoint_id = $1 AND d.event_type = 'case.opened'`, ep, first).Scan(&payloadOK); err != nil || !payloadOK {
		t.Errorf("case.opened delivery as expected: %v (err %v)", payloadOK, err)
	}
	if got := h.count(`SELECT count(*) FROM speculapro.webhook_deliveries d JOIN speculapro.alerts a
    ON a.id::text = d.payload -> 'event' -> 'body' ->> 'alert_id' AND a.case_id::text = d.payload -> 'case' ->> 'id'
   AND a.rule_id::text = d.payload -> 'event' -> 'body' ->> 'rule_id' AND a.severity = d.payload -> 'event' -> 'body' ->> 'severity'
 WHERE d.event_type = 'case.alert_attached'`); got != 5 {
		t.Errorf("%d case.alert_attached deliveries naming their alert (in the event's body) and its case, want 5", got)
	}
	// caseevent's one shape for every kind.
	rows, err := h.conn.Query(context.Background(), `SELECT event_type, payload FROM speculapro.webhook_deliveries WHERE endpoint_id = $1`, ep)
	if err != nil {
		t.Fatal(err)
	}
	bodies, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		Type string
		Body []byte
	}])
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bodies {
		if err := pgwritetest.CaseBodyFault(b.Body); err != nil {
			t.Errorf("%s body %s: %v", b.Type, b.Body, err)
		}
	}
	failFaults(t, pgwritetest.CaseFaults(t, h.conn))

	h.exec("UPDATE speculapro.cases SET status = 'closed', closed_at = now(), disposition = 'false_positive' WHERE id = $1", first)
	h.writeHits(evaluatedWith(t, h.ws, 5, 6, oneCustomer, low))
	if id, priority, version := caseOf(); id == first || priority != "low" || version != 1 {
		t.Errorf("after closing: open case %s priority %s version %d, want a new case (not %s), low, version 1", id, priority, version, first)
	}
	if got := h.count("SELECT count(*) FROM speculapro.cases"); got != 2 {
		t.Errorf("%d cases, want the closed one and a new one", got)
	}
	failFaults(t, pgwritetest.CaseFaults(t, h.conn))
}
