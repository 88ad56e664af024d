package pgrulehits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/pgwritetest"
	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/eventmsg"
)

// --- fixtures -------------------------------------------------------------

// streamMetricsOf is the output's metrics, recorded in m.
func streamMetricsOf(m *testenv.Metrics) *streamMetrics {
	mk := m.Metric
	return &streamMetrics{
		batches: mk("batches"), hitsStored: mk("hits"), alerts: mk("alerts"), cases: mk("cases"), outbox: mk("outbox"),
		skipped: mk("skipped"), retries: mk("retries"), faults: mk("faults"), stage: mk("stage"),
	}
}

// harness is a fresh database with one workspace, and what the output
// logged and counted.
type harness struct {
	t    *testing.T
	db   *dbtest.DB
	logs *testenv.SyncBuffer
	m    *testenv.Metrics
	conn *pgx.Conn // superuser, to inspect and to break things
	ws   event.UUID
}

func (h *harness) workspace(name string) event.UUID { return pgwritetest.Workspace(h.t, h.conn, name) }

func (h *harness) count(query string, args ...any) int {
	return pgwritetest.Count(h.t, h.conn, query, args...)
}

func (h *harness) exec(query string, args ...any) { pgwritetest.Exec(h.t, h.conn, query, args...) }

// hitsHarness is a pg_rule_hits output on a fresh database with one
// workspace and its rules.
type hitsHarness struct {
	*harness
	hits  *pgRuleHits
	rules map[string]testRule
}

type testRule struct {
	id       event.UUID
	name     string
	severity string
	alert    bool
}

func newHitsHarness(t *testing.T) *hitsHarness {
	t.Helper()
	db := dbtest.New(t)
	base := &harness{t: t, db: db, logs: &testenv.SyncBuffer{}, m: &testenv.Metrics{}}
	base.conn = db.Connect(t, db.SuperuserURL)
	base.ws = base.workspace("acme")
	h := &hitsHarness{harness: base, rules: map[string]testRule{}}
	h.hits = h.newHitsOutput(db.SystemURL)
	for _, r := range []testRule{
		{name: "large_amount", severity: "high", alert: true},
		{name: "watch_only", severity: "low", alert: false},
		{name: "velocity", severity: "medium", alert: true},
	} {
		h.rules[r.name] = h.rule(h.ws, r)
	}
	return h
}

func (h *hitsHarness) newHitsOutput(url string) *pgRuleHits {
	h.t.Helper()
	logger := service.NewLoggerFromSlog(slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	out, err := newPgRuleHits(context.Background(), prhOptions{
		url: url, kind: event.KindTransaction, maxConns: 2,
		initialBackoff: 20 * time.Millisecond, maxBackoff: 200 * time.Millisecond,
		attemptTimeout: 30 * time.Second, startupTimeout: 10 * time.Second,
	}, service.MockResources(service.MockResourcesOptUseLogger(logger)))
	if err != nil {
		h.t.Fatalf("newPgRuleHits: %v", err)
	}
	out.m = streamMetricsOf(h.m)
	out.policy.Retries, out.policy.Faults = out.m.retries, out.m.faults
	h.t.Cleanup(func() { _ = out.Close(context.Background()) })
	return out
}

func (h *hitsHarness) rule(ws event.UUID, r testRule) testRule {
	h.t.Helper()
	if err := h.conn.QueryRow(context.Background(), `
INSERT INTO speculapro.rules (workspace_id, name, description, expression, severity, action, alert, score)
VALUES ($1, $2, $3, 'true', $4, 'alert', $5, 40) RETURNING id`,
		ws, r.name, "Test rule "+r.name, r.severity, r.alert).Scan(&r.id); err != nil {
		h.t.Fatalf("creating rule %s: %v", r.name, err)
	}
	return r
}

// hit is the metadata rule_eval leaves for one rule that fired.
func (r testRule) hit() map[string]any {
	return map[string]any{
		"rule": r.name, "rule_id": r.id.String(), "version": int64(1), "score": json.Number("40.0000"),
		"severity": r.severity, "action": "alert", "alert": r.alert,
		"reads": map[string]any{"features.account.out_count_1h": int64(7), "features.account.new_counterparty": true},
	}
}

// evaluated is a batch of transactions n in [from, to) of ws as rule_eval
// leaves them, each hit by rules.
func evaluated(t testing.TB, ws event.UUID, from, to int, rules ...testRule) service.MessageBatch {
	t.Helper()
	return evaluatedWith(t, ws, from, to, nil, rules...)
}

// evaluatedWith is evaluated with each transaction changed by tweak.
func evaluatedWith(t testing.TB, ws event.UUID, from, to int, tweak func(*event.Envelope), rules ...testRule) service.MessageBatch {
	t.Helper()
	var vals [][]byte
	for n := from; n < to; n++ {
		vals = append(vals, pgwritetest.Encode(t, pgwritetest.Txn(ws, n, tweak)))
	}
	b := pgwritetest.BatchOf(t, from, vals...)
	for i, m := range b {
		env, err := eventmsg.Decode(m, event.KindTransaction)
		if err != nil {
			t.Fatal(err)
		}
		hits := []any{}
		for _, r := range rules {
			hits = append(hits, r.hit())
		}
		m = eventmsg.With(m, env)
		m.MetaSetMut(metaRuleEval, map[string]any{"hits": hits})
		b[i] = m
	}
	return b
}

func (h *hitsHarness) writeHits(b service.MessageBatch) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := h.hits.WriteBatch(ctx, b); err != nil {
		h.t.Fatalf("WriteBatch: %v", err)
	}
}

