package ruleeval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/testenv"

	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/eventmsg"
	"github.com/speculapro/speculapro/internal/rules"
)

// --- fixtures -------------------------------------------------------------

type evalHarness struct {
	t    *testing.T
	db   *dbtest.DB
	conn *pgx.Conn
	logs *testenv.SyncBuffer
	m    *testenv.Metrics
}

func newEvalHarness(t *testing.T) *evalHarness {
	t.Helper()
	db := dbtest.New(t)
	return &evalHarness{t: t, db: db, conn: db.Connect(t, db.SuperuserURL), logs: &testenv.SyncBuffer{}, m: &testenv.Metrics{}}
}

func (h *evalHarness) step(kind event.Kind, reload time.Duration, realtime bool) *ruleEval {
	h.t.Helper()
	logger := service.NewLoggerFromSlog(slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	r, err := newRuleEval(h.db.SystemURL, kind, reload, realtime, service.MockResources(service.MockResourcesOptUseLogger(logger)))
	if err != nil {
		h.t.Fatalf("newRuleEval: %v", err)
	}
	m := h.m.Metric
	r.m = ruleEvalMetrics{evaluated: m("evaluated"), skipped: m("skipped"), hits: m("hits"), ruleEvaluations: m("evaluations"),
		errors: m("errors"), loaded: m("loaded"), stage: m("stage")}
	h.t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

func (h *evalHarness) workspace(name string) event.UUID {
	h.t.Helper()
	var id event.UUID
	if err := h.conn.QueryRow(context.Background(),
		"INSERT INTO speculapro.workspaces (name) VALUES ($1) RETURNING id", name).Scan(&id); err != nil {
		h.t.Fatalf("creating workspace: %v", err)
	}
	return id
}

type ruleSpec struct {
	name, appliesTo, expression, action string
	alert, enabled                      bool
}

func (h *evalHarness) rule(ws event.UUID, r ruleSpec) event.UUID {
	h.t.Helper()
	if r.appliesTo == "" {
		r.appliesTo = "transaction"
	}
	if r.action == "" {
		r.action = "alert"
	}
	var id event.UUID
	if err := h.conn.QueryRow(context.Background(), `
INSERT INTO speculapro.rules (workspace_id, name, applies_to, expression, severity, action, alert, enabled, score)
VALUES ($1, $2, $3, $4, 'high', $5, $6, $7, 12.5) RETURNING id`,
		ws, r.name, r.appliesTo, r.expression, r.action, r.alert, r.enabled).Scan(&id); err != nil {
		h.t.Fatalf("creating rule %s: %v", r.name, err)
	}
	return id
}

func (h *evalHarness) exec(query string, args ...any) {
	h.t.Helper()
	if _, err := h.conn.Exec(context.Background(), query, args...); err != nil {
		h.t.Fatalf("%s: %v", query, err)
	}
}

var baseTime = time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)

// message is a transaction of ws for amount as event_decode and
// feature_update leave it (features nil: none attached).
func message(t testing.TB, ws event.UUID, n int, amount string, features map[string]any) *service.Message {
	t.Helper()
	e := event.Envelope{
		V: event.Version, Kind: event.KindTransaction, WorkspaceID: ws,
		ExternalID: fmt.Sprintf("txn-%d", n), OccurredAt: baseTime.Add(time.Duration(n) * time.Second),
		CustomerExternalID: "cust-1", AccountExternalID: "acc-1",
		Amount: amount, Currency: "EUR", Direction: event.DirectionOut, Type: "transfer",
	}
	e.ID = event.TransactionID(ws, e.ExternalID, e.OccurredAt)
	b, err := event.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	msg := service.NewMessage(b)
	env, err := eventmsg.Decode(msg, event.KindTransaction)
	if err != nil {
		t.Fatal(err)
	}
	msg = eventmsg.With(msg, env)
	if features != nil {
		msg.MetaSetMut(metaFeatures, features)
	}
	return msg
}

func features(outCount int64, newCounterparty bool) map[string]any {
	return map[string]any{"account": map[string]any{"out_count_1h": outCount, "new_counterparty": newCounterparty}, "customer": nil, "counterparty": nil}
}

func (h *evalHarness) process(r *ruleEval, batch ...*service.Message) service.MessageBatch {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := r.ProcessBatch(ctx, batch)
	if err != nil {
		h.t.Fatalf("ProcessBatch: %v", err)
	}
	if len(out) != 1 || len(out[0]) != len(batch) {
		h.t.Fatalf("ProcessBatch returned %d batches, want the one batch of %d", len(out), len(batch))
	}
	return out[0]
}

// hitNames are the rules that fired on msg, in order.
func hitNames(t testing.TB, msg *service.Message) []string {
	t.Helper()
	v, ok := msg.MetaGetMut(metaRuleEval)
	if !ok {
		return nil
	}
	var names []string
	for _, h := range v.(map[string]any)["hits"].([]any) {
		names = append(names, h.(map[string]any)["rule"].(string))
	}
	return names
}

// --- tests -----------------------------------------------------------------

func TestEvaluatesEachWorkspacesRules(t *testing.T) {
	h := newEvalHarness(t)
	acme, other, none := h.workspace("acme"), h.workspace("other"), h.workspace("no rules")
	largeID := h.rule(acme, ruleSpec{name: "large_to_new", expression: `event.amount >= 5000 && features.account.new_counterparty`, alert: true, enabled: true})
	h.rule(acme, ruleSpec{name: "velocity", expression: `features.account.out_count_1h > 5`, alert: false, enabled: true})
	h.rule(acme, ruleSpec{name: "disabled", expression: `true`, enabled: false})
	h.rule(acme, ruleSpec{name: "sim_swap", appliesTo: "account_event", expression: `true`, enabled: true})
	h.rule(other, ruleSpec{name: "everything", expression: `true`, enabled: true})
	r := h.step(event.KindTransaction, time.Hour, false)

	flagged := service.NewMessage([]byte("not json"))
	flagged.SetError(errors.New("not a JSON event envelope"))
	out := h.process(r,
		message(t, acme, 1, "6000.00", features(7, true)),  // both
		message(t, acme, 2, "6000.00", features(1, false)), // neither
		message(t, acme, 3, "100", features(6, true)),      // velocity
		message(t, other, 4, "1", nil),                     // everything (features not read)
		message(t, none, 5, "1", features(9, true)),        // no rules
		flagged,
		service.NewMessage([]byte(`{"v":1}`)), // not decoded before, and not an envelope
	)
	for i, want := range [][]string{{"large_to_new", "velocity"}, nil, {"velocity"}, {"everything"}, nil} {
		if got := hitNames(t, out[i]); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("message %d: hits %v, want %v", i, got, want)
		}
		if _, ok := out[i].MetaGetMut(metaRuleEval); !ok {
			t.Errorf("message %d: no rule_eval metadata", i)
		}
	}
	if _, ok := out[5].MetaGetMut(metaRuleEval); ok || out[5].GetError() == nil {
		t.Errorf("a flagged message was touched")
	}
	// The totals are dropped once evaluated, so the batches waiting for the
	// output do not carry them (TestKeepFeatures: unless asked to).
	if _, ok := out[0].MetaGetMut(metaFeatures); ok {
		t.Errorf("an evaluated message still carries its features")
	}
	if out[6].GetError() == nil {
		t.Errorf("an unreadable message was not flagged")
	}

	v, _ := out[0].MetaGetMut(metaRuleEval)
	hit := v.(map[string]any)["hits"].([]any)[0].(map[string]any)
	want := map[string]any{
		"rule": "large_to_new", "rule_id": largeID.String(), "version": int64(1), "score": json.Number("12.5"),
		"severity": "high", "action": "alert", "alert": true, "shadow": false,
		"reads": map[string]any{"features.account.new_counterparty": true},
	}
	if fmt.Sprint(hit) != fmt.Sprint(want) {
		t.Errorf("hit\n%v\nwant\n%v", hit, want)
	}
	for key, want := range map[string]int64{
		"evaluated{transaction}": 5, "hits{large_to_new,live}": 1, "hits{velocity,live}": 2, "hits{everything,live}": 1,
		"loaded{transaction}": 3, "evaluations{large_to_new,live}": 3, "evaluations{velocity,live}": 3, "evaluations{everything,live}": 1,
	} {
		if got := h.m.Get(key); got != want {
			t.Errorf("%s = %d, want %d", key, got, want)
		}
	}
}

