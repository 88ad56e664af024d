package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/redisconn"
)

// streamSmokeRules is the rule file the smoke test applies: one rule that
// alerts, one that only records its hits and reads the running totals.
const streamSmokeRules = `rules:
  - name: large_payment_out
    description: A payment out of 1,000 or more.
    severity: high
    action: alert
    score: 30
    expression: event.direction == "out" && event.amount >= 1000
    tests:
      - name: fires on 1,500 out
        event: { direction: out, amount: "1500.00", currency: EUR }
        expect: hit
  - name: third_payment_out_in_a_day
    description: The third or later payment out of an account within 24 hours.
    severity: low
    action: alert
    alert: false
    score: 5
    expression: event.direction == "out" && features.account.out_count_24h >= 3
    tests:
      - name: fires on the third
        event: { direction: out, amount: "1", currency: EUR }
        features: { account: { out_count_24h: 3 } }
        expect: hit
`

// The stream evaluator end to end, as a user runs it: rules applied with
// `speculapro rules apply`, transactions on the topic, `speculapro run
// pipelines/stream.yaml`; the hits, the alerts and each alert's webhook
// delivery and notification land in PostgreSQL once, and a renamed group
// (the whole topic read again, inside the replay window) adds nothing.
func TestStreamRaisesAlertsEndToEnd(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	k := newPersistKafka(t)
	conn := db.Connect(t, db.SuperuserURL)
	ws := persistWorkspace(t, conn)
	redisURL := testenv.RedisURL(t)
	keyPrefix := uniqueName(t, "stream-e2e") + ":"
	t.Cleanup(func() { deleteRedisKeys(t, redisURL, keyPrefix) })

	mustExec(t, conn, `INSERT INTO speculapro.webhook_endpoints (workspace_id, url, secret_encrypted) VALUES ($1, 'https://example.test/hook', '\x00')`, ws)
	mustExec(t, conn, `INSERT INTO speculapro.notification_subscriptions (workspace_id, channel, recipient, min_severity) VALUES ($1, 'email', 'analyst@example.test', 'medium')`, ws)
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(streamSmokeRules), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runBin(t, map[string]string{"SP_DB_URL": db.AppURL}, "rules", "apply", rulesFile, "--workspace", ws.String()); code != 0 {
		t.Fatalf("rules apply: exit %d\n%s\n%s", code, out, errOut)
	}

	// acc-1 pays out 10, 20, 1500 and 2000: large_payment_out fires on the
	// last two, third_payment_out_in_a_day on the third and fourth. acc-2
	// receives 5000: nothing fires.
	var recs []*kgo.Record
	for i, p := range []struct {
		account, amount string
		dir             event.Direction
	}{
		{"acc-1", "10.00", event.DirectionOut}, {"acc-1", "20.00", event.DirectionOut},
		{"acc-1", "1500.00", event.DirectionOut}, {"acc-1", "2000.00", event.DirectionOut},
		{"acc-2", "5000.00", event.DirectionIn},
	} {
		key, val, _ := persistTxn(t, ws, i, func(e *event.Envelope) {
			e.AccountExternalID, e.Amount, e.Direction = p.account, p.amount, p.dir
			e.CustomerExternalID = "owner-of-" + p.account
			e.OccurredAt = persistBase.Add(time.Duration(i) * time.Minute)
		})
		recs = append(recs, &kgo.Record{Key: []byte(key), Value: val})
	}
	recs = append(recs, &kgo.Record{Key: []byte("bad"), Value: []byte("{")})
	k.produceTo(t, "txn.ingested", recs...)

	env := map[string]string{
		"SP_KAFKA_BROKERS":      strings.Join(k.brokers, ","),
		"SP_KAFKA_TOPIC_PREFIX": k.prefix,
		"SP_STREAM_GROUP":       k.group,
		"SP_DB_SYSTEM_URL":      db.SystemURL,
		"SP_REDIS_URL":          redisURL,
		"SP_REDIS_KEY_PREFIX":   keyPrefix,
	}
	// Both alerts are acc-1's owner's: one case, opened once, both
	// attached; the endpoint takes every event type (2 alert.created, 1
	// case.opened, 2 case.alert_attached).
	want := map[string]int{"rule_hits": 4, "alerts": 2, "cases": 1, "case_events": 3, "webhook_deliveries": 5, "notifications": 2}
	p := newBinProcess(t).named("stream")
	p.start(t, env, p.runArgs("pipelines/stream.yaml")...)
	waitUntil(t, waitBound, "the hits, alerts and outbox rows", func() error { return streamRowsAre(t, conn, want) })

	scrape := waitForMetric(t, p, "speculapro_stream_events_evaluated_total", 5)
	for _, m := range []struct {
		metric string
		labels []string
		want   float64
	}{
		{"speculapro_stream_rule_hits_total", []string{`rule="large_payment_out"`}, 2},
		{"speculapro_stream_rule_hits_total", []string{`rule="third_payment_out_in_a_day"`}, 2},
		{"speculapro_stream_alerts_created_total", nil, 2},
		{"speculapro_stream_records_skipped_total", []string{`reason="undecodable"`}, 1},
		{"speculapro_stream_rule_errors_total", nil, 0},
		{"speculapro_stream_faults_total", nil, 0},
	} {
		if got := metricSum(scrape, m.metric, m.labels...); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.metric, m.labels, got, m.want)
		}
	}
	var alertsRight int
	if err := conn.QueryRow(context.Background(), `
SELECT count(*) FROM speculapro.alerts a JOIN speculapro.rules r ON r.id = a.rule_id
 WHERE r.name = 'large_payment_out' AND a.severity = 'high' AND a.title = 'A payment out of 1,000 or more.'
   AND a.dedupe_key = a.rule_id::text || ':' || a.event_id::text`).Scan(&alertsRight); err != nil || alertsRight != 2 {
		t.Errorf("%d alerts of large_payment_out as expected (err %v), want 2", alertsRight, err)
	}
	if !persistLogLine("WARN", "stream: skipped undecodable records").MatchString(p.stderr.String() + p.stdout.String()) {
		t.Errorf("no WARN line for the undecodable record:\n%s", p.tail(3000))
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}

	// A renamed group reads the whole topic again, inside the replay
	// window: the totals do not move, and every event, its results stored
	// already, is left alone (evaluated against today's totals, the earlier
	// payments would see the later ones). Nothing is written twice.
	env["SP_STREAM_GROUP"] = k.group + "-events" // owned by k: deleted at cleanup
	again := newBinProcess(t).named("stream (renamed group)")
	again.start(t, env, again.runArgs("pipelines/stream.yaml")...)
	scrape = waitForMetric(t, again, "speculapro_stream_replays_skipped_total", 5)
	for _, m := range []string{"speculapro_stream_rule_hits_total", "speculapro_stream_alerts_created_total", "speculapro_stream_events_evaluated_total"} {
		if got := metricSum(scrape, m); got != 0 {
			t.Errorf("the replay: %s = %v, want 0", m, got)
		}
	}
	if err := streamRowsAre(t, conn, want); err != nil {
		t.Errorf("after the replay: %v", err)
	}
	if code := again.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

