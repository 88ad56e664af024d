package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/devtools/pgwritetest"
	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
)

// streamCaseRules: a medium alert for a payment of 100 or more, a critical
// one for 1,000 or more (both fire on a large payment).
const streamCaseRules = `rules:
  - name: payment_over_100
    severity: medium
    expression: event.amount >= 100
  - name: payment_over_1000
    severity: critical
    expression: event.amount >= 1000
`

// caseTxn is one payment of the cases test: an account, its owner ("" for
// none) and an amount.
type caseTxn struct{ account, customer, amount string }

// Alerts open and join cases through the real stream, grouped as each
// workspace's setting (set with `speculapro workspace set`) says, the case's
// priority following its most severe alert across batches, each case step
// queued for the endpoint subscribed to it.
func TestStreamCasesGroupAndFollowPriority(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	k := newPersistKafka(t)
	conn := db.Connect(t, db.SuperuserURL)
	redisURL := testenv.RedisURL(t)
	keyPrefix := uniqueName(t, "stream-cases") + ":"
	t.Cleanup(func() { deleteRedisKeys(t, redisURL, keyPrefix) })
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(streamCaseRules), 0o644); err != nil {
		t.Fatal(err)
	}
	groupings := []string{"customer", "account", "alert"}
	wss := map[string]event.UUID{}
	for _, g := range groupings {
		ws := persistWorkspace(t, conn)
		wss[g] = ws
		app := map[string]string{"SP_DB_URL": db.AppURL}
		if out, errOut, code := runBin(t, app, "rules", "apply", rulesFile, "--workspace", ws.String()); code != 0 {
			t.Fatalf("rules apply: exit %d\n%s\n%s", code, out, errOut)
		}
		out, errOut, code := runBin(t, app, "workspace", "set", "--workspace", ws.String(), "--case-grouping", g)
		if code != 0 || out != "case_grouping="+g+"\n" {
			t.Fatalf("workspace set --case-grouping %s: exit %d\n%s\n%s", g, code, out, errOut)
		}
	}
	mustExec(t, conn, `INSERT INTO speculapro.webhook_endpoints (workspace_id, url, secret_encrypted, event_types)
VALUES ($1, 'https://example.test/hook', '\x00', '{case.opened,case.alert_attached}')`, wss["customer"])

	// First: cust-1 pays 200 from acc-1 and 300 from acc-2, and acc-3
	// (no customer named) 500: one medium alert each.
	first := []caseTxn{{"acc-1", "cust-1", "200.00"}, {"acc-2", "cust-1", "300.00"}, {"acc-3", "", "500.00"}}
	// Then: acc-1 pays 5000 (a medium and a critical alert) and acc-2 150.
	then := []caseTxn{{"acc-1", "cust-1", "5000.00"}, {"acc-2", "cust-1", "150.00"}}
	produceCaseTxns(t, k, wss, first, 0)

	p := newBinProcess(t).named("stream")
	p.start(t, map[string]string{
		"SP_KAFKA_BROKERS": strings.Join(k.brokers, ","), "SP_KAFKA_TOPIC_PREFIX": k.prefix,
		"SP_STREAM_GROUP": k.group, "SP_DB_SYSTEM_URL": db.SystemURL,
		"SP_REDIS_URL": redisURL, "SP_REDIS_KEY_PREFIX": keyPrefix,
	}, p.runArgs("pipelines/stream.yaml")...)
	waitUntil(t, waitBound, "the first alerts", func() error { return alertsAre(t, conn, 3*3) })
	want := map[string][]string{
		"customer": {"account:acc-3 medium 1", "customer:cust-1 medium 2"},
		"account":  {"account:acc-1 medium 1", "account:acc-2 medium 1", "account:acc-3 medium 1"},
		"alert":    {"alert medium 1", "alert medium 1", "alert medium 1"},
	}
	before := checkCases(t, conn, wss, want, "after the first payments")

	produceCaseTxns(t, k, wss, then, len(first))
	waitUntil(t, waitBound, "the later alerts", func() error { return alertsAre(t, conn, 3*6) })
	want = map[string][]string{
		"customer": {"account:acc-3 medium 1", "customer:cust-1 critical 5"},
		"account":  {"account:acc-1 critical 3", "account:acc-2 medium 2", "account:acc-3 medium 1"},
		"alert":    {"alert critical 1", "alert medium 1", "alert medium 1", "alert medium 1", "alert medium 1", "alert medium 1"},
	}
	after := checkCases(t, conn, wss, want, "after the later payments")
	for _, c := range []string{"customer customer:cust-1", "account account:acc-1", "account account:acc-2"} {
		if after[c] <= before[c] {
			t.Errorf("case %s: version %d after alerts joined it, %d before: want it raised", c, after[c], before[c])
		}
	}
	if after["account account:acc-3"] != before["account account:acc-3"] {
		t.Errorf("case acc-3: version moved from %d to %d with no alert joining", before["account account:acc-3"], after["account account:acc-3"])
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	// The endpoint of the customer-grouped workspace: 2 cases opened, 6
	// alerts attached.
	if n := persistCount(t, conn, `SELECT count(*) FROM speculapro.webhook_deliveries WHERE event_type LIKE 'case.%'`); n != 2+6 {
		t.Errorf("%d case deliveries, want 8", n)
	}
	for _, f := range pgwritetest.CaseFaults(t, conn) {
		t.Error(f)
	}
}

