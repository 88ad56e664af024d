package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/event"
)

// twinRule is one of two rules with one expression, reading the event and
// the running totals: live under one name, shadow under another.
const twinRule = `  - name: %s
    mode: %s
    severity: high
    score: 20
    expression: event.direction == "out" && (event.amount >= 400 || features.account.out_count_1h >= 6)
    tests:
      - { name: big, event: { direction: out, amount: "450" }, features: { account: { out_count_1h: 1 } }, expect: hit }
`

// shadowRulesFile: the twins, and a shadow rule that would decline the
// large payments the decision API sees.
var shadowRulesFile = "rules:\n" + fmt.Sprintf(twinRule, "big_or_busy_live", "live") +
	fmt.Sprintf(twinRule, "big_or_busy_shadow", "shadow") + `  - name: huge_decline_shadow
    mode: shadow
    action: decline
    severity: critical
    score: 90
    expression: event.amount >= 9000
    tests:
      - { name: huge, event: { amount: "9500" }, expect: hit }
`

// A shadow rule end to end, with the real binary on real Kafka, Redis and
// PostgreSQL: transactions decided by the decision API flow through the
// stream, which evaluates the shadow rules with the live one. The shadow
// twin of a live rule hits exactly the events the live one hits, event by
// event, and is counted against the same events evaluated; its hits are
// stored once, marked shadow, with no alert, webhook delivery or
// notification; the shadow decline rule never changes a decision. Then
// `rules stats` reports the figures, and `rules apply` switches a rule to
// live as a new version.
func TestShadowRulesEndToEnd(t *testing.T) {
	t.Parallel()
	s := newDecisionStack(t, "shadow-e2e", testenv.KafkaBrokers(t), testenv.RedisURL(t), "")
	ctx := context.Background()
	mustExec(t, s.super, `DELETE FROM speculapro.rules WHERE workspace_id = $1`, s.ws) // the stack's own rules
	mustExec(t, s.super, `INSERT INTO speculapro.webhook_endpoints (workspace_id, url, secret_encrypted) VALUES ($1, 'https://example.invalid/all', '\x00')`, s.ws)
	mustExec(t, s.super, `INSERT INTO speculapro.notification_subscriptions (workspace_id, channel, recipient, min_severity) VALUES ($1, 'email', 'analyst@example.test', 'low')`, s.ws)
	file := t.TempDir() + "/shadow.yaml"
	if err := os.WriteFile(file, []byte(shadowRulesFile), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, code := runBin(t, map[string]string{"SP_DB_URL": s.db.AppURL}, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s\n%s", args, code, out, errOut)
		}
		return out
	}
	if out := cli("rules", "apply", file, "--workspace", s.ws.String()); strings.Count(out, "created ") != 3 {
		t.Fatalf("rules apply:\n%s", out)
	}

	group := uniqueName(t, "shadow-stream")
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = kadm.NewClient(s.kcl).DeleteGroups(cctx, group)
	})
	stream := newBinProcess(t).named("stream")
	stream.start(t, s.env(map[string]string{"SP_STREAM_GROUP": group}), stream.runArgs("pipelines/stream.yaml")...)
	s.startDecision(t, "decision", nil)

	// A loadgen-like run through the decision API: 40 accounts, two payments
	// out for one in, every 97th over 9,000.
	run := newDecisionRun()
	s.sendAtRate("shadow", 0, 300, 150, run)
	if len(run.failures) > 0 {
		t.Fatalf("%d requests failed, e.g. %v", len(run.failures), run.failures[0])
	}
	// Every answered transaction is delivered to the stream, degraded or
	// not; hugeDecided of those over 9,000 were decided by the rules.
	decided, huge, hugeDecided := 0, 0, 0
	for ext, a := range run.answers {
		var n int
		over := false
		if _, err := fmt.Sscanf(ext, "shadow-%d", &n); err == nil && n%97 == 5 {
			huge++
			over = true
		}
		if a.Degraded {
			continue // the fallback decided it: nothing to learn about the rules
		}
		decided++
		if over {
			hugeDecided++
		}
		if a.Decision != "approve" || a.Score != 0 || len(a.Rules) != 0 {
			t.Errorf("%s: %s score %v rules %+v; only shadow rules can fire, so approve, 0, none", ext, a.Decision, a.Score, a.Rules)
		}
	}
	if hugeDecided == 0 || decided < len(run.answers)/2 {
		t.Fatalf("%d of %d decisions not degraded, %d of them over 9,000: too few to judge", decided, len(run.answers), hugeDecided)
	}

	// Wait until the stream has evaluated every decided transaction.
	total := len(run.answers)
	evaluated := func(rule string) (n int64) {
		_ = s.super.QueryRow(ctx, `SELECT coalesce(sum(e.events), 0) FROM speculapro.rule_evaluations e
  JOIN speculapro.rules r ON r.id = e.rule_id WHERE r.workspace_id = $1 AND r.name = $2`, s.ws, rule).Scan(&n)
		return n
	}
	waitUntil(t, waitBound, "the stream to evaluate every transaction", func() error {
		if n := evaluated("big_or_busy_live"); n < int64(total) {
			return fmt.Errorf("%d of %d evaluated", n, total)
		}
		return nil
	})
	for _, rule := range []string{"big_or_busy_live", "big_or_busy_shadow", "huge_decline_shadow"} {
		if n := evaluated(rule); n != int64(total) {
			t.Errorf("%s counted %d events evaluated, want %d", rule, n, total)
		}
	}

	live, shadow := shadowHitSet(t, s.super, s.ws, "big_or_busy_live"), shadowHitSet(t, s.super, s.ws, "big_or_busy_shadow")
	if len(live) == 0 || len(live) == total {
		t.Fatalf("the live rule hit %d of %d events: the run proves nothing", len(live), total)
	}
	if strings.Join(live, " ") != strings.Join(shadow, " ") {
		t.Errorf("the shadow twin hit %d events, the live rule %d, not the same:\nlive   %v\nshadow %v", len(shadow), len(live), live, shadow)
	}
	declines := shadowHitSet(t, s.super, s.ws, "huge_decline_shadow")
	if len(declines) != huge {
		t.Errorf("the shadow decline rule hit %d events, want the %d decided over 9,000 (stored once each)", len(declines), huge)
	}
	checkShadowDownstream(t, s.super, s.ws, len(live), len(shadow)+len(declines))

	scrape, err := stream.scrape()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		metric string
		labels []string
		want   float64
	}{
		{"speculapro_stream_rule_hits_total", []string{`rule="big_or_busy_shadow"`, `mode="shadow"`}, float64(len(shadow))},
		{"speculapro_stream_rule_hits_total", []string{`rule="big_or_busy_live"`, `mode="live"`}, float64(len(live))},
		{"speculapro_stream_rule_evaluations_total", []string{`rule="big_or_busy_shadow"`, `mode="shadow"`}, float64(total)},
		{"speculapro_stream_rule_hits_stored_total", []string{`mode="shadow"`}, float64(len(shadow) + len(declines))},
		{"speculapro_stream_alerts_created_total", nil, float64(len(live))},
	} {
		if got := metricSum(scrape, m.metric, m.labels...); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.metric, m.labels, got, m.want)
		}
	}

	checkShadowStats(t, cli("rules", "stats", "--workspace", s.ws.String(), "--format", "json"), total, len(live), huge)

	// Switching the shadow twin live is a new version, shown by rules list.
	if err := os.WriteFile(file, []byte(strings.Replace(shadowRulesFile, "  - name: big_or_busy_shadow\n    mode: shadow\n", "  - name: big_or_busy_shadow\n    mode: live\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := cli("rules", "apply", file, "--workspace", s.ws.String()); !strings.Contains(out, "updated big_or_busy_shadow v2") || !strings.Contains(out, "unchanged huge_decline_shadow v1") {
		t.Errorf("switching a rule live:\n%s", out)
	}
	list := cli("rules", "list", "--workspace", s.ws.String())
	listed := map[string]string{}
	for _, line := range strings.Split(list, "\n") {
		if f := strings.Fields(line); len(f) > 2 {
			listed[f[0]] = f[1] + " " + f[2]
		}
	}
	if listed["big_or_busy_shadow"] != "v2 live" || listed["huge_decline_shadow"] != "v1 shadow" || listed["NAME"] != "VERSION MODE" {
		t.Errorf("rules list:\n%s", list)
	}
}

// shadowHitSet is the events rule hit, sorted; it fails the test when a
// hit's shadow mark is not the rule's mode.
func shadowHitSet(t *testing.T, conn *pgx.Conn, ws event.UUID, rule string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT h.event_id::text, h.shadow = (r.mode = 'shadow')
  FROM speculapro.rule_hits h JOIN speculapro.rules r ON r.id = h.rule_id
 WHERE r.workspace_id = $1 AND r.name = $2 ORDER BY 1`, ws, rule)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	var id string
	var marked bool
	if _, err := pgx.ForEachRow(rows, []any{&id, &marked}, func() error {
		if !marked {
			return fmt.Errorf("hit of %s on %s marked against its mode", rule, id)
		}
		ids = append(ids, id)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ids
}

// checkShadowDownstream: every live hit raised one alert, one alert.created
// delivery and one notification; no shadow hit raised anything (no
// alert.created, whose alert names the rule, and no case.alert_attached,
// whose event body does).
func checkShadowDownstream(t *testing.T, conn *pgx.Conn, ws event.UUID, liveHits, shadowHits int) {
	t.Helper()
	var stored, alerts, shadowAlerts, deliveries, shadowDeliveries, notes int
	if err := conn.QueryRow(context.Background(), `
SELECT (SELECT count(*) FROM speculapro.rule_hits WHERE workspace_id = $1 AND shadow),
       (SELECT count(*) FROM speculapro.alerts WHERE workspace_id = $1),
       (SELECT count(*) FROM speculapro.alerts a JOIN speculapro.rules r ON r.id = a.rule_id WHERE a.workspace_id = $1 AND r.mode = 'shadow'),
       (SELECT count(*) FROM speculapro.webhook_deliveries WHERE workspace_id = $1 AND event_type = 'alert.created'),
       (SELECT count(*) FROM speculapro.webhook_deliveries d JOIN speculapro.rules r
                  ON r.id::text = coalesce(d.payload->'alert'->>'rule_id', d.payload->'event'->'body'->>'rule_id')
         WHERE d.workspace_id = $1 AND r.mode = 'shadow'),
       (SELECT count(*) FROM speculapro.notifications WHERE workspace_id = $1)`, ws).
		Scan(&stored, &alerts, &shadowAlerts, &deliveries, &shadowDeliveries, &notes); err != nil {
		t.Fatal(err)
	}
	if stored != shadowHits || alerts != liveHits || shadowAlerts != 0 || deliveries != liveHits || shadowDeliveries != 0 || notes != liveHits {
		t.Errorf("shadow hits stored %d (want %d); alerts %d, deliveries %d, notifications %d (want %d each); of shadow rules: alerts %d, deliveries %d (want 0)",
			stored, shadowHits, alerts, deliveries, notes, liveHits, shadowAlerts, shadowDeliveries)
	}
}

// checkShadowStats reads `rules stats --format json`: both twins evaluated
// on every event with the same hits, only the live one alerting.
func checkShadowStats(t *testing.T, out string, total, hits, huge int) {
	t.Helper()
	var rep struct {
		Rules []struct {
			Rule      string   `json:"rule"`
			Version   int      `json:"version"`
			Mode      string   `json:"mode"`
			Evaluated int      `json:"events_evaluated"`
			Hits      int      `json:"hits"`
			Alerts    int      `json:"alerts"`
			Rate      *float64 `json:"hits_per_1000"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("rules stats --format json: %v\n%s", err, out)
	}
	var got []string
	for _, r := range rep.Rules {
		got = append(got, fmt.Sprintf("%s v%d %s %d %d %d", r.Rule, r.Version, r.Mode, r.Evaluated, r.Hits, r.Alerts))
	}
	want := []string{
		fmt.Sprintf("big_or_busy_live v1 live %d %d %d", total, hits, hits),
		fmt.Sprintf("big_or_busy_shadow v1 shadow %d %d 0", total, hits),
		fmt.Sprintf("huge_decline_shadow v1 shadow %d %d 0", total, huge),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rules stats:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(rep.Rules) > 0 && (rep.Rules[0].Rate == nil || *rep.Rules[0].Rate != float64(hits)*1000/float64(total)) {
		t.Errorf("hit rate %v, want %v", rep.Rules[0].Rate, float64(hits)*1000/float64(total))
	}
}