// The stream connected as speculapro_app would be blocked by row-level
// security: it refuses to start with the documented line, alone and as a
// stream of `speculapro streams`, before it reads anything.
func TestStreamRefusesToStartAsAppRole(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	k := newPersistKafka(t)
	env := map[string]string{
		"SP_KAFKA_BROKERS":      strings.Join(k.brokers, ","),
		"SP_KAFKA_TOPIC_PREFIX": k.prefix,
		"SP_STREAM_GROUP":       k.group,
		"SP_DB_SYSTEM_URL":      db.AppURL,
		"SP_REDIS_URL":          testenv.RedisURL(t),
		"SP_REDIS_KEY_PREFIX":   uniqueName(t, "stream-role") + ":",
	}
	modes := []struct {
		name string
		args func(p *binProcess) []string
	}{
		{"run", func(p *binProcess) []string { return p.runArgs("pipelines/stream.yaml") }},
		{"streams", func(*binProcess) []string {
			return []string{"streams", "-o", "config/observability.yaml", "pipelines/stream.yaml", "pipelines/stream-events.yaml"}
		}},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			p := newBinProcess(t)
			p.start(t, env, mode.args(p)...)
			requireRoleRefusal(t, p)
		})
	}
	if n := k.committedOffsets(t, k.group); n != 0 {
		t.Errorf("group %s committed offsets (sum %d): the refused stream read", k.group, n)
	}
}

