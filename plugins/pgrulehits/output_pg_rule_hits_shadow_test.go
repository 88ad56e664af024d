package pgrulehits

import (
	"context"
	"fmt"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/rules"
)

// withEvaluated marks every message of b as evaluated against ev, as
// rule_eval does (one shared value per set of rules in force).
func withEvaluated(b service.MessageBatch, ev *rules.Evaluated) service.MessageBatch {
	for _, m := range b {
		v, _ := m.MetaGetMut(metaRuleEval)
		meta := map[string]any{"evaluated": ev}
		for k, x := range v.(map[string]any) {
			meta[k] = x
		}
		m.MetaSetMut(metaRuleEval, meta)
	}
	return b
}

// A shadow hit is stored, marked shadow, and goes no further: no alert, no
// webhook delivery, no notification, even with endpoints and subscriptions
// that take every alert and a hit that asks for one. The events evaluated
// per rule version are counted with the hits, once: a replayed batch adds
// nothing.
func TestShadowHitIsStoredMarkedAndGoesNoFurther(t *testing.T) {
	h := newHitsHarness(t)
	h.endpoint(h.ws, true)
	h.subscription(h.ws, "low", true)
	shadow := h.rule(h.ws, testRule{name: "large_shadow", severity: "high", alert: true})
	h.exec(`UPDATE speculapro.rules SET mode = 'shadow' WHERE id = $1`, shadow.id)
	live := h.rules["large_amount"]
	ev := &rules.Evaluated{Rules: []*rules.Rule{
		{ID: live.id, WorkspaceID: h.ws, Version: 1, Mode: rules.ModeLive},
		{ID: shadow.id, WorkspaceID: h.ws, Version: 1, Mode: rules.ModeShadow},
	}}

	b := evaluated(t, h.ws, 0, 10, live, shadow)
	for _, m := range b {
		v, _ := m.MetaGetMut(metaRuleEval)
		hits := v.(map[string]any)["hits"].([]any)
		hits[1].(map[string]any)["shadow"] = true // alert stays true: the output must not trust it
	}
	b = withEvaluated(b, ev)
	quiet := withEvaluated(evaluated(t, h.ws, 10, 15), ev)
	h.writeHits(append(b, quiet...))

	// The live rule's 10 alerts, each with its notification, its
	// alert.created delivery and its step into a case; nothing more.
	rows := h.rowCounts()
	for q, want := range map[string]int{
		`SELECT count(*) FROM speculapro.rule_hits`:                                                   20,
		`SELECT count(*) FROM speculapro.alerts`:                                                      10,
		`SELECT count(*) FROM speculapro.notifications`:                                               10,
		`SELECT count(*) FROM speculapro.webhook_deliveries WHERE event_type = 'alert.created'`:       10,
		`SELECT count(*) FROM speculapro.case_events WHERE kind = 'alert_attached'`:                   10,
		`SELECT count(*) FROM speculapro.webhook_deliveries WHERE event_type = 'case.alert_attached'`: 10,
	} {
		if got := h.count(q); got != want {
			t.Errorf("%s: %d, want %d", q, got, want)
		}
	}
	if n := h.count(`SELECT count(*) FROM speculapro.rule_hits WHERE shadow AND rule_id = $1`, shadow.id); n != 10 {
		t.Errorf("%d shadow hits of the shadow rule marked shadow, want 10", n)
	}
	if n := h.count(`SELECT count(*) FROM speculapro.rule_hits WHERE shadow AND rule_id <> $1`, shadow.id); n != 0 {
		t.Errorf("%d live hits marked shadow", n)
	}
	if n := h.count(`SELECT count(*) FROM speculapro.alerts WHERE rule_id = $1`, shadow.id); n != 0 {
		t.Errorf("%d alerts of the shadow rule", n)
	}
	if live, shadow := h.m.Get("hits{transaction,live}"), h.m.Get("hits{transaction,shadow}"); live != 10 || shadow != 10 {
		t.Errorf("hits stored counted live %d shadow %d, want 10 and 10", live, shadow)
	}
	evaluations := func() string {
		var got string
		if err := h.conn.QueryRow(context.Background(), `
SELECT string_agg(r.name || ':' || e.rule_version || ':' || e.shadow || ':' || e.events, ' ' ORDER BY r.name)
  FROM speculapro.rule_evaluations e JOIN speculapro.rules r ON r.id = e.rule_id`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := evaluations(); got != "large_amount:1:false:15 large_shadow:1:true:15" {
		t.Errorf("evaluations %q after 15 events", got)
	}

	// The same batch again, as rule_eval leaves a replay whose results are
	// stored (no hits, nothing evaluated), then 5 new events.
	for _, m := range b {
		m.MetaSetMut(metaRuleEval, map[string]any{"hits": []any{}, "replayed": true})
	}
	h.writeHits(b)
	h.writeHits(withEvaluated(evaluated(t, h.ws, 15, 20), ev))
	if got := evaluations(); got != "large_amount:1:false:20 large_shadow:1:true:20" {
		t.Errorf("evaluations %q after a replay and 5 new events", got)
	}
	if got := h.rowCounts(); fmt.Sprint(got) != fmt.Sprint(rows) {
		t.Errorf("after a replay: rows %v, want %v", got, rows)
	}
}
