package kafkafranz

import (
	"context"
	"errors"
	"fmt"
	"github.com/speculapro/speculapro/devtools/testenv"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/speculapro/speculapro/internal/kafkaconf"
)

// kfoClearEnv keeps the SP_KAFKA_* settings of the machine out of a test.
func kfoClearEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"SP_KAFKA_BROKERS", "SP_KAFKA_TLS_ENABLED", "SP_KAFKA_TLS_CA_FILE", "SP_KAFKA_TLS_CERT_FILE",
		"SP_KAFKA_TLS_KEY_FILE", "SP_KAFKA_SASL_MECHANISM", "SP_KAFKA_USERNAME", "SP_KAFKA_PASSWORD"} {
		t.Setenv(k, "")
	}
}

func kfoFromYAML(t *testing.T, yaml string) (*kfoWriter, error) {
	t.Helper()
	conf, err := kfoSpec().ParseYAML(yaml, nil)
	if err != nil {
		t.Fatalf("parsing output YAML: %v", err)
	}
	return newKfoWriter(conf, service.MockResources())
}

func kfoConnected(t *testing.T, yaml string) *kfoWriter {
	t.Helper()
	w, err := kfoFromYAML(t, yaml)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	return w
}

func kfoCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// kfoConsume reads n records of topic from the start.
func kfoConsume(t *testing.T, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records from %s", len(out), n, topic)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func kfoMessage(value string, meta map[string]string) *service.Message {
	m := service.NewMessage([]byte(value))
	for k, v := range meta {
		m.MetaSetMut(k, v)
	}
	return m
}

func kfoHeaders(r *kgo.Record) map[string]string {
	h := map[string]string{}
	for _, x := range r.Headers {
		h[x.Key] = string(x.Value)
	}
	return h
}

func TestKfoHeaderFilter(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		keys map[string]bool // metadata key -> becomes a header
	}{
		{"nothing by default", ``, map[string]bool{"trace": false, "kafka_key": false}},
		{"everything but kafka_", `include_patterns: [ '.*' ]`, map[string]bool{"trace": true, "sp_x": true, "kafka_key": false, "kafka_offset": false}},
		{"prefixes", `include_prefixes: [ sp_ ]`, map[string]bool{"sp_x": true, "trace": false}},
		{"exclusions win", "include_patterns: [ '.*' ]\nexclude_patterns: [ '^secret' ]\nexclude_prefixes: []", map[string]bool{"secret_x": false, "kafka_key": true, "trace": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := kfoFromYAML(t, "topic: x\nmetadata:\n  "+strings.ReplaceAll(tt.yaml, "\n", "\n  ")+"\n")
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range tt.keys {
				if got := w.headers.match(k); got != want {
					t.Errorf("metadata %q becomes a header: %v, want %v", k, got, want)
				}
			}
		})
	}
}

