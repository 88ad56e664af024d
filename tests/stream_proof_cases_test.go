package tests

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/speculapro/speculapro/internal/event"
)

// caseCountDiffs compares the cases and case events stored with those the
// alerts make, counted exactly: in each workspace one case per group of its
// case_grouping (customer: the customer's, the account's when the event
// names no customer; account: the account's, the customer's when it names
// no account; alert: one per alert), none closed in these proofs, so the
// group's only case; each holding its group's alerts, with one opened
// event, one alert_attached event per alert and no other; no case event or
// alert of a case that does not exist. The proofs run no analyst, so every
// case a group has is still open and a second one is a case created twice.
func (x *exactRun) caseCountDiffs(t *testing.T, alerts map[proofHit]bool) []string {
	t.Helper()
	envs := map[event.UUID]*event.Envelope{}
	for _, list := range [][]event.Envelope{x.r.txns, x.r.events} {
		for i := range list {
			envs[list[i].ID] = &list[i]
		}
	}
	grouping := x.caseGroupings(t)
	var diffs []string
	perGroup := map[string]int{}
	for h := range alerts {
		e := envs[h.event]
		if e == nil {
			diffs = append(diffs, fmt.Sprintf("alert %s on %s: no such event generated", h.rule, h.event))
			continue
		}
		perGroup[e.WorkspaceID.String()+" "+caseGroupOf(grouping[e.WorkspaceID], e)]++
	}
	want := map[string]int{}
	for g, n := range perGroup {
		if strings.HasSuffix(g, " alert:*") {
			// One case per alert.
			want[caseCountLine(g, 1, 1, 1, 0)] += n
			continue
		}
		want[caseCountLine(g, n, 1, n, 0)]++
	}
	got := x.storedCaseCounts(t)
	for line, n := range want {
		if got[line] != n {
			diffs = append(diffs, fmt.Sprintf("%d cases %s, want %d", got[line], line, n))
		}
	}
	for line, n := range got {
		if _, ok := want[line]; !ok {
			diffs = append(diffs, fmt.Sprintf("%d cases %s, want none", n, line))
		}
	}
	sort.Strings(diffs)
	return diffs
}

// caseCountLine is how caseCountDiffs names a case by its workspace and
// group and what it holds.
func caseCountLine(group string, alerts, opened, attached, other int) string {
	return fmt.Sprintf("%s holding %d alerts, %d opened, %d alert_attached, %d other events", group, alerts, opened, attached, other)
}

// caseGroupOf is the group of an alert on e under grouping, as the case
// grouping is documented (docs/cases.md); every alert-grouped case is
// "alert:*", since each is its own.
func caseGroupOf(grouping string, e *event.Envelope) string {
	customer, account := e.CustomerExternalID != "", e.AccountExternalID != ""
	switch {
	case grouping == "customer" && customer:
		return "customer:" + event.CustomerID(e.WorkspaceID, e.CustomerExternalID).String()
	case grouping != "alert" && account:
		return "account:" + event.AccountID(e.WorkspaceID, e.AccountExternalID).String()
	case grouping == "account" && customer:
		return "customer:" + event.CustomerID(e.WorkspaceID, e.CustomerExternalID).String()
	}
	return "alert:*"
}

// caseGroupings is each workspace's case_grouping.
func (x *exactRun) caseGroupings(t *testing.T) map[event.UUID]string {
	t.Helper()
	rows, err := x.s.super.Query(context.Background(), `SELECT id, case_grouping FROM speculapro.workspaces`)
	if err != nil {
		t.Fatalf("reading the case groupings: %v", err)
	}
	defer rows.Close()
	out := map[event.UUID]string{}
	for rows.Next() {
		var ws event.UUID
		var g string
		if err := rows.Scan(&ws, &g); err != nil {
			t.Fatal(err)
		}
		out[ws] = g
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// storedCaseCounts counts the stored cases by caseCountLine, and the alerts
// and case events whose case does not exist as cases of the group "no case".
func (x *exactRun) storedCaseCounts(t *testing.T) map[string]int {
	t.Helper()
	rows, err := x.s.super.Query(context.Background(), `
WITH a AS (SELECT case_id, count(*) AS n FROM speculapro.alerts GROUP BY case_id),
     e AS (SELECT case_id, count(*) FILTER (WHERE kind = 'opened') AS opened,
                  count(*) FILTER (WHERE kind = 'alert_attached') AS attached,
                  count(*) FILTER (WHERE kind NOT IN ('opened', 'alert_attached')) AS other
             FROM speculapro.case_events GROUP BY case_id)
SELECT c.workspace_id::text || ' ' || CASE WHEN c.group_key LIKE 'alert:%' THEN 'alert:*' ELSE c.group_key END,
       coalesce(a.n, 0), coalesce(e.opened, 0), coalesce(e.attached, 0), coalesce(e.other, 0)
  FROM speculapro.cases c LEFT JOIN a ON a.case_id = c.id LEFT JOIN e ON e.case_id = c.id
 UNION ALL
SELECT 'no case ' || coalesce(coalesce(a.case_id, e.case_id)::text, '(none)'), coalesce(a.n, 0), coalesce(e.opened, 0), coalesce(e.attached, 0),
       coalesce(e.other, 0)
  FROM a FULL JOIN e ON e.case_id = a.case_id
 WHERE NOT EXISTS (SELECT 1 FROM speculapro.cases c WHERE c.id = coalesce(a.case_id, e.case_id))`)
	if err != nil {
		t.Fatalf("counting the cases: %v", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var group string
		var alerts, opened, attached, other int
		if err := rows.Scan(&group, &alerts, &opened, &attached, &other); err != nil {
			t.Fatal(err)
		}
		out[caseCountLine(group, alerts, opened, attached, other)]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
