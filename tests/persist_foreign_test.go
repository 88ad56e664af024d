package tests

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// rawProducer writes records as a foreign system would: franz-go alone, no
// event.Encode, each record to the partition it names.
func rawProducer(t *testing.T, k *persistKafka) func(recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return func(recs ...*kgo.Record) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, r := range recs {
			r.Topic = k.prefix + "txn.ingested"
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("producing: %v", err)
		}
	}
}

// randomRunes is n random characters, most of them two or three bytes of
// UTF-8: incompressible, so as an external_id its index entry is far larger
// than a B-tree page allows.
func randomRunes(n int) string {
	var b strings.Builder
	for range n {
		b.WriteRune(rune(0x100 + rand.IntN(0xd000)))
	}
	return b.String()
}

// Records another producer wrote, that no partition will ever hold or the
// table cannot index (an external_id of 3,200 random characters, an
// occurred_at in 1970 and in 2100), beside 20 good ones on a 3-partition
// topic: the good ones are stored at once, the bad ones are on the DLQ with
// the reason, and nothing is retried. Then a record whose month is inside
// the window but has no partition: it holds back its own partition only;
// the others are stored and their offsets committed, and once the month's
// partition exists the waiting partition catches up.
func TestPersistForeignRecordsNeverBlockAPartition(t *testing.T) {
	t.Parallel()
	db, k, conn, ws := newPersistFixture(t)
	produce := rawProducer(t, k)

	type bad struct {
		value  []byte
		reason string
	}
	bads := []bad{
		{persistRawTxn(t, ws, 9001, func(m map[string]any) { m["external_id"] = randomRunes(3200) }), "external_id:"},
		{persistRawTxn(t, ws, 9002, func(m map[string]any) { m["occurred_at"] = "1970-01-01T00:00:00Z" }), "occurred_at: before"},
		{persistRawTxn(t, ws, 9003, func(m map[string]any) { m["occurred_at"] = "2100-01-01T00:00:00Z" }), "occurred_at: from"},
	}
	var recs []*kgo.Record
	for n := range 20 {
		_, val, _ := persistTxn(t, ws, n, nil)
		recs = append(recs, &kgo.Record{Partition: int32(n % 3), Key: []byte("good-" + strconv.Itoa(n)), Value: val})
		if n%7 == 3 && n/7 < len(bads) {
			recs = append(recs, &kgo.Record{Partition: int32(n / 7), Key: []byte("bad-" + strconv.Itoa(n/7)), Value: bads[n/7].value})
		}
	}
	produce(recs...)

	p := newBinProcess(t)
	p.start(t, persistEnv(k, db.SystemURL), p.runArgs("pipelines/persist.yaml")...)
	started := time.Now()
	const countTxns = "SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1"
	if n := waitCount(t, conn, 20, countTxns, ws); n != 20 {
		t.Fatalf("stored %d of the 20 good transactions", n)
	}
	t.Logf("the 20 good transactions stored %s after start", time.Since(started).Round(time.Millisecond))
	if took := time.Since(started); took > 20*time.Second {
		t.Errorf("the good transactions took %s: the bad ones held them back", took)
	}
	letters := k.consumeAll(t, "txn.ingested.dlq", len(bads))
	if len(letters) != len(bads) {
		t.Fatalf("%d dead letters, want %d", len(letters), len(bads))
	}
	for _, r := range letters {
		i, _ := strconv.Atoi(strings.TrimPrefix(string(r.Key), "bad-"))
		var msg string
		for _, h := range r.Headers {
			if h.Key == "error-message" {
				msg = string(h.Value)
			}
		}
		if !strings.Contains(msg, bads[i].reason) {
			t.Errorf("dead letter %s: error-message %q does not give the reason (%s)", r.Key, msg, bads[i].reason)
		}
	}
	if strings.Contains(p.stdout.String(), "persist: batch failed, retrying") {
		t.Errorf("a record no partition will hold was retried:\n%s", p.tail(3000))
	}

	// A month inside the window without its partition (dropped here; the
	// worker would create it): partition 2 waits, 0 and 1 carry on.
	now := time.Now().UTC()
	month := time.Date(now.Year(), now.Month()+2, 1, 0, 0, 0, 0, time.UTC)
	if _, err := conn.Exec(context.Background(), "DROP TABLE speculapro.transactions_p"+month.Format("2006_01")); err != nil {
		t.Fatal(err)
	}
	waiting := persistRawTxn(t, ws, 9100, func(m map[string]any) { m["occurred_at"] = month.Add(36 * time.Hour).Format(time.RFC3339) })
	recs = recs[:0]
	recs = append(recs, &kgo.Record{Partition: 2, Key: []byte("waits"), Value: waiting})
	for n := 100; n < 130; n++ {
		_, val, _ := persistTxn(t, ws, n, nil)
		recs = append(recs, &kgo.Record{Partition: int32(n % 3), Key: []byte("good-" + strconv.Itoa(n)), Value: val})
	}
	produce(recs...)
	if n := waitCount(t, conn, 40, countTxns, ws); n != 40 {
		t.Fatalf("stored %d, want the 20 earlier and the 20 new ones of partitions 0 and 1", n)
	}
	ends := k.endOffsets(t, k.prefix+"txn.ingested")
	var committed map[int32]int64
	poll(waitBound, 200*time.Millisecond, func() bool {
		committed = k.committed(t, k.group)[k.prefix+"txn.ingested"]
		return committed[0] == ends[0] && committed[1] == ends[1]
	})
	if committed[0] != ends[0] || committed[1] != ends[1] {
		t.Errorf("committed %v, want partitions 0 and 1 at their ends %v while partition 2 waits", committed, ends)
	}
	if committed[2] >= ends[2] {
		t.Errorf("partition 2 committed to its end (%d) while its record waits", committed[2])
	}
	if n := persistCount(t, conn, countTxns+" AND external_id = 'txn-0009100'", ws); n != 0 {
		t.Errorf("the waiting record was stored without its partition")
	}
	if !poll(waitBound, 200*time.Millisecond, func() bool { return strings.Contains(p.stdout.String(), "persist: batch failed, retrying") }) {
		t.Errorf("no retry line for the waiting partition")
	}

	if _, err := conn.Exec(context.Background(), "SELECT speculapro.ensure_partitions($1::date, 1)", month.Format(time.DateOnly)); err != nil {
		t.Fatal(err)
	}
	if n := waitCount(t, conn, 51, countTxns, ws); n != 51 {
		t.Fatalf("after the partition was created: stored %d, want 51", n)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	committed = k.committed(t, k.group)[k.prefix+"txn.ingested"]
	for part, end := range ends {
		if committed[part] != end {
			t.Errorf("partition %d committed %d, want its end %d", part, committed[part], end)
		}
	}
}