func TestKfoWritesKeysValuesAndHeaders(t *testing.T) {
	kfoClearEnv(t)
	c := kfoCluster(t, kfake.SeedTopics(3, "out"))
	w := kfoConnected(t, fmt.Sprintf(`
seed_brokers: [ %s ]
topic: ${! meta("dest") }
key: ${! meta("kafka_key").or("") }
metadata:
  include_patterns: [ '.*' ]
  exclude_prefixes: [ kafka_, dest ]
`, c.ListenAddrs()[0]))

	batch := service.MessageBatch{
		kfoMessage("v1", map[string]string{"dest": "out", "kafka_key": "ws1:acct1", "kafka_topic": "in", "kafka_offset": "7", "trace_id": "t1"}),
		kfoMessage("v2", map[string]string{"dest": "out", "kafka_key": "ws1:acct2", "sp_reason": "bad json"}),
		kfoMessage("v3", map[string]string{"dest": "out"}),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.WriteBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	byValue := map[string]*kgo.Record{}
	for _, r := range kfoConsume(t, c.ListenAddrs(), "out", 3) {
		byValue[string(r.Value)] = r
	}
	want := []struct {
		value, key string
		nilKey     bool
		headers    map[string]string
	}{
		{"v1", "ws1:acct1", false, map[string]string{"trace_id": "t1"}},
		{"v2", "ws1:acct2", false, map[string]string{"sp_reason": "bad json"}},
		{"v3", "", true, map[string]string{}},
	}
	for _, w := range want {
		r, ok := byValue[w.value]
		if !ok {
			t.Fatalf("record %s not written", w.value)
		}
		if string(r.Key) != w.key || (r.Key == nil) != w.nilKey {
			t.Errorf("record %s key %q (nil %v), want %q (nil %v)", w.value, r.Key, r.Key == nil, w.key, w.nilKey)
		}
		if got := kfoHeaders(r); fmt.Sprint(got) != fmt.Sprint(w.headers) {
			t.Errorf("record %s headers %v, want %v", w.value, got, w.headers)
		}
	}
}

func TestKfoPartitionsKeysLikeTheJavaClient(t *testing.T) {
	kfoClearEnv(t)
	const parts = 12
	c := kfoCluster(t, kfake.SeedTopics(parts, "keyed"))
	w := kfoConnected(t, fmt.Sprintf("seed_brokers: [ %s ]\ntopic: keyed\nkey: ${! content() }\n", c.ListenAddrs()[0]))
	var batch service.MessageBatch
	for i := range 200 {
		batch = append(batch, service.NewMessage(fmt.Appendf(nil, "ws-%d:acct-%d", i%3, i)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.WriteBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	seen := map[int32]bool{}
	for _, r := range kfoConsume(t, c.ListenAddrs(), "keyed", len(batch)) {
		if want := testenv.JavaPartition(r.Key, parts); r.Partition != want {
			t.Errorf("key %q on partition %d, the Java client puts it on %d", r.Key, r.Partition, want)
		}
		seen[r.Partition] = true
	}
	if len(seen) < parts/2 {
		t.Fatalf("200 keys used only %d of %d partitions", len(seen), parts)
	}
}

func TestKfoTimeoutNacksWritesKafkaDoesNotTake(t *testing.T) {
	kfoClearEnv(t)
	tests := []struct {
		name   string
		break_ func(c *kfake.Cluster)
	}{
		{"broker keeps refusing produce", func(c *kfake.Cluster) {
			// Retriable, so the producer would retry for ever.
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicas, Count: -1})
		}},
		{"broker never answers produce", func(c *kfake.Cluster) {
			c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				c.SleepControl(func() { time.Sleep(30 * time.Second) })
				return nil, nil, false
			})
		}},
		{"broker gone", func(c *kfake.Cluster) { c.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := kfoCluster(t, kfake.SeedTopics(2, "slow"))
			w := kfoConnected(t, fmt.Sprintf("seed_brokers: [ %s ]\ntopic: slow\nkey: ${! content() }\ntimeout: 700ms\n", c.ListenAddrs()[0]))
			tt.break_(c)
			batch := service.MessageBatch{service.NewMessage([]byte("a")), service.NewMessage([]byte("b"))}
			idx := batch.Index()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := w.WriteBatch(ctx, batch)
			if ctx.Err() != nil {
				t.Fatal("WriteBatch waited for the test's own deadline instead of its 700ms timeout")
			}
			var berr *service.BatchError
			if !errors.As(err, &berr) {
				t.Fatalf("WriteBatch: %v, want a batch error failing each message", err)
			}
			failed := 0
			berr.WalkMessagesIndexedBy(idx, func(i int, _ *service.Message, err error) bool {
				if err != nil {
					failed++
					if !strings.Contains(err.Error(), "did not take the message within 700ms") {
						t.Errorf("message %d: %v, want it to say Kafka did not take it within 700ms", i, err)
					}
				}
				return true
			})
			if failed != len(batch) {
				t.Fatalf("%d of %d messages failed, want all", failed, len(batch))
			}
		})
	}
}

func TestKfoConnectWithoutBrokerStillFailsWritesOnTime(t *testing.T) {
	kfoClearEnv(t)
	w := kfoConnected(t, "seed_brokers: [ 127.0.0.1:1 ]\ntopic: nowhere\ntimeout: 300ms\n")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := w.WriteBatch(ctx, service.MessageBatch{service.NewMessage([]byte("a"))})
	if ctx.Err() != nil || err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WriteBatch with no broker: %v, want a timeout nack", err)
	}
}