// rowCounts are the rows of each table the output writes.
func (h *hitsHarness) rowCounts() map[string]int {
	out := map[string]int{}
	for _, table := range []string{"rule_hits", "alerts", "cases", "case_events", "webhook_deliveries", "notifications"} {
		out[table] = h.count("SELECT count(*) FROM speculapro." + table)
	}
	return out
}

func (h *hitsHarness) endpoint(ws event.UUID, enabled bool, types ...string) event.UUID {
	h.t.Helper()
	var id event.UUID
	if types == nil {
		types = []string{}
	}
	if err := h.conn.QueryRow(context.Background(), `
INSERT INTO speculapro.webhook_endpoints (workspace_id, url, secret_encrypted, event_types, enabled)
VALUES ($1, 'https://example.test/hook', '\x00', $2, $3) RETURNING id`, ws, types, enabled).Scan(&id); err != nil {
		h.t.Fatalf("creating endpoint: %v", err)
	}
	return id
}

func (h *hitsHarness) subscription(ws event.UUID, minSeverity string, enabled bool, types ...string) event.UUID {
	h.t.Helper()
	var id event.UUID
	if types == nil {
		types = []string{}
	}
	if err := h.conn.QueryRow(context.Background(), `
INSERT INTO speculapro.notification_subscriptions (workspace_id, channel, recipient, event_types, min_severity, enabled)
VALUES ($1, 'email', 'analyst@example.test', $2, $3, $4) RETURNING id`, ws, types, minSeverity, enabled).Scan(&id); err != nil {
		h.t.Fatalf("creating subscription: %v", err)
	}
	return id
}

// --- tests -----------------------------------------------------------------