// A shadow rule is evaluated with the live ones, on the same features, and
// fires on the same events as the live rule with its expression; its hits
// are marked shadow and ask for no alert, whatever the rule's alert says.
// Every evaluated event carries the rules it was evaluated against, one
// shared value per set in force.
func TestShadowRuleFiresLikeItsLiveTwinAndAsksForNoAlert(t *testing.T) {
	h := newEvalHarness(t)
	ws := h.workspace("acme")
	const expr = `event.amount >= 5000 && features.account.new_counterparty`
	h.rule(ws, ruleSpec{name: "large_live", expression: expr, alert: true, enabled: true})
	shadowID := h.rule(ws, ruleSpec{name: "large_shadow", expression: expr, alert: true, enabled: true})
	h.exec(`UPDATE speculapro.rules SET mode = 'shadow' WHERE id = $1`, shadowID)
	r := h.step(event.KindTransaction, time.Hour, false)

	out := h.process(r,
		message(t, ws, 1, "6000.00", features(1, true)),
		message(t, ws, 2, "6000.00", features(1, false)),
		message(t, ws, 3, "9000", features(1, true)),
	)
	var shared any
	for i, want := range [][]string{{"large_live", "large_shadow"}, nil, {"large_live", "large_shadow"}} {
		if got := hitNames(t, out[i]); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("message %d: hits %v, want %v", i, got, want)
		}
		v, _ := out[i].MetaGetMut(metaRuleEval)
		ev, ok := v.(map[string]any)["evaluated"].(*rules.Evaluated)
		if !ok || len(ev.Rules) != 2 {
			t.Fatalf("message %d: evaluated = %v, want the two rules", i, v.(map[string]any)["evaluated"])
		}
		if shared == nil {
			shared = ev
		} else if shared != any(ev) {
			t.Errorf("message %d carries its own copy of the rules evaluated", i)
		}
	}
	v, _ := out[0].MetaGetMut(metaRuleEval)
	for _, x := range v.(map[string]any)["hits"].([]any) {
		hit := x.(map[string]any)
		shadow := hit["rule"] == "large_shadow"
		if hit["shadow"] != shadow || hit["alert"] != !shadow {
			t.Errorf("hit of %s: shadow %v alert %v", hit["rule"], hit["shadow"], hit["alert"])
		}
	}
	for key, want := range map[string]int64{
		"hits{large_live,live}": 2, "hits{large_shadow,shadow}": 2,
		"evaluations{large_live,live}": 3, "evaluations{large_shadow,shadow}": 3,
	} {
		if got := h.m.Get(key); got != want {
			t.Errorf("%s = %d, want %d", key, got, want)
		}
	}
}