func TestKfoRefusesUnsafeConnections(t *testing.T) {
	kfoClearEnv(t)
	_, err := kfoFromYAML(t, "topic: x\nsasl: [ { mechanism: PLAIN, username: u, password: p } ]\n")
	if !errors.Is(err, kafkaconf.ErrPlainWithoutTLS) || !strings.Contains(err.Error(), "sends the password as-is") {
		t.Fatalf("PLAIN without TLS: %v, want it refused saying why", err)
	}
	_, err = kfoFromYAML(t, "topic: x\ntls: { enabled: true, min_version: '1.0' }\n")
	if !errors.Is(err, kafkaconf.ErrTLSVersion) {
		t.Fatalf("TLS 1.0: %v, want it refused", err)
	}

	c := kfoCluster(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "sp", "right"))
	w, err := kfoFromYAML(t, fmt.Sprintf("seed_brokers: [ %s ]\ntopic: x\nsasl: [ { mechanism: SCRAM-SHA-512, username: sp, password: wrong } ]\n", c.ListenAddrs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = w.Connect(ctx)
	if err == nil {
		_ = w.Close(ctx)
		t.Fatal("Connect with a wrong password succeeded")
	}
	if !strings.Contains(err.Error(), "SP_KAFKA_PASSWORD") || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("Connect with a wrong password: %q, want a hint at the password that does not show it", err)
	}
}

// A topic or key that is a prefix and one metadata value is read from the
// metadata directly: the same record as the interpolation gives, which
// still serves a value that is absent or not a string.
func TestKfoMetadataReferencesMatchInterpolation(t *testing.T) {
	for _, s := range []struct {
		in         string
		ref        bool
		prefix, at string
	}{
		{"sp.${! @ingest_topic }", true, "sp.", "ingest_topic"},
		{"${!@ingest_key}", true, "", "ingest_key"},
		{"${! @kafka_topic }.dlq", false, "", ""},
		{`${! meta("kafka_key") }`, false, "", ""},
		{"static", false, "", ""},
		{"a${! @x }${! @y }", false, "", ""},
	} {
		r := parseKfoMetaRef(s.in)
		if (r != nil) != s.ref || r != nil && (r.prefix != s.prefix || r.key != s.at) {
			t.Errorf("parseKfoMetaRef(%q) = %+v", s.in, r)
		}
	}
	w, err := kfoFromYAML(t, "seed_brokers: [ 127.0.0.1:1 ]\ntopic: sp.${! @ingest_topic }\nkey: ${! @ingest_key }\n")
	if err != nil {
		t.Fatal(err)
	}
	if w.topicRef == nil || w.keyRef == nil {
		t.Fatal("the metadata references were not recognised")
	}
	msgs := service.MessageBatch{service.NewMessage([]byte("a")), service.NewMessage([]byte("b")), service.NewMessage([]byte("c")), service.NewMessage([]byte("d"))}
	msgs[0].MetaSetMut("ingest_topic", "txn.ingested")
	msgs[0].MetaSetMut("ingest_key", "ws:acc-1")
	msgs[1].MetaSetMut("ingest_topic", "account.events")
	msgs[1].MetaSetMut("ingest_key", 42) // not a string: interpolated
	msgs[2].MetaSetMut("ingest_topic", "txn.ingested")
	msgs[3].MetaSetMut("ingest_topic", []byte("bytes.topic"))
	ex := w.executors(msgs)
	want := []struct{ topic, key string }{{"sp.txn.ingested", "ws:acc-1"}, {"sp.account.events", "42"}, {"sp.txn.ingested", "null"}, {"sp.bytes.topic", "null"}}
	for i, m := range msgs {
		r := &kgo.Record{}
		if err := w.record(ex, i, m, r); err != nil {
			t.Fatal(err)
		}
		it, _ := msgs.TryInterpolatedString(i, w.topic)
		ik, _ := msgs.TryInterpolatedString(i, w.key)
		if r.Topic != want[i].topic || string(r.Key) != want[i].key || r.Topic != it || string(r.Key) != ik {
			t.Errorf("message %d: topic %q key %q, want %q %q (interpolation %q %q)", i, r.Topic, r.Key, want[i].topic, want[i].key, it, ik)
		}
	}
}

// Building a batch's records allocates a fixed amount per batch, not per
// message, when topic and key are metadata references (the ingest API's
// output): 9 for 500 messages measured (two more a message with a
// kgo.Record and a copy of the key each). A change that allocates per
// message again fails here.
func TestKfoRecordAllocationsPerBatch(t *testing.T) {
	w, err := kfoFromYAML(t, "seed_brokers: [ 127.0.0.1:1 ]\ntopic: sp.${! @ingest_topic }\nkey: ${! @ingest_key }\n")
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	batch := kfoIngestBatch(n)
	allocs := testing.AllocsPerRun(20, func() {
		recs, errs := w.records(batch)
		if errs[0] != nil || recs[n-1].Topic != "sp.txn.ingested" || string(recs[n-1].Key) != "ws:acc-499" {
			t.Fatalf("records: %v %+v", errs[0], recs[n-1])
		}
	})
	t.Logf("%.0f allocations for %d messages", allocs, n)
	if allocs > 12 {
		t.Errorf("building %d records allocates %.0f times, want a fixed few per batch", n, allocs)
	}
}

