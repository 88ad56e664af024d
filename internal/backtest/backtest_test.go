package backtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rules"
)

var ws = event.UUID{0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f, 0x40, 0x71, 0x82, 0x93, 0xa4, 0xb5, 0xc6, 0xd7, 0xe8, 0xf9}

// history is a test database holding one workspace, one customer with
// one account, and the transactions insert adds.
type history struct {
	db   *dbtest.DB
	conn *pgx.Conn
	n    int
}

func newHistory(t *testing.T) *history {
	db := dbtest.New(t)
	h := &history{db: db, conn: db.Connect(t, db.SuperuserURL)}
	cust, acct := event.CustomerID(ws, "cust-1"), event.AccountID(ws, "acc-1")
	if _, err := h.conn.Exec(context.Background(), `
WITH w AS (INSERT INTO speculapro.workspaces (id, name) VALUES ($1, 'backtest test') RETURNING id),
     c AS (INSERT INTO speculapro.customers (id, workspace_id, external_id) SELECT $2, id, 'cust-1' FROM w RETURNING id)
INSERT INTO speculapro.accounts (id, workspace_id, external_id, customer_id) SELECT $3, $1, 'acc-1', id FROM c`,
		ws, cust, acct); err != nil {
		t.Fatal(err)
	}
	return h
}

// insert stores a transaction of acc-1 paying 100 EUR out, that occurred
// at occurred and was accepted at received; it returns its id.
func (h *history) insert(t *testing.T, occurred, received time.Time) event.UUID {
	t.Helper()
	h.n++
	ext := fmt.Sprintf("t-%d", h.n)
	id := event.TransactionID(ws, ext, occurred)
	if _, err := h.conn.Exec(context.Background(), `
INSERT INTO speculapro.transactions (id, workspace_id, external_id, account_id, customer_id, amount, currency, direction,
  occurred_at, received_at) VALUES ($1, $2, $3, $4, $5, 100, 'EUR', 'out', $6, $7)`,
		id, ws, ext, event.AccountID(ws, "acc-1"), event.CustomerID(ws, "cust-1"), occurred, received); err != nil {
		t.Fatal(err)
	}
	return id
}

// second is a rule firing on an account's second (or later) payment out
// of its hour.
var second = rules.Rule{Name: "second_in_hour", AppliesTo: event.KindTransaction, Severity: "high", Action: "alert",
	Alert: true, Score: "1", Enabled: true, Expression: `features.account.out_count_1h >= 2`}

func run(t *testing.T, h *history, from, to time.Time, mutate func(o *Options)) (*Report, []event.UUID, error) {
	t.Helper()
	var hits []event.UUID
	o := Options{Workspace: ws, From: from, To: to, Rules: []rules.Rule{second}, Explain: 5,
		Hit: func(r *RuleResult, ev *event.Envelope) { hits = append(hits, ev.ID) }}
	if mutate != nil {
		mutate(&o)
	}
	rep, err := Run(context.Background(), h.db.Connect(t, h.db.AppURL), o)
	return rep, hits, err
}

// The replay applies events in the order they were accepted (received_at),
// not the order they occurred: a late event accepted last sees the events
// accepted before it. Events accepted in the same microsecond (one ingest
// request) are applied in occurred_at order: the documented difference
// from the stream, which follows the request's order.
func TestReplayOrderIsAcceptance(t *testing.T) {
	h := newHistory(t)
	base := time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)
	late := h.insert(t, base.Add(10*time.Minute), base.Add(40*time.Minute)) // accepted last
	first := h.insert(t, base.Add(20*time.Minute), base.Add(21*time.Minute))
	second := h.insert(t, base.Add(30*time.Minute), base.Add(31*time.Minute))
	// One request: both accepted at the same instant, in the order
	// "later, earlier"; the replay applies the earlier first.
	same := base.Add(2 * time.Hour)
	reqLater := h.insert(t, same.Add(-5*time.Minute), same)
	reqEarlier := h.insert(t, same.Add(-10*time.Minute), same)

	rep, hits, err := run(t, h, base, base.Add(24*time.Hour), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []event.UUID{second, late, reqLater}
	if fmt.Sprint(hits) != fmt.Sprint(want) {
		t.Fatalf("hits %v, want %v (first %s, request's earlier %s)", hits, want, first, reqEarlier)
	}
	r := rep.Rules[0]
	if r.Hits != 3 || r.Accounts != 1 || r.Customers != 1 || r.Alerts != 3 || r.New != 3 || r.Overlap != 0 ||
		len(r.PerDay) != 1 || r.PerDay[0].Hits != 3 || len(r.Samples) != 3 {
		t.Fatalf("figures %+v", r)
	}
	if got := r.Samples[0].Reads["features.account.out_count_1h"]; fmt.Sprint(got) != "2" {
		t.Fatalf("the first hit read out_count_1h %v, want 2", got)
	}
}

// A period's first events see the totals of the history before it (the
// warm-up), though only the period's events are evaluated.
func TestReplayWarmsBeforeThePeriod(t *testing.T) {
	h := newHistory(t)
	base := time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)
	h.insert(t, base, base)
	inPeriod := h.insert(t, base.Add(time.Minute), base.Add(time.Minute))
	rep, hits, err := run(t, h, base.Add(30*time.Second), base.Add(time.Hour), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 1 || hits[0] != inPeriod || rep.Events != 1 || rep.Replayed != 2 {
		t.Fatalf("hits %v, %d events evaluated of %d replayed", hits, rep.Events, rep.Replayed)
	}
}

