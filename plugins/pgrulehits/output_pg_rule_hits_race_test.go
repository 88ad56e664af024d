package pgrulehits

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/pgwritetest"
	"github.com/speculapro/speculapro/internal/event"
)

// Two stream processes write the same alert X (a rebalance hands its record
// to both): process B's statement starts before A commits X, so X looks new
// to it, and B is held on another group's case, which an analyst has
// locked, until A has opened X's case and committed. When B goes on, X is
// stored already and B must leave X's case alone. With the analyst closing
// that case meanwhile, a B that went on would open the group a new case for
// X (no open case left to join) whose alert it then could not insert: an
// opened case with no alert. Without the close, B would join the case and
// raise its version with no case event to say why.
func TestAlertAnotherProcessStoredMeanwhileTouchesNoCase(t *testing.T) {
	for _, closed := range []bool{true, false} {
		t.Run(fmt.Sprintf("case closed meanwhile %v", closed), func(t *testing.T) {
			t.Parallel()
			raceWrite(t, closed)
		})
	}
}

// raceWrite is TestAlertAnotherProcessStoredMeanwhileTouchesNoCase with
// X's case closed by the analyst before B goes on, or not.
func raceWrite(t *testing.T, closeIt bool) {
	h := newHitsHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lockedCust, raceCust := groupsInKeyOrder(h.ws)
	customer := func(e *event.Envelope) {
		e.CustomerExternalID = lockedCust
		if e.ExternalID == pgwritetest.Txn(h.ws, 2, nil).ExternalID {
			e.CustomerExternalID = raceCust
		}
	}
	large := h.rules["large_amount"]
	noAlert := large
	noAlert.alert = false
	// W (n = 0) opens the locked group's case; X's hit (n = 2) is stored
	// without its alert, so that neither process waits on the other's
	// rule_hits row below.
	h.writeHits(evaluatedWith(t, h.ws, 0, 1, customer, large))
	h.writeHits(evaluatedWith(t, h.ws, 2, 3, customer, noAlert))
	lockedCase := h.openCase(ctx, lockedCust)

	// The analyst's change of W's case, not committed yet.
	analyst, err := h.db.Connect(t, h.db.SuperuserURL).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = analyst.Rollback(context.Background()) }()
	if _, err := analyst.Exec(ctx, `UPDATE speculapro.cases SET assignee = 'ben', version = version + 1 WHERE id = $1`,
		lockedCase); err != nil {
		t.Fatal(err)
	}
	var analystPID int
	if err := analyst.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&analystPID); err != nil {
		t.Fatal(err)
	}

	// Process B: Y (n = 1, the locked group) and X, held on W's case.
	processB := h.newHitsOutput(h.db.SystemURL)
	doneB := make(chan error, 1)
	go func() { doneB <- processB.WriteBatch(ctx, evaluatedWith(t, h.ws, 1, 3, customer, large)) }()
	h.waitBlockedBy(ctx, analystPID, alertsStatementStart, doneB)

	// Process A stores X and opens its case; the analyst closes it.
	h.writeHits(evaluatedWith(t, h.ws, 2, 3, customer, large))
	raceCase := h.openCase(ctx, raceCust)
	if closeIt {
		h.exec(`UPDATE speculapro.cases SET status = 'closed', disposition = 'true_positive', closed_at = now(),
       version = version + 1 WHERE id = $1`, raceCase)
	}
	if err := analyst.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	awaitWrite(ctx, t, doneB, "process B's write")

	// X's case: the one A opened, at the version A (and the close) left.
	want := map[string]int{"alerts": 3, "cases": 2, "case_events": 2 + 3}
	for table, n := range want {
		if got := h.count("SELECT count(*) FROM speculapro." + table); got != n {
			t.Errorf("%d %s, want %d", got, table, n)
		}
	}
	raceVersion := 1
	if closeIt {
		raceVersion = 2
	}
	for _, c := range []struct {
		id             event.UUID
		version, alert int
	}{{raceCase, raceVersion, 1}, {lockedCase, 3, 2}} {
		if got := h.count(`SELECT version FROM speculapro.cases WHERE id = $1`, c.id); got != c.version {
			t.Errorf("case %s at version %d, want %d", c.id, got, c.version)
		}
		if got := h.count(`SELECT count(*) FROM speculapro.alerts WHERE case_id = $1`, c.id); got != c.alert {
			t.Errorf("case %s holds %d alerts, want %d", c.id, got, c.alert)
		}
	}
	failFaults(t, pgwritetest.CaseFaults(t, h.conn))
}

// alertsStatementStart is how the statement writing alerts and their cases
// starts (pg_stat_activity shows a statement's first kilobyte only).
const alertsStatementStart = "WITH i AS ("

// groupsInKeyOrder are two customer external IDs of ws whose case groups
// are in key order, so that a process writing both locks the first's case
// first.
func groupsInKeyOrder(ws event.UUID) (first, second string) {
	key := func(ext string) string { return "customer:" + event.CustomerID(ws, ext).String() }
	first = "cust-locked"
	for i := range 100 {
		if second = fmt.Sprintf("cust-race-%d", i); key(second) > key(first) {
			return first, second
		}
	}
	return second, first
}

// openCase is the open case of the customer ext's group.
func (h *hitsHarness) openCase(ctx context.Context, ext string) event.UUID {
	h.t.Helper()
	var id event.UUID
	if err := h.conn.QueryRow(ctx, `SELECT id FROM speculapro.cases WHERE group_key = $1 AND status <> 'closed'`,
		"customer:"+event.CustomerID(h.ws, ext).String()).Scan(&id); err != nil {
		h.t.Fatalf("the open case of %s: %v", ext, err)
	}
	return id
}

// waitBlockedBy waits, for at most 30 seconds, until a session running a
// statement containing stmt waits for a lock that session pid holds. done
// is the blocked writer's result: it must not end first.
func (h *hitsHarness) waitBlockedBy(ctx context.Context, pid int, stmt string, done <-chan error) {
	h.t.Helper()
	for range 600 {
		select {
		case err := <-done:
			h.t.Fatalf("the writer finished without waiting for session %d: %v", pid, err)
		default:
		}
		if h.count(`SELECT count(*) FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND $1 = ANY (pg_blocking_pids(pid)) AND strpos(query, $2) > 0`, pid, stmt) > 0 {
			return
		}
		select {
		case <-ctx.Done():
			h.t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	h.t.Fatalf("no statement %q waited for session %d in 30 s", stmt, pid)
}

// awaitWrite fails t unless a write reports on done, without an error,
// before ctx ends.
func awaitWrite(ctx context.Context, t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-ctx.Done():
		t.Fatalf("%s did not end: %v", what, ctx.Err())
	}
}