// A rule that fails on an event is counted every time, logged once a
// minute, and the other rules of the event still decide.
func TestFailingRuleIsCountedLoggedOnceAndStopsNothing(t *testing.T) {
	h := newEvalHarness(t)
	ws := h.workspace("acme")
	h.rule(ws, ruleSpec{name: "broken", expression: `features.account.out_count_1h > 5`, enabled: true})
	h.rule(ws, ruleSpec{name: "fine", expression: `event.amount > 10`, enabled: true})
	r := h.step(event.KindTransaction, time.Hour, false)
	var batch []*service.Message
	for n := range 20 {
		batch = append(batch, message(t, ws, n, "50", nil)) // no features: broken cannot decide
	}
	out := h.process(r, batch...)
	for i, m := range out {
		if got := hitNames(t, m); fmt.Sprint(got) != "[fine]" || m.GetError() != nil {
			t.Fatalf("message %d: hits %v err %v, want [fine] and no error", i, got, m.GetError())
		}
	}
	if got := h.m.Get("errors{broken}"); got != 20 {
		t.Errorf("rule errors counted %d, want 20", got)
	}
	if n := strings.Count(h.logs.String(), logRuleFailed); n != 1 {
		t.Errorf("%d WARN lines for one failing rule within a minute, want 1:\n%s", n, h.logs)
	}
	if !strings.Contains(h.logs.String(), "level=WARN") || !strings.Contains(h.logs.String(), "rule=broken") {
		t.Errorf("WARN line lacks its level or rule:\n%s", h.logs)
	}
}