// A history whose entities need more memory than given is refused before
// anything is replayed, with an error that says how much is needed.
func TestReplayRefusesAHistoryTooLarge(t *testing.T) {
	h := newHistory(t)
	base := time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)
	h.insert(t, base, base)
	_, hits, err := run(t, h, base, base.Add(time.Hour), func(o *Options) { o.MaxMemory = 1024 })
	if !errors.Is(err, ErrTooLarge) || len(hits) != 0 {
		t.Fatalf("err %v, %d hits; want ErrTooLarge before any", err, len(hits))
	}
}

// A cancelled replay (Ctrl-C) returns the context's error and has written
// nothing.
func TestReplayStopsOnCancel(t *testing.T) {
	h := newHistory(t)
	base := time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)
	if _, err := h.conn.Exec(context.Background(), `
INSERT INTO speculapro.transactions (id, workspace_id, external_id, account_id, customer_id, amount, currency, direction,
  occurred_at, received_at)
SELECT gen_random_uuid(), $1, 'bulk-' || i, $2, $3, 1, 'EUR', 'in', $4::timestamptz + i * interval '1 second',
       $4::timestamptz + i * interval '1 second'
  FROM generate_series(1, $5::int) i`, ws, event.AccountID(ws, "acc-1"), event.CustomerID(ws, "cust-1"), base, 3*batchSize); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	o := Options{Workspace: ws, From: base, To: base.Add(24 * time.Hour), Rules: []rules.Rule{second},
		Progress: func(Progress) { cancel() }}
	_, err := Run(ctx, h.db.Connect(t, h.db.AppURL), o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	var n int
	if err := h.conn.QueryRow(context.Background(), `SELECT count(*) FROM speculapro.rule_hits`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rule hits stored (%v)", n, err)
	}
}

// A shadow rule of the workspace is replayed like a live one, its mode
// reported and its stored hits compared, but it would raise no alert; a
// rule of the files in shadow mode likewise.
func TestReplayShadowRuleRaisesNoAlert(t *testing.T) {
	h := newHistory(t)
	if _, err := h.conn.Exec(context.Background(), `
INSERT INTO speculapro.rules (workspace_id, name, applies_to, expression, severity, action, alert, mode, score)
VALUES ($1, $2, 'transaction', $3, 'high', 'alert', true, 'shadow', 1)`, ws, second.Name, second.Expression); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)
	for i := range 3 {
		at := base.Add(time.Duration(i) * time.Minute)
		h.insert(t, at, at)
	}
	shadow := second
	shadow.Mode = rules.ModeShadow
	rep, hits, err := run(t, h, base, base.Add(time.Hour), func(o *Options) { o.Rules = []rules.Rule{shadow} })
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rules) != 2 || len(hits) != 4 {
		t.Fatalf("%d rules reported, %d hits; want 2 rules and 4 hits", len(rep.Rules), len(hits))
	}
	for _, r := range rep.Rules {
		if r.Mode != rules.ModeShadow || r.Hits != 2 || r.Alerts != 0 || r.Overlap != 0 || r.New != 0 {
			t.Errorf("%s rule %s: mode %s, %d hits, %d alerts (%d overlapping, %d new); want shadow, 2 hits, no alert",
				r.Source, r.Name, r.Mode, r.Hits, r.Alerts, r.Overlap, r.New)
		}
	}
	var out strings.Builder
	if err := Write(&out, rep, "table"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SOURCE     RULE               MODE    HITS", "workspace  second_in_hour v1  shadow  2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, out.String())
		}
	}
}

// A transaction stored with the placeholder customer named after its account
// (sent without its customer, the account not stored yet) is replayed with
// no customer, as the stream counted it: a customer rule fails on it rather
// than count it; a real customer is counted on.
func TestReplayTakesAnOrphanPlaceholderForNoCustomer(t *testing.T) {
	h := newHistory(t)
	orphan := event.CustomerID(ws, event.OrphanCustomerPrefix+"acc-2")
	if _, err := h.conn.Exec(context.Background(), `
WITH c AS (INSERT INTO speculapro.customers (id, workspace_id, external_id, placeholder) VALUES ($1, $2, $3, true) RETURNING id)
INSERT INTO speculapro.accounts (id, workspace_id, external_id, customer_id, placeholder) SELECT $4, $2, 'acc-2', id, true FROM c`,
		orphan, ws, event.OrphanCustomerPrefix+"acc-2", event.AccountID(ws, "acc-2")); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)
	for i := range 2 {
		at := base.Add(time.Duration(i) * time.Minute)
		h.insert(t, at, at) // acc-1, of cust-1
		if _, err := h.conn.Exec(context.Background(), `
INSERT INTO speculapro.transactions (id, workspace_id, external_id, account_id, customer_id, amount, currency, direction,
  occurred_at, received_at) VALUES ($1, $2, $3, $4, $5, 100, 'EUR', 'out', $6, $6)`,
			event.TransactionID(ws, fmt.Sprintf("o-%d", i), at), ws, fmt.Sprintf("o-%d", i), event.AccountID(ws, "acc-2"), orphan, at); err != nil {
			t.Fatal(err)
		}
	}
	customerRule := second
	customerRule.Name, customerRule.Expression = "customer_second", `features.customer.out_count_1h >= 2`
	rep, hits, err := run(t, h, base, base.Add(time.Hour), func(o *Options) { o.Rules = []rules.Rule{customerRule} })
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Rules[0]
	if len(hits) != 1 || r.Hits != 1 || r.Errors != 2 || rep.Events != 4 {
		t.Fatalf("%d hits (%d), %d errors of %d events; want cust-1's second payment only, the rule failing on both of acc-2's",
			len(hits), r.Hits, r.Errors, rep.Events)
	}
}
