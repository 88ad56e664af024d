package tests

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/event"
)

// Records the persister cannot read, and rows PostgreSQL refuses, are parked
// on the dead-letter topic with their key, value, headers and source-offset,
// each alone; everything else is stored, and the partitions move on.
func TestPersistDeadLettersPoisonRecords(t *testing.T) {
	t.Parallel()
	db, k, conn, ws := newPersistFixture(t)

	type poison struct {
		value []byte
		code  string // SQLSTATE for rows the database refuses; "" for undecodable
	}
	poisons := []poison{
		{value: []byte("not json at all")},
		{value: []byte(`{"v":2,"kind":"transaction","id":"0193f5a2-7c00-7abc-8def-0123456789ab"}`)},
		{value: []byte(`{"v":1,"kind":"transaction","workspace_id":"` + ws.String() + `"}`)},
		{value: []byte(`{"v":1,"kind":"transaction","id":"0193f5a2-7c00-7abc-8def-0123456789ab"}`)},
	}
	// Envelopes outside the limits the table holds, written by a producer
	// that skips our checks: undecodable, never a batch PostgreSQL refuses.
	negative := persistRawTxn(t, ws, 900001, func(m map[string]any) { m["amount"] = "-5.00" })
	huge := persistRawTxn(t, ws, 900002, func(m map[string]any) { m["amount"] = "1234567890123456789012345" })
	poisons = append(poisons, poison{value: negative}, poison{value: huge})
	// Valid envelopes the database refuses, by a rule Decode does not know
	// (a customer's own constraint and trigger): 23514 and 22023.
	for _, q := range []string{
		`ALTER TABLE speculapro.transactions ADD CONSTRAINT test_refused CHECK (reference IS DISTINCT FROM 'refused-by-check')`,
		`CREATE FUNCTION speculapro.test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.reference = 'refused-by-trigger' THEN RAISE EXCEPTION 'test: refused' USING ERRCODE = '22023'; END IF;
  RETURN NEW;
END $$`,
		`CREATE TRIGGER test_refuse BEFORE INSERT ON speculapro.transactions FOR EACH ROW EXECUTE FUNCTION speculapro.test_refuse()`,
	} {
		if _, err := conn.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	_, checked, _ := persistTxn(t, ws, 900003, func(e *event.Envelope) { e.Reference = "refused-by-check" })
	_, triggered, _ := persistTxn(t, ws, 900004, func(e *event.Envelope) { e.Reference = "refused-by-trigger" })
	poisons = append(poisons, poison{value: checked, code: "23514"}, poison{value: triggered, code: "22023"})

	const good = 160
	var recs []*kgo.Record
	poisonAt := map[string]poison{} // by key
	for n := range good {
		key, val, _ := persistTxn(t, ws, n, nil)
		recs = append(recs, &kgo.Record{Key: []byte(key), Value: val, Headers: []kgo.RecordHeader{{Key: "origin", Value: []byte("good")}}})
		if n%20 == 10 && n/20 < len(poisons) {
			key := fmt.Sprintf("poison-%d", n/20)
			poisonAt[key] = poisons[n/20]
			recs = append(recs, &kgo.Record{Key: []byte(key), Value: poisons[n/20].value,
				Headers: []kgo.RecordHeader{{Key: "origin", Value: []byte(key)}, {Key: "trace-id", Value: []byte("abc-" + key)}}})
		}
	}
	if len(poisonAt) != len(poisons) {
		t.Fatalf("interleaved %d poison records, want %d", len(poisonAt), len(poisons))
	}
	k.produceTo(t, "txn.ingested", recs...)
	offsetOf := map[string]string{}
	for _, r := range recs {
		offsetOf[string(r.Key)] = fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)
	}

	p := newBinProcess(t)
	p.start(t, persistEnv(k, db.SystemURL), p.runArgs("pipelines/persist.yaml")...)

	if n := waitCount(t, conn, good, "SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1", ws); n != good {
		t.Fatalf("stored %d transactions, want the %d good ones", n, good)
	}
	letters := k.consumeAll(t, "txn.ingested.dlq", len(poisons))
	if len(letters) != len(poisons) {
		t.Fatalf("%d dead letters, want %d", len(letters), len(poisons))
	}
	for _, r := range letters {
		key := string(r.Key)
		want, ok := poisonAt[key]
		if !ok {
			t.Errorf("dead letter with key %q, which was not a poison record", key)
			continue
		}
		if string(r.Value) != string(want.value) {
			t.Errorf("%s: value %q, want the original %q", key, r.Value, want.value)
		}
		h := map[string]string{}
		for _, hd := range r.Headers {
			h[hd.Key] = string(hd.Value)
		}
		if h["origin"] != key || h["trace-id"] != "abc-"+key {
			t.Errorf("%s: original headers lost: %v", key, h)
		}
		if h["source-offset"] != offsetOf[key] {
			t.Errorf("%s: source-offset %q, want %q", key, h["source-offset"], offsetOf[key])
		}
		if h["error-code"] != want.code {
			t.Errorf("%s: error-code %q, want %q", key, h["error-code"], want.code)
		}
		for name := range h {
			if strings.HasPrefix(name, "kafka_") {
				t.Errorf("%s: the input's metadata %s leaked into the headers", key, name)
			}
		}
		delete(poisonAt, key)
	}

	// One WARN line per batch with undecodable records; their counts add up.
	warn := persistLogLine("WARN", "persist: sent undecodable records to dead-letter topic")
	// The documented line: count comes right after msg.
	countRe := regexp.MustCompile(`msg="persist: sent undecodable records to dead-letter topic" count=(\d+)( |$)`)
	total := 0
	for _, line := range warn.FindAllString(p.stdout.String(), -1) {
		m := countRe.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("WARN line without count: %s", line)
			continue
		}
		c, _ := strconv.Atoi(m[1])
		total += c
	}
	if total != 6 {
		t.Errorf("WARN lines count %d undecodable records, want 6:\n%s", total, p.stdout)
	}

	if code := p.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if got := k.committedOffsets(t, k.group); got != int64(len(recs)) {
		t.Errorf("committed offsets add up to %d, want every record (%d): poison must not block a partition", got, len(recs))
	}
}