func TestRuleHitsAndAlertsStoredOnceReplayAddsNothing(t *testing.T) {
	h := newHitsHarness(t)
	b := evaluated(t, h.ws, 0, 20, h.rules["large_amount"], h.rules["watch_only"])
	// An event without hits and one rule_eval did not see add nothing.
	b = append(b, evaluated(t, h.ws, 20, 21)...)
	plain := pgwritetest.TxnBatch(t, h.ws, 21, 22, nil)
	b = append(b, plain...)
	h.writeHits(b)

	// 20 alerts of 7 customers (pgwritetest.Txn's n%7): 7 cases, each
	// opened once, and one attachment per alert.
	want := map[string]int{"rule_hits": 40, "alerts": 20, "cases": 7, "case_events": 7 + 20, "webhook_deliveries": 0, "notifications": 0}
	if got := h.rowCounts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	e := pgwritetest.Txn(h.ws, 3, nil)
	var (
		version                         int
		score, severity, title, dedupe  string
		custOK, accOK, readsOK, details bool
	)
	if err := h.conn.QueryRow(context.Background(), `
SELECT h.rule_version, h.score::text, h.customer_id = $3 AND h.account_id = $4 AND h.event_occurred_at = $5, true,
       h.details->'reads'->>'features.account.out_count_1h' = '7', h.details->>'rule' = 'large_amount',
       a.severity, a.title, a.dedupe_key
  FROM speculapro.rule_hits h JOIN speculapro.alerts a ON a.rule_hit_id = h.id
 WHERE h.event_id = $1 AND h.rule_id = $2`, e.ID, h.rules["large_amount"].id,
		event.CustomerID(h.ws, e.CustomerExternalID), event.AccountID(h.ws, e.AccountExternalID), e.OccurredAt).
		Scan(&version, &score, &custOK, &accOK, &readsOK, &details, &severity, &title, &dedupe); err != nil {
		t.Fatalf("reading the hit and its alert: %v", err)
	}
	if version != 1 || score != "40.0000" || !custOK || !readsOK || !details || severity != "high" ||
		title != "Test rule large_amount" || dedupe != h.rules["large_amount"].id.String()+":"+e.ID.String() {
		t.Errorf("hit/alert = version %d score %s parties %v reads %v details %v severity %s title %q dedupe %s",
			version, score, custOK, readsOK, details, severity, title, dedupe)
	}
	if got := h.m.Get("hits{transaction,live}"); got != 40 {
		t.Errorf("hits stored counted %d, want 40", got)
	}
	if got := h.m.Get("alerts{transaction}"); got != 20 {
		t.Errorf("alerts counted %d, want 20", got)
	}

	// The same batch again (a replay, or a retry after a crash before the
	// commit was acked), and a batch overlapping it.
	h.writeHits(b)
	h.writeHits(evaluated(t, h.ws, 10, 30, h.rules["large_amount"], h.rules["watch_only"], h.rules["velocity"]))
	// The 30 new alerts join their customers' open cases.
	want = map[string]int{"rule_hits": 40 + 20 + 20, "alerts": 20 + 10 + 20, "cases": 7, "case_events": 7 + 20 + 30,
		"webhook_deliveries": 0, "notifications": 0}
	if got := h.rowCounts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after the replays: rows %v, want %v", got, want)
	}
	failFaults(t, pgwritetest.CaseFaults(t, h.conn))
	if got := h.m.Get("batches{transaction}"); got != 3 {
		t.Errorf("batches counted %d, want 3", got)
	}
	if f := h.m.Get("faults{transaction}") + h.m.Get("retries{transaction}"); f != 0 {
		t.Errorf("faults+retries %d on a healthy run", f)
	}
}