// `speculapro dev` runs the stream pipelines beside the others, says which
// Redis they use, and a transaction produced to its embedded broker raises
// the alert its workspace's rule asks for.
func TestDevRunsTheStreamPipelines(t *testing.T) {
	t.Parallel()
	db := dbtest.NewBootstrapped(t)
	redisURL := testenv.RedisURL(t)
	keyPrefix := uniqueName(t, "dev-stream") + ":"
	t.Cleanup(func() { deleteRedisKeys(t, redisURL, keyPrefix) })
	env := map[string]string{
		"SP_DB_SUPERUSER_URL": testenv.PostgresSuperuserURL(t),
		"SP_DB_OWNER_URL":     db.OwnerURL,
		"SP_DB_URL":           db.AppURL,
		"SP_DB_SYSTEM_URL":    db.SystemURL,
		"SP_DATA_DIR":         t.TempDir(),
		"SP_INGEST_ADDR":      testenv.FreeAddr(t),
		"SP_REDIS_URL":        redisURL,
		"SP_REDIS_KEY_PREFIX": keyPrefix,
	}
	dev, kafkaAddr := devStart(t, env)
	if want := "dev: using Redis at " + redisURL; !strings.Contains(dev.stdout.String(), want) {
		t.Errorf("dev output lacks %q:\n%s", want, dev.stdout)
	}

	conn := db.Connect(t, db.SuperuserURL)
	ws := persistWorkspace(t, conn)
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(streamSmokeRules), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runBin(t, map[string]string{"SP_DB_URL": db.AppURL}, "rules", "apply", rulesFile, "--workspace", ws.String()); code != 0 {
		t.Fatalf("rules apply: exit %d\n%s\n%s", code, out, errOut)
	}
	key, val, _ := persistTxn(t, ws, 1, func(e *event.Envelope) { e.Amount, e.Direction = "2500.00", event.DirectionOut })
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "sp.txn.ingested", Key: []byte(key), Value: val}).FirstErr(); err != nil {
		t.Fatalf("producing: %v", err)
	}
	waitUntil(t, waitBound, "the alert", func() error {
		return streamRowsAre(t, conn, map[string]int{"rule_hits": 1, "alerts": 1})
	})
	devStop(t, dev)
}

// streamRowsAre checks the row counts of the tables the stream writes.
func streamRowsAre(t *testing.T, conn *pgx.Conn, want map[string]int) error {
	got := map[string]int{}
	for table := range want {
		got[table] = persistCount(t, conn, "SELECT count(*) FROM speculapro."+table)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("rows %v, want %v", got, want)
	}
	return nil
}

// waitForMetric scrapes p until metric (summed over its labels) reaches
// want, and returns that scrape.
func waitForMetric(t *testing.T, p *binProcess, metric string, want float64) string {
	t.Helper()
	var scrape string
	waitUntil(t, waitBound, metric, func() error {
		s, err := p.scrape()
		if err != nil {
			return err
		}
		if got := metricSum(s, metric); got < want {
			return fmt.Errorf("%s = %v, want %v", metric, got, want)
		}
		scrape = s
		return nil
	})
	return scrape
}

func mustExec(t *testing.T, conn *pgx.Conn, query string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// deleteRedisKeys removes the test's running totals (single Redis).
func deleteRedisKeys(t *testing.T, redisURL, prefix string) {
	cl, err := redisconn.Open(redisURL)
	if err != nil {
		t.Errorf("opening Redis: %v", err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := cl.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		_ = cl.Del(ctx, iter.Val()).Err()
	}
	if err := iter.Err(); err != nil {
		t.Errorf("deleting Redis keys %s*: %v", prefix, err)
	}
}
