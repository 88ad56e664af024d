package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/event"
)

// Both persist pipelines run as streams of one process, as `speculapro dev`
// runs them: transactions and account events are stored, each topic's
// unreadable records reach its own dead-letter twin, and /metrics carries the
// persister's metrics per table.
func TestPersistPipelinesAsStreams(t *testing.T) {
	t.Parallel()
	db, k, conn, ws := newPersistFixture(t)

	var txns, events []*kgo.Record
	for n := range 50 {
		key, val, _ := persistTxn(t, ws, n, nil)
		txns = append(txns, &kgo.Record{Key: []byte(key), Value: val})
	}
	txns = append(txns, &kgo.Record{Key: []byte("bad-txn"), Value: []byte("{")})
	for n := range 30 {
		e := event.Envelope{
			V: event.Version, Kind: event.KindAccountEvent, WorkspaceID: ws,
			ExternalID: fmt.Sprintf("ev-%d", n), OccurredAt: persistBase.Add(time.Duration(n) * time.Second),
			CustomerExternalID: fmt.Sprintf("cust-%d", n%5), Type: "failed_otp",
		}
		e.ID = event.AccountEventID(ws, e.ExternalID, e.OccurredAt)
		val, err := event.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, &kgo.Record{Key: []byte(ws.String() + ":" + e.CustomerExternalID), Value: val})
	}
	events = append(events, &kgo.Record{Key: []byte("bad-event"), Value: []byte(`{"v":7}`)})
	k.produceTo(t, "txn.ingested", txns...)
	k.produceTo(t, "account.events", events...)

	p := newBinProcess(t)
	p.start(t, persistEnv(k, db.SystemURL),
		"streams", "-o", "config/observability.yaml", "pipelines/persist.yaml", "pipelines/persist-events.yaml")

	if n := waitCount(t, conn, 50, "SELECT count(*) FROM speculapro.transactions"); n != 50 {
		t.Errorf("stored %d transactions, want 50", n)
	}
	if n := waitCount(t, conn, 30, "SELECT count(*) FROM speculapro.account_events WHERE kind = 'failed_otp'"); n != 30 {
		t.Errorf("stored %d account events, want 30", n)
	}
	if got := k.consumeAll(t, "txn.ingested.dlq", 1); len(got) != 1 || string(got[0].Key) != "bad-txn" {
		t.Errorf("txn.ingested.dlq holds %d records, want the bad transaction", len(got))
	}
	if got := k.consumeAll(t, "account.events.dlq", 1); len(got) != 1 || string(got[0].Key) != "bad-event" {
		t.Errorf("account.events.dlq holds %d records, want the bad event", len(got))
	}

	var scrape string
	stored := poll(waitBound, 200*time.Millisecond, func() bool {
		s, err := p.scrape()
		if err == nil && metricSum(s, "speculapro_persist_rows_stored_total", `table="account_events"`) == 30 &&
			metricSum(s, "speculapro_persist_rows_stored_total", `table="transactions"`) == 50 {
			scrape = s
		}
		return scrape != ""
	})
	if !stored {
		s, _ := p.scrape()
		t.Fatalf("/metrics never showed 50 transactions and 30 account events stored:\n%s", metricLines(s, "speculapro_persist_"))
	}
	for _, want := range []struct {
		metric string
		labels []string
		value  float64
	}{
		{"speculapro_persist_dead_letters_total", []string{`reason="undecodable"`, `table="transactions"`}, 1},
		{"speculapro_persist_dead_letters_total", []string{`reason="undecodable"`, `table="account_events"`}, 1},
		// cust-0…12 from the transactions cover the events' cust-0…4,
		// whichever stream got there first.
		{"speculapro_persist_placeholders_created_total", []string{`entity="customer"`}, 13},
		{"speculapro_persist_placeholders_created_total", []string{`entity="account"`, `table="transactions"`}, 29},
		{"speculapro_persist_stage_duration_seconds_count", []string{`stage="decode"`, `table="transactions"`}, -1},
		{"speculapro_persist_stage_duration_seconds_count", []string{`stage="write"`, `table="account_events"`}, -1},
	} {
		got := metricSum(scrape, want.metric, want.labels...)
		if want.value < 0 && got <= 0 || want.value >= 0 && got != want.value {
			t.Errorf("%s%v = %v, want %v", want.metric, want.labels, got, want.value)
		}
	}
	// Every metric's HELP says what it means (metric_help.go), and the
	// stage durations are seconds, as their name says: a few batches of
	// work take well under a minute.
	for _, line := range strings.Split(scrape, "\n") {
		if strings.HasPrefix(line, "# HELP ") && (strings.Contains(line, "Undocumented metric") || strings.Contains(line, "SpeculaPro metric")) {
			t.Errorf("a metric without a meaning: %s", line)
		}
	}
	if sum := metricSum(scrape, "speculapro_persist_stage_duration_seconds_sum"); sum <= 0 || sum > 60 {
		t.Errorf("speculapro_persist_stage_duration_seconds_sum = %v, want a few seconds at most", sum)
	}
	if f := metricSum(scrape, "speculapro_persist_faults_total") + metricSum(scrape, "speculapro_persist_retries_total"); f != 0 {
		t.Errorf("faults+retries = %v on a healthy run", f)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}