func TestNewAlertQueuesOneDeliveryPerEndpointAndOneNotificationPerSubscription(t *testing.T) {
	h := newHitsHarness(t)
	other := h.workspace("other")
	ep := h.endpoint(h.ws, true)                            // every event type
	h.endpoint(h.ws, true, "alert.created", "case.updated") // subscribed by name
	h.endpoint(h.ws, false)                                 // disabled
	h.endpoint(h.ws, true, "decision.made")                 // not subscribed
	h.endpoint(other, true)                                 // another workspace
	sub := h.subscription(h.ws, "high", true)               // high meets high
	h.subscription(h.ws, "low", true, "alert.created")      // by name
	h.subscription(h.ws, "critical", true)                  // above the alert
	h.subscription(h.ws, "low", false)                      // disabled
	h.subscription(h.ws, "low", true, "case.assigned")      // other type
	h.subscription(other, "low", true)                      // another workspace

	// One event hit by an alerting rule and by a watch-only one.
	b := evaluated(t, h.ws, 0, 1, h.rules["large_amount"], h.rules["watch_only"])
	h.writeHits(b)
	// alert.created to both subscribed endpoints, case.opened and
	// case.alert_attached to the one subscribed to every type.
	want := map[string]int{"rule_hits": 2, "alerts": 1, "cases": 1, "case_events": 2, "webhook_deliveries": 2 + 2, "notifications": 2}
	if got := h.rowCounts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	var alertID event.UUID
	if err := h.conn.QueryRow(context.Background(), "SELECT id FROM speculapro.alerts").Scan(&alertID); err != nil {
		t.Fatal(err)
	}
	var payloadOK bool
	if err := h.conn.QueryRow(context.Background(), `
SELECT event_type = 'alert.created' AND status = 'pending' AND payload->>'type' = 'alert.created'
       AND payload->>'id' = $2::text AND payload->'alert'->>'severity' = 'high'
  FROM speculapro.webhook_deliveries WHERE endpoint_id = $1 AND event_id = $2::uuid`, ep, alertID).Scan(&payloadOK); err != nil || !payloadOK {
		t.Errorf("delivery of endpoint %s for alert %s: ok=%v err=%v", ep, alertID, payloadOK, err)
	}
	// The case steps' deliveries carry the case as the transaction left it.
	if n := h.count(`
SELECT count(*) FROM speculapro.webhook_deliveries d JOIN speculapro.cases c ON c.id = (d.payload->'case'->>'id')::uuid
 WHERE d.endpoint_id = $1 AND d.event_type IN ('case.opened', 'case.alert_attached')
   AND d.payload->>'type' = d.event_type AND d.payload->'case'->>'priority' = c.priority
   AND (d.payload->'case'->>'version')::bigint = c.version AND d.payload->'case'->>'group_key' = c.group_key
   AND d.payload->'case'->>'status' = 'open' AND d.payload->'case' ? 'opened_at'
   AND NOT d.payload ? 'alert'
   AND (d.event_type = 'case.opened') = (d.payload->'event'->'body'->>'alert_id' IS NULL)`, ep); n != 2 {
		t.Errorf("case step deliveries of endpoint %s with the case as stored: %d, want 2", ep, n)
	}
	if n := h.count("SELECT count(*) FROM speculapro.notifications WHERE dedupe_key = $1 AND kind = 'alert.created' AND channel = 'email'",
		"alert.created:"+alertID.String()+":"+sub.String()); n != 1 {
		t.Errorf("notification for subscription %s: %d rows, want 1", sub, n)
	}
	if got := h.m.Get("outbox{transaction,webhook_deliveries}") + h.m.Get("outbox{transaction,notifications}"); got != 6 {
		t.Errorf("outbox rows counted %d, want 6", got)
	}
	failFaults(t, pgwritetest.CaseFaults(t, h.conn))

	// Replayed: the alert exists, so nothing is queued again.
	h.writeHits(b)
	if got := h.rowCounts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after a replay: rows %v, want %v", got, want)
	}
}

// Two stream processes writing the same events at once (a rebalance hands a
// partition over while its batch is in flight) create every row once.
func TestTwoWritersCreateEachRowOnce(t *testing.T) {
	h := newHitsHarness(t)
	h.endpoint(h.ws, true)
	h.subscription(h.ws, "low", true)
	second := h.newHitsOutput(h.db.SystemURL)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		out := h.hits
		if i%2 == 1 {
			out = second
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Overlapping batches in both orders.
			b := evaluated(t, h.ws, (i%4)*10, (i%4)*10+50, h.rules["large_amount"], h.rules["velocity"])
			errs <- out.WriteBatch(context.Background(), b)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("WriteBatch: %v", err)
		}
	}
	// 80 events of 7 customers: 7 cases, opened once each, 160
	// attachments; the endpoint gets every alert and every case step.
	want := map[string]int{"rule_hits": 160, "alerts": 160, "cases": 7, "case_events": 7 + 160,
		"webhook_deliveries": 160 + 7 + 160, "notifications": 160}
	if got := h.rowCounts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	failFaults(t, pgwritetest.CaseFaults(t, h.conn))
	if got := h.m.Get("alerts{transaction}"); got != 160 {
		t.Errorf("alerts counted %d over both writers, want 160", got)
	}
	if got := h.m.Get("cases{transaction}"); got != 7 {
		t.Errorf("cases opened counted %d over both writers, want 7", got)
	}
}