// A change is picked up within reload_interval without a restart, and
// only the workspace that changed is compiled again.
func TestReloadsChangedRulesWithoutRestart(t *testing.T) {
	h := newEvalHarness(t)
	acme, other := h.workspace("acme"), h.workspace("other")
	rule := h.rule(acme, ruleSpec{name: "large", expression: `event.amount >= 5000`, enabled: true})
	h.rule(other, ruleSpec{name: "everything", expression: `true`, enabled: true})
	r := h.step(event.KindTransaction, 50*time.Millisecond, false)
	if got := hitNames(t, h.process(r, message(t, acme, 1, "100", nil))[0]); got != nil {
		t.Fatalf("hits %v before the change", got)
	}
	before := r.loader.Load().Current()

	h.exec(`UPDATE speculapro.rules SET expression = 'event.amount >= 50', version = version + 1, updated_at = now() WHERE id = $1`, rule)
	deadline := time.Now().Add(10 * time.Second)
	for r.loader.Load().Current() == before {
		if time.Now().After(deadline) {
			t.Fatal("the change was not picked up within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	after := r.loader.Load().Current()
	if after.Program(other) != before.Program(other) {
		t.Errorf("an unchanged workspace was compiled again")
	}
	out := h.process(r, message(t, acme, 2, "100", nil))
	if got := hitNames(t, out[0]); fmt.Sprint(got) != "[large]" {
		t.Errorf("hits %v after the change, want [large]", got)
	}
	v, _ := out[0].MetaGetMut(metaRuleEval)
	if version := v.(map[string]any)["hits"].([]any)[0].(map[string]any)["version"]; version != int64(2) {
		t.Errorf("hit version %v, want 2", version)
	}

	// Disabled: it stops firing.
	h.exec(`UPDATE speculapro.rules SET enabled = false, version = version + 1, updated_at = now() WHERE id = $1`, rule)
	deadline = time.Now().Add(10 * time.Second)
	for r.loader.Load().Current().Program(acme) != nil {
		if time.Now().After(deadline) {
			t.Fatal("disabling was not picked up within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRealtimeOnlyAndKind(t *testing.T) {
	h := newEvalHarness(t)
	ws := h.workspace("acme")
	for _, r := range []ruleSpec{
		{name: "alert_only", expression: `true`, action: "alert", enabled: true},
		{name: "review", expression: `true`, action: "review", enabled: true},
		{name: "decline", expression: `true`, action: "decline", enabled: true},
		{name: "event_review", appliesTo: "account_event", expression: `true`, action: "review", enabled: true},
	} {
		h.rule(ws, r)
	}
	tests := []struct {
		name     string
		kind     event.Kind
		realtime bool
		want     string
	}{
		{"stream", event.KindTransaction, false, "[alert_only decline review]"},
		{"decision", event.KindTransaction, true, "[decline review]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.step(tt.kind, time.Hour, tt.realtime)
			if got := hitNames(t, h.process(r, message(t, ws, 1, "1", nil))[0]); fmt.Sprint(got) != tt.want {
				t.Errorf("hits %v, want %s", got, tt.want)
			}
		})
	}
}

// Without its rules the step cannot evaluate: it waits for PostgreSQL, and
// a shutdown meanwhile returns the context's error (nothing is acked).
func TestWaitsForTheDatabaseAndStopsOnShutdown(t *testing.T) {
	logs := &testenv.SyncBuffer{}
	logger := service.NewLoggerFromSlog(slog.New(slog.NewTextHandler(logs, nil)))
	r, err := newRuleEval("postgres://nobody:x@127.0.0.1:1/none?sslmode=disable&connect_timeout=1", event.KindTransaction, time.Second, false,
		service.MockResources(service.MockResourcesOptUseLogger(logger)))
	if err != nil {
		t.Fatalf("the constructor did I/O or refused: %v", err)
	}
	defer r.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err = r.ProcessBatch(ctx, service.MessageBatch{message(t, event.UUID{1}, 1, "1", nil)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ProcessBatch with no database: %v, want the context's error", err)
	}
	if !strings.Contains(logs.String(), logLoadRetry) {
		t.Errorf("no retry logged:\n%s", logs)
	}
}

// A replayed event whose results are stored is left alone (its totals are
// today's); one beyond the stored progress, or not a replay, is evaluated.
func TestReplaysOfStoredEventsAreNotEvaluatedAgain(t *testing.T) {
	h := newEvalHarness(t)
	ws := h.workspace("acme")
	h.rule(ws, ruleSpec{name: "everything", expression: `true`, enabled: true})
	h.exec(`INSERT INTO speculapro.stream_progress (topic, kafka_partition, stored_offset) VALUES ('sp.txn.ingested', 3, 100)`)
	r := h.step(event.KindTransaction, time.Hour, false)
	msg := func(n int, partition, offset string, replayed bool) *service.Message {
		m := message(t, ws, n, "1", features(1, false))
		m.MetaSetMut("kafka_topic", "sp.txn.ingested")
		m.MetaSetMut("kafka_partition", partition)
		m.MetaSetMut("kafka_offset", offset)
		if replayed {
			m.MetaSetMut(metaReplayed, true)
		}
		return m
	}
	out := h.process(r,
		msg(1, "3", "99", true),  // stored: skipped
		msg(2, "3", "100", true), // stored: skipped
		msg(3, "3", "101", true), // in flight when a process died: evaluated
		msg(4, "3", "50", false), // not a replay (a new event): evaluated
		msg(5, "4", "1", true),   // a partition with no progress: evaluated
	)
	for i, want := range []string{"[]", "[]", "[everything]", "[everything]", "[everything]"} {
		if got := fmt.Sprint(hitNames(t, out[i])); got != want {
			t.Errorf("message %d: hits %s, want %s", i, got, want)
		}
	}
	if got := h.m.Get("skipped{transaction}"); got != 2 {
		t.Errorf("replays skipped %d, want 2", got)
	}
	if got := h.m.Get("evaluated{transaction}"); got != 3 {
		t.Errorf("evaluated %d, want 3", got)
	}
}

func TestRuleEvalConfig(t *testing.T) {
	tests := []struct {
		name, yaml string
		wantErr    string
	}{
		{"defaults", `{}`, ""},
		{"all fields", "kind: account_event\nreload_interval: 1s\nrealtime_only: true\nurl: postgres://a@b/c", ""},
		{"zero interval", `reload_interval: 0s`, "reload_interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf, err := ruleEvalSpec().ParseYAML(tt.yaml, nil)
			if err == nil {
				var r *ruleEval
				r, err = newRuleEvalFromConfig(conf, service.MockResources())
				if err == nil {
					_ = r.Close(context.Background())
				}
			}
			if (err != nil) != (tt.wantErr != "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestKeepFeatures(t *testing.T) {
	h := newEvalHarness(t)
	acme := h.workspace("acme")
	h.rule(acme, ruleSpec{name: "velocity", expression: `features.account.out_count_1h > 5`, enabled: true})
	r := h.step(event.KindTransaction, time.Hour, false)
	r.keepFeatures = true
	out := h.process(r, message(t, acme, 1, "1", features(7, false)))
	if _, ok := out[0].MetaGetMut(metaFeatures); !ok {
		t.Errorf("keep_features dropped the features")
	}
	if got := hitNames(t, out[0]); fmt.Sprint(got) != "[velocity]" {
		t.Errorf("hits %v, want [velocity]", got)
	}
}

// quietFeatures are running totals on which no starter pack rule fires:
// every feature a starter rule names, none past its threshold.
func quietFeatures() map[string]any {
	return map[string]any{
		"account": map[string]any{"out_count_1h": int64(1), "out_count_24h": int64(1), "out_sum_24h": json.Number("12.5000"),
			"in_sum_24h": json.Number("0.0000"), "distinct_senders_24h": int64(0), "new_counterparty": false, "seconds_since_previous": int64(600)},
		"customer": map[string]any{"seconds_since_sim_swap": int64(-1), "seconds_since_profile_change": int64(-1),
			"events_1h": map[string]any{}, "events_24h": map[string]any{}},
		"counterparty": map[string]any{"distinct_payers_24h": int64(1)},
	}
}

// maxEvalAllocsPerEvent bounds what rule_eval allocates for an event
// nothing fires on (nearly every event): none of its own; the features
// metadata it drops and the shared no-hits answer it sets cost nothing.
const maxEvalAllocsPerEvent = 0

// The starter pack (16 rules) on a 500-event batch where nothing fires
// (0.01 allocations an event measured, with -race too):
// rule_eval's allocations stay a batch's few, none an event (what a hit
// costs is not bounded here: hits are rare and each is a row to store).
func TestRuleEvalAllocationsPerEvent(t *testing.T) {
	r, ws, prog := starterPackEval(t)
	m := &testenv.Metrics{}
	r.m = ruleEvalMetrics{evaluated: m.Metric("evaluated"), skipped: m.Metric("skipped"), hits: m.Metric("hits"), ruleEvaluations: m.Metric("evaluations"), errors: m.Metric("errors"), loaded: m.Metric("loaded"), stage: m.Metric("stage")}

	// perRuleAllocs: each batch adds its events to every rule's evaluations
	// counter once (this test's counters build their key each time).
	const n, batchAllocs, perRuleAllocs = 500, 12, 4
	in, work, feats := quietBatch(t, ws, n)
	ctx := context.Background()
	// What setting the features costs (feature_update's work) is measured
	// alone and taken off.
	setup := testing.AllocsPerRun(5, func() {
		copy(work, in)
		for _, msg := range work {
			msg.MetaSetMut(metaFeatures, feats)
		}
	})
	allocs := testing.AllocsPerRun(5, func() {
		copy(work, in)
		for _, msg := range work {
			msg.MetaSetMut(metaFeatures, feats)
		}
		if _, err := r.ProcessBatch(ctx, work); err != nil {
			t.Fatal(err)
		}
	}) - setup
	if got := m.Get("hits{}") + m.Get("errors{}"); got != 0 || len(hitNames(t, work[0])) != 0 {
		t.Fatalf("the quiet batch had hits or rule errors: %s", m)
	}
	if m.Get("evaluated{transaction}") == 0 {
		t.Fatalf("nothing was evaluated: %s", m)
	}
	t.Logf("rule_eval: %.2f allocations per event", allocs/n)
	if limit := float64(maxEvalAllocsPerEvent*n + batchAllocs + perRuleAllocs*prog.Len()); allocs > limit {
		t.Errorf("rule_eval allocates %.0f times for %d events nothing fires on, more than %.0f", allocs, n, limit)
	}
}