// produceCaseTxns sends txns to every workspace of wss, numbered from n.
func produceCaseTxns(t *testing.T, k *persistKafka, wss map[string]event.UUID, txns []caseTxn, n int) {
	t.Helper()
	var recs []*kgo.Record
	for _, ws := range wss {
		for i, c := range txns {
			key, val, _ := persistTxn(t, ws, n+i, func(e *event.Envelope) {
				e.AccountExternalID, e.CustomerExternalID, e.Amount = c.account, c.customer, c.amount
				e.Direction = event.DirectionOut
				e.OccurredAt = persistBase.Add(time.Duration(n+i) * time.Minute)
			})
			recs = append(recs, &kgo.Record{Key: []byte(key), Value: val})
		}
	}
	k.produceTo(t, "txn.ingested", recs...)
}

func alertsAre(t *testing.T, conn *pgx.Conn, want int) error {
	if n := persistCount(t, conn, "SELECT count(*) FROM speculapro.alerts"); n != want {
		return fmt.Errorf("%d alerts, want %d", n, want)
	}
	return nil
}

// checkCases compares each workspace's cases, as "<group> <priority>
// <alerts>" sorted, with want; a group names its customer or account by
// external ID, and an alert's group is "alert". It returns each case's
// version by its description.
func checkCases(t *testing.T, conn *pgx.Conn, wss map[string]event.UUID, want map[string][]string, when string) map[string]int64 {
	t.Helper()
	versions := map[string]int64{}
	for g, ws := range wss {
		names := map[string]string{}
		for _, id := range []string{"cust-1"} {
			names["customer:"+event.CustomerID(ws, id).String()] = "customer:" + id
		}
		for _, id := range []string{"acc-1", "acc-2", "acc-3"} {
			names["account:"+event.AccountID(ws, id).String()] = "account:" + id
		}
		rows, err := conn.Query(context.Background(), `
SELECT c.group_key, c.priority, (SELECT count(*) FROM speculapro.alerts a WHERE a.case_id = c.id), c.version
  FROM speculapro.cases c WHERE c.workspace_id = $1`, ws)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var key, priority string
			var alerts, version int64
			if err := rows.Scan(&key, &priority, &alerts, &version); err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(key, "alert:") {
				key = "alert"
			} else if n, ok := names[key]; ok {
				key = n
			}
			got = append(got, fmt.Sprintf("%s %s %d", key, priority, alerts))
			versions[g+" "+key] = version
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		if fmt.Sprint(got) != fmt.Sprint(want[g]) {
			t.Errorf("%s, grouped by %s: cases %q, want %q", when, g, got, want[g])
		}
	}
	return versions
}