func TestUndecodableAndMalformedAreCountedAndSkipped(t *testing.T) {
	h := newHitsHarness(t)
	good := evaluated(t, h.ws, 0, 3, h.rules["large_amount"])
	flagged := pgwritetest.BatchOf(t, 10, []byte("not json"))
	flagged[0].SetError(errors.New("not a JSON event envelope"))
	wrongKind := pgwritetest.BatchOf(t, 11, []byte(`{"v":1,"kind":"account_event","id":"0193f5a2-7c00-7abc-8def-0123456789ac","workspace_id":"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d","external_id":"ev-1","occurred_at":"2026-11-30T07:41:12Z","customer_external_id":"cust-1","type":"sim_swap"}`))
	bad := evaluated(t, h.ws, 20, 21)
	bad[0].MetaSetMut(metaRuleEval, map[string]any{"hits": []any{
		map[string]any{"rule_id": "not-a-uuid", "version": int64(1)},
		map[string]any{"rule_id": h.rules["velocity"].id.String(), "version": int64(1), "score": "123456789"},
		h.rules["velocity"].hit(),
	}})
	gone := h.rule(h.ws, testRule{name: "deleted_meanwhile", severity: "low", alert: true})
	orphan := evaluated(t, h.ws, 30, 31, gone)
	h.exec("DELETE FROM speculapro.rules WHERE id = $1", gone.id)

	var b service.MessageBatch
	for _, part := range []service.MessageBatch{good, flagged, wrongKind, bad, orphan} {
		b = append(b, part...)
	}
	h.writeHits(b)
	want := map[string]int{"rule_hits": 4, "alerts": 4, "cases": 4, "case_events": 8, "webhook_deliveries": 0, "notifications": 0}
	if got := h.rowCounts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	if got := h.m.Get("skipped{transaction,undecodable}"); got != 2 {
		t.Errorf("undecodable counted %d, want 2", got)
	}
	if got := h.m.Get("skipped{transaction,rejected}"); got != 2 {
		t.Errorf("rejected counted %d, want 2 (the malformed hits)", got)
	}
	logs := h.logs.String()
	if !strings.Contains(logs, `level=WARN msg="stream: skipped undecodable records" count=2`) {
		t.Errorf("no undecodable WARN line:\n%s", logs)
	}
}

// A hit the database refuses is isolated and skipped; the rest of the batch
// is stored in the same transaction, and nothing is retried.
func TestHitTheDatabaseRefusesIsSkippedAlone(t *testing.T) {
	h := newHitsHarness(t)
	owner := h.db.Connect(t, h.db.OwnerURL)
	if _, err := owner.Exec(context.Background(), "ALTER TABLE speculapro.rule_hits ADD CONSTRAINT test_version_below_5 CHECK (rule_version < 5)"); err != nil {
		t.Fatal(err)
	}
	b := evaluated(t, h.ws, 0, 40, h.rules["large_amount"])
	refused := h.rules["velocity"].hit()
	refused["version"] = int64(7)
	b[17].MetaSetMut(metaRuleEval, map[string]any{"hits": []any{h.rules["large_amount"].hit(), refused}})
	h.writeHits(b)
	if got := h.rowCounts(); got["rule_hits"] != 40 || got["alerts"] != 40 {
		t.Errorf("rows %v, want the 40 hits the database takes, with their alerts", got)
	}
	if got := h.m.Get("skipped{transaction,rejected}"); got != 1 {
		t.Errorf("rejected counted %d, want 1", got)
	}
	if f := h.m.Get("faults{transaction}") + h.m.Get("retries{transaction}"); f != 0 {
		t.Errorf("faults+retries %d: a row's fault is not retried", f)
	}
	if logs := h.logs.String(); !strings.Contains(logs, `level=WARN msg="stream: skipped rule hits the database refused" count=1 codes=23514`) {
		t.Errorf("no rejected WARN line:\n%s", logs)
	}
}

func TestRetriesUntilTheDatabaseTakesTheBatch(t *testing.T) {
	h := newHitsHarness(t)
	owner := h.db.Connect(t, h.db.OwnerURL)
	if _, err := owner.Exec(context.Background(), "REVOKE INSERT ON speculapro.alerts FROM speculapro_system"); err != nil {
		t.Fatal(err)
	}
	pgwritetest.RetriesUntilFixed(t, h.logs, logStreamBatchRetry, owner, "GRANT INSERT ON speculapro.alerts TO speculapro_system", func() error {
		return h.hits.WriteBatch(context.Background(), evaluated(t, h.ws, 0, 10, h.rules["large_amount"]))
	})
	if got := h.rowCounts(); got["rule_hits"] != 10 || got["alerts"] != 10 {
		t.Errorf("rows %v, want 10 hits and 10 alerts", got)
	}
	logs := h.logs.String()
	line := logs[strings.Index(logs, logStreamBatchRetry)-30:]
	line = line[:strings.IndexByte(line, '\n')]
	for _, want := range []string{"level=ERROR", `msg="stream: batch failed, retrying"`, "rows=10", "permission denied", "backoff="} {
		if !strings.Contains(line, want) {
			t.Errorf("retry line %q lacks %q", line, want)
		}
	}
	if got, logged := h.m.Get("retries{transaction}"), int64(strings.Count(logs, logStreamBatchRetry)); got != logged {
		t.Errorf("retries counted %d, %d logged", got, logged)
	}
	if got := h.m.Get("faults{transaction}"); got != 1 {
		t.Errorf("faults counted %d, want 1 for one failing batch", got)
	}
}