// A batch's promises find their message by the record's place in the slab,
// whatever order franz-go answers in, skip the messages that never became
// records, and change nothing once the writer stopped waiting (a late
// promise must not race the answer being built). Answering a record
// allocates nothing: a closure or a channel send a record is what the one
// promise a batch replaced.
func TestKfoWaitAnswersEachRecordOnce(t *testing.T) {
	const n = 6
	slab := make([]kgo.Record, n)
	records := make([]*kgo.Record, n)
	for i := range records {
		if i != 2 { // message 2's topic failed: no record
			records[i] = &slab[i]
		}
	}
	errs := make([]error, n)
	errs[2] = errors.New("interpolating topic")
	wt := newKfoWait(records, errs)
	refused := errors.New("refused")
	for _, i := range []int{5, 0, 3} {
		var err error
		if i == 3 {
			err = refused
		}
		wt.promise(records[i], err)
	}
	select {
	case <-wt.done:
		t.Fatal("done with records 1 and 4 unanswered")
	default:
	}
	wt.promise(records[1], nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // record 4 is never answered in time
	answered, finished := wt.wait(ctx)
	if finished {
		t.Fatal("finished with record 4 unanswered")
	}
	wt.promise(records[4], refused) // late: ignored
	want := []bool{true, true, false, true, false, true}
	for i := range want {
		if answered[i] != want[i] {
			t.Errorf("record %d answered %v, want %v", i, answered[i], want[i])
		}
	}
	if errs[3] != refused || errs[4] != nil || errs[2] == nil || errs[0] != nil {
		t.Errorf("errors %v: want 3 refused, 4 none (late), 2 its own", errs)
	}

	all := newKfoWait(records[:2], make([]error, 2))
	all.promise(records[1], nil)
	all.promise(records[0], nil)
	if _, finished := all.wait(context.Background()); !finished {
		t.Error("every record answered, not finished")
	}

	big := make([]kgo.Record, 100)
	bigRecords := make([]*kgo.Record, len(big))
	for i := range big {
		bigRecords[i] = &big[i]
	}
	bw, next := newKfoWait(bigRecords, make([]error, len(big))), 0
	allocs := testing.AllocsPerRun(50, func() { bw.promise(bigRecords[next], nil); next++ })
	if allocs != 0 {
		t.Errorf("a promise allocates %.0f times, want none", allocs)
	}
}

// Writing a 500-message batch allocates a fixed amount a batch plus
// franz-go's own per-produce-request buffers, not one closure a record: 635
// allocations a batch with a promise closure a record (the index captured,
// or a method value written at every Produce), about 145 with one promise
// a batch. A change that allocates per record again fails here.
func TestKfoWriteBatchAllocations(t *testing.T) {
	kfoClearEnv(t)
	c := kfoCluster(t, kfake.SeedTopics(6, "sp.txn.ingested"))
	w := kfoConnected(t, fmt.Sprintf("seed_brokers: [ %s ]\ntopic: sp.${! @ingest_topic }\nkey: ${! @ingest_key }\nlinger: 2ms\n", c.ListenAddrs()[0]))
	const n = 500
	batch := kfoIngestBatch(n)
	allocs := testing.AllocsPerRun(10, func() {
		if err := w.WriteBatch(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.0f allocations writing %d messages", allocs, n)
	if allocs > n/2 {
		t.Errorf("writing %d messages allocates %.0f times, want well under one a message", n, allocs)
	}
}

// kfoIngestBatch is n messages as the ingest API hands them to the output:
// topic and key in metadata, spread over accounts.
func kfoIngestBatch(n int) service.MessageBatch {
	batch := make(service.MessageBatch, n)
	for i := range batch {
		batch[i] = service.NewMessage([]byte(`{"v":1}`))
		batch[i].MetaSetMut("ingest_topic", "txn.ingested")
		batch[i].MetaSetMut("ingest_key", fmt.Sprintf("ws:acc-%d", i))
	}
	return batch
}