// A shutdown while a batch waits on the database is no fault: nothing is
// counted, nothing logged, and the context's error goes back so that
// nothing is acked.
func TestShutdownDuringAWriteIsNoFault(t *testing.T) {
	h := newHitsHarness(t)
	lock, err := h.conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(context.Background())
	if _, err := lock.Exec(context.Background(), "LOCK TABLE speculapro.rule_hits IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = h.hits.WriteBatch(ctx, evaluated(t, h.ws, 0, 5, h.rules["large_amount"]))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WriteBatch at shutdown: %v, want the context's error", err)
	}
	for _, m := range []string{"faults{transaction}", "retries{transaction}", "batches{transaction}"} {
		if got := h.m.Get(m); got != 0 {
			t.Errorf("%s = %d after a shutdown, want 0", m, got)
		}
	}
	if strings.Contains(h.logs.String(), logStreamBatchRetry) {
		t.Errorf("a shutdown was logged as a failure:\n%s", h.logs.String())
	}
}

func TestRuleHitsRefusesRoleBoundByRowLevelSecurity(t *testing.T) {
	db := dbtest.New(t)
	out, err := newPgRuleHits(context.Background(), prhOptions{
		url: db.AppURL, kind: event.KindTransaction, maxConns: 1,
		initialBackoff: time.Millisecond, maxBackoff: time.Millisecond,
		attemptTimeout: time.Second, startupTimeout: 10 * time.Second,
	}, service.MockResources())
	if err != nil {
		t.Fatalf("the constructor does no I/O, so it cannot refuse the role: %v", err)
	}
	defer out.Close(context.Background())
	pgwritetest.RequireConnectRefuses(t, out.Connect)
}

func TestRuleHitsConfig(t *testing.T) {
	tests := []struct {
		name, yaml string
		wantErr    string
	}{
		{"defaults", `{}`, ""},
		{"account events", `kind: account_event`, ""},
		{"unknown kind", `kind: decision`, "kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := pgRuleHitsSpec().ParseYAML(tt.yaml, nil)
			if err == nil && tt.wantErr != "" {
				// Enum fields are checked by lint, not by parsing: the
				// constructor refuses what lint would have reported.
				_, err = newPgRuleHits(context.Background(), prhOptions{kind: event.Kind("decision"), initialBackoff: 1, maxBackoff: 1}, service.MockResources())
			}
			if (err != nil) != (tt.wantErr != "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

// Every batch records how far each of its partitions is stored, hits or
// not, in the same transaction; an older batch never lowers it.
func TestProgressRecordedPerPartition(t *testing.T) {
	h := newHitsHarness(t)
	b := evaluated(t, h.ws, 0, 3) // no hits; batchOf puts them on partition 2 at offsets 0..2
	h.writeHits(b)
	other := evaluated(t, h.ws, 40, 41, h.rules["velocity"])
	other[0].MetaSetMut("kafka_partition", "5")
	h.writeHits(other)
	h.writeHits(evaluated(t, h.ws, 1, 2)) // an older batch of partition 2
	for _, want := range []struct {
		partition int
		offset    int64
	}{{2, 2}, {5, 40}} {
		var got int64
		if err := h.conn.QueryRow(context.Background(),
			"SELECT stored_offset FROM speculapro.stream_progress WHERE topic = 'sp.txn.ingested' AND kafka_partition = $1", want.partition).Scan(&got); err != nil || got != want.offset {
			t.Errorf("partition %d: stored_offset %d (err %v), want %d", want.partition, got, err, want.offset)
		}
	}
	if got := h.rowCounts()["rule_hits"]; got != 1 {
		t.Errorf("%d hits, want 1", got)
	}
}
