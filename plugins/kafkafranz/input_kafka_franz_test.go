package kafkafranz

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kfiCluster starts an in-process kfake cluster with one topic.
func kfiCluster(t *testing.T, topic string, partitions int32) []string {
	t.Helper()
	return kfiFakeCluster(t, topic, partitions).ListenAddrs()
}

func kfiFakeCluster(t *testing.T, topic string, partitions int32) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// kfiProduce writes perPartition records to every partition; record i of
// partition p has key "k-p-i" and value "p/i".
func kfiProduce(t *testing.T, brokers []string, topic string, partitions int32, perPartition int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for p := int32(0); p < partitions; p++ {
		for i := 0; i < perPartition; i++ {
			recs = append(recs, &kgo.Record{
				Topic:     topic,
				Partition: p,
				Key:       fmt.Appendf(nil, "k-%d-%d", p, i),
				Value:     fmt.Appendf(nil, "%d/%d", p, i),
			})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing: %v", err)
	}
}

// kfiNewInput builds the input from YAML through its spec. Heartbeats are
// fast so that rebalances happen within a test's patience.
func kfiNewInput(t *testing.T, brokers []string, topic, group, extra string) *kafkaFranzInput {
	t.Helper()
	yaml := fmt.Sprintf("seed_brokers: [%q]\ntopics: [%q]\nconsumer_group: %q\n%s", strings.Join(brokers, ","), topic, group, extra)
	conf, err := kafkaFranzInputSpec().ParseYAML(yaml, nil)
	if err != nil {
		t.Fatalf("parsing config: %v", err)
	}
	in, err := newKafkaFranzInput(conf, service.MockResources())
	if err != nil {
		t.Fatalf("building input: %v", err)
	}
	in.extraOpts = []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := in.Connect(ctx); err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(func() { _ = in.Close(context.Background()) })
	return in
}

// kfiRead reads one batch, failing the test after a deadline.
func kfiRead(t *testing.T, in *kafkaFranzInput) (service.MessageBatch, service.AckFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	batch, ack, err := in.ReadBatch(ctx)
	if err != nil {
		t.Fatalf("reading a batch: %v", err)
	}
	return batch, ack
}

type kfiDelivered struct {
	partition int32
	offset    int64
}

func kfiCoords(t *testing.T, batch service.MessageBatch) []kfiDelivered {
	t.Helper()
	var out []kfiDelivered
	for _, m := range batch {
		p, _ := m.MetaGet(kfiMetaPartition)
		o, _ := m.MetaGet(kfiMetaOffset)
		pi, err1 := strconv.ParseInt(p, 10, 32)
		oi, err2 := strconv.ParseInt(o, 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad coordinates %q/%q", p, o)
		}
		out = append(out, kfiDelivered{int32(pi), oi})
	}
	return out
}

// kfiCommitted reads the group's committed offsets: partition → offset,
// absent when nothing is committed.
func kfiCommitted(t *testing.T, brokers []string, topic, group string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resps, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("fetching offsets of %s: %v", group, err)
	}
	out := map[int32]int64{}
	resps.Each(func(r kadm.OffsetResponse) {
		if r.Topic == topic && r.Err == nil && r.At >= 0 {
			out[r.Partition] = r.At
		}
	})
	return out
}

// kfiEventually polls cond until it holds or the deadline passes.
func kfiEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func kfiName(t *testing.T) string {
	return strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
}

// TestInputOrderPerPartitionWithManyBatchesInFlight runs the input in a
// stream whose output has eight writes in flight, finishing them in random
// order: a partition must still be written strictly in offset order, never
// by two writes at once.
func TestInputOrderPerPartitionWithManyBatchesInFlight(t *testing.T) {
	const (
		partitions   = 8
		perPartition = 300
	)
	topic, group := kfiName(t), kfiName(t)+"-g"
	brokers := kfiCluster(t, topic, partitions)
	kfiProduce(t, brokers, topic, partitions, perPartition)

	rec := &kfiOrderRecorder{next: map[int32]int64{}, active: map[int32]bool{}, done: make(chan struct{}), want: partitions * perPartition}
	env := service.NewEnvironment()
	err := env.RegisterBatchOutput("kfi_order_recorder", service.NewConfigSpec(),
		func(*service.ParsedConfig, *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
			return rec, service.BatchPolicy{}, 8, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	sb := env.NewStreamBuilder()
	if err := sb.SetYAML(fmt.Sprintf(`
input:
  kafka_franz:
    seed_brokers: [%q]
    topics: [%q]
    consumer_group: %q
    checkpoint_limit: 20
    commit_period: 50ms
    batching:
      count: 25
      period: 5ms
output:
  kfi_order_recorder: {}
logger:
  level: warn
`, strings.Join(brokers, ","), topic, group)); err != nil {
		t.Fatal(err)
	}
	stream, err := sb.Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- stream.Run(ctx) }()

	select {
	case <-rec.done:
	case err := <-runErr:
		t.Fatalf("stream ended early: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatalf("only %d of %d records written", rec.count(), rec.want)
	}
	rec.mu.Lock()
	violations := append([]string(nil), rec.violations...)
	batches, spanning, maxConcurrent := rec.batches, rec.spanning, rec.maxConcurrent
	rec.mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	if maxConcurrent < 2 {
		t.Errorf("at most %d writes were ever in flight; the test did not exercise concurrency", maxConcurrent)
	}
	t.Logf("%d batches, %d spanning partitions, up to %d writes at once", batches, spanning, maxConcurrent)

	kfiEventually(t, "every offset committed", func() bool {
		c := kfiCommitted(t, brokers, topic, group)
		for p := int32(0); p < partitions; p++ {
			if c[p] != perPartition {
				return false
			}
		}
		return true
	})
	if err := stream.StopWithin(10 * time.Second); err != nil {
		t.Fatalf("stopping the stream: %v", err)
	}
}

// kfiOrderRecorder is a test output that checks per-partition order while
// writes overlap.
type kfiOrderRecorder struct {
	mu            sync.Mutex
	next          map[int32]int64 // next offset expected per partition
	active        map[int32]bool  // partitions with a write in progress
	inFlight      int
	maxConcurrent int
	batches       int
	spanning      int
	written       int
	want          int
	violations    []string
	done          chan struct{}
}

func (r *kfiOrderRecorder) Connect(context.Context) error { return nil }
func (r *kfiOrderRecorder) Close(context.Context) error   { return nil }

func (r *kfiOrderRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.written
}

func (r *kfiOrderRecorder) WriteBatch(ctx context.Context, batch service.MessageBatch) error {
	parts := map[int32]bool{}
	r.mu.Lock()
	r.inFlight++
	r.maxConcurrent = max(r.maxConcurrent, r.inFlight)
	r.batches++
	for _, m := range batch {
		ps, _ := m.MetaGet(kfiMetaPartition)
		os, _ := m.MetaGet(kfiMetaOffset)
		p64, _ := strconv.ParseInt(ps, 10, 32)
		o, _ := strconv.ParseInt(os, 10, 64)
		p := int32(p64)
		if !parts[p] {
			if r.active[p] {
				r.violations = append(r.violations, fmt.Sprintf("partition %d written by two batches at once", p))
			}
			parts[p] = true
			r.active[p] = true
		}
		if o != r.next[p] {
			r.violations = append(r.violations, fmt.Sprintf("partition %d: got offset %d, want %d", p, o, r.next[p]))
		}
		r.next[p] = o + 1
	}
	if len(parts) > 1 {
		r.spanning++
	}
	r.mu.Unlock()

	// Finish in a random order relative to the other writes in flight.
	select {
	case <-time.After(time.Duration(rand.IntN(15)) * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight--
	for p := range parts {
		r.active[p] = false
	}
	before := r.written
	r.written += len(batch)
	if before < r.want && r.written >= r.want {
		close(r.done)
	}
	return nil
}

// TestInputCommitsOnlyAckedOffsets holds one partition's batch unacked while
// another partition's later batch is acked: only the acked partition's
// offset may be committed, and the held one only once it is acked.
func TestInputCommitsOnlyAckedOffsets(t *testing.T) {
	topic, group := kfiName(t), kfiName(t)+"-g"
	brokers := kfiCluster(t, topic, 2)
	kfiProduce(t, brokers, topic, 2, 30)
	in := kfiNewInput(t, brokers, topic, group, "checkpoint_limit: 10\ncommit_period: 20ms\nbatching: {count: 10}\n")

	var held service.AckFunc
	var heldPart int32 = -1
	var acked []kfiDelivered
	for held == nil || len(acked) == 0 {
		batch, ack := kfiRead(t, in)
		coords := kfiCoords(t, batch)
		if len(coords) > 10 {
			t.Fatalf("batch of %d records exceeds batching.count 10", len(coords))
		}
		p := coords[0].partition
		for _, c := range coords {
			if c.partition != p {
				t.Fatalf("count 10 with checkpoint_limit 10 should fill a batch from one partition, got %v", coords)
			}
		}
		if held == nil {
			held, heldPart = ack, p
			continue
		}
		if p == heldPart {
			t.Fatalf("partition %d handed out again while its batch was unacked: %v", p, coords)
		}
		if err := ack(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		acked = coords
	}
	other := acked[0].partition
	want := acked[len(acked)-1].offset + 1
	kfiEventually(t, "the acked partition's commit", func() bool {
		return kfiCommitted(t, brokers, topic, group)[other] == want
	})
	// A few more commit periods must not commit the held batch.
	time.Sleep(100 * time.Millisecond)
	if off, ok := kfiCommitted(t, brokers, topic, group)[heldPart]; ok {
		t.Fatalf("partition %d committed at %d although its only batch is unacked", heldPart, off)
	}
	if err := held(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	kfiEventually(t, "the held partition's commit after its ack", func() bool {
		return kfiCommitted(t, brokers, topic, group)[heldPart] == 10
	})
}

// TestInputNackRedeliversSameRecords nacks a batch: the same records must
// come again, and nothing later of their partition before them.
func TestInputNackRedeliversSameRecords(t *testing.T) {
	topic, group := kfiName(t), kfiName(t)+"-g"
	brokers := kfiCluster(t, topic, 2)
	kfiProduce(t, brokers, topic, 2, 20)
	in := kfiNewInput(t, brokers, topic, group, "checkpoint_limit: 5\ncommit_period: 20ms\nbatching: {count: 5}\n")

	seq := map[int32][]int64{}
	total, nacked := 0, false
	for total < 40 {
		batch, ack := kfiRead(t, in)
		coords := kfiCoords(t, batch)
		if !nacked {
			nacked = true
			for _, c := range coords {
				seq[c.partition] = append(seq[c.partition], c.offset)
			}
			if err := ack(context.Background(), errors.New("output refused")); err != nil {
				t.Fatal(err)
			}
			continue
		}
		for _, c := range coords {
			seq[c.partition] = append(seq[c.partition], c.offset)
		}
		total += len(coords)
		if err := ack(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	var first int32 = -1
	for p, s := range seq {
		if len(s) == 25 {
			first = p
		}
	}
	if first < 0 {
		t.Fatalf("no partition delivered its first five records twice: %v", seq)
	}
	want := []int64{0, 1, 2, 3, 4}
	for i := int64(0); i < 20; i++ {
		want = append(want, i)
	}
	if !slices.Equal(seq[first], want) {
		t.Fatalf("nacked partition %d delivered %v, want %v", first, seq[first], want)
	}
	kfiEventually(t, "all offsets committed", func() bool {
		c := kfiCommitted(t, brokers, topic, group)
		return c[0] == 20 && c[1] == 20
	})
}

// TestInputRevokeIgnoresLateAck holds a batch across a rebalance that takes
// partitions away: the ack arriving after the revoke must commit nothing for
// them, and the new owner must start at the last committed offset.
func TestInputRevokeIgnoresLateAck(t *testing.T) {
	const partitions = 4
	topic, group := kfiName(t), kfiName(t)+"-g"
	brokers := kfiCluster(t, topic, partitions)
	kfiProduce(t, brokers, topic, partitions, 20)
	extra := "checkpoint_limit: 5\ncommit_period: 20ms\nrevoke_wait: 200ms\nbatching: {count: 100, period: 200ms}\n"
	a := kfiNewInput(t, brokers, topic, group, extra)

	// First batch: offsets 0-4 of every partition, acked and committed.
	batch, ack := kfiRead(t, a)
	if n := len(kfiCoords(t, batch)); n != partitions*5 {
		t.Fatalf("first batch has %d records, want %d", n, partitions*5)
	}
	if err := ack(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	kfiEventually(t, "offsets 5 committed", func() bool {
		c := kfiCommitted(t, brokers, topic, group)
		return len(c) == partitions && c[0] == 5 && c[1] == 5 && c[2] == 5 && c[3] == 5
	})
	// Second batch, 5-9 of every partition, held through the rebalance.
	held, lateAck := kfiRead(t, a)
	if n := len(kfiCoords(t, held)); n != partitions*5 {
		t.Fatalf("second batch has %d records, want %d", n, partitions*5)
	}

	b := kfiNewInput(t, brokers, topic, group, extra)
	var kept map[int32]bool
	kfiEventually(t, "the rebalance to take partitions from the first member", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		if len(a.tracker.parts) >= partitions {
			return false
		}
		kept = map[int32]bool{}
		for tp := range a.tracker.parts {
			kept[tp.partition] = true
		}
		return true
	})
	if err := lateAck(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	// The kept partitions commit the late ack; the revoked must stay at 5.
	kfiEventually(t, "kept partitions committed", func() bool {
		c := kfiCommitted(t, brokers, topic, group)
		for p := range kept {
			if c[p] != 10 {
				return false
			}
		}
		return true
	})
	time.Sleep(100 * time.Millisecond)
	c := kfiCommitted(t, brokers, topic, group)
	for p := int32(0); p < partitions; p++ {
		if !kept[p] && c[p] != 5 {
			t.Errorf("revoked partition %d committed at %d after a late ack, want 5", p, c[p])
		}
	}
	// The new owner starts over at the committed offset.
	firstSeen := map[int32]int64{}
	for len(firstSeen) < partitions-len(kept) {
		batch, ack := kfiRead(t, b)
		for _, d := range kfiCoords(t, batch) {
			if kept[d.partition] {
				t.Fatalf("partition %d read by both members", d.partition)
			}
			if _, ok := firstSeen[d.partition]; !ok {
				firstSeen[d.partition] = d.offset
			}
		}
		if err := ack(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	for p, off := range firstSeen {
		if off != 5 {
			t.Errorf("new owner of partition %d started at %d, want 5", p, off)
		}
	}
}

// TestInputRevokeWaitsForInFlightBatch acks a held batch while a rebalance
// is waiting for it: the revoke must commit it (periodic commits are off), so
// the new owner starts after it.
func TestInputRevokeWaitsForInFlightBatch(t *testing.T) {
	const partitions = 4
	topic, group := kfiName(t), kfiName(t)+"-g"
	brokers := kfiCluster(t, topic, partitions)
	kfiProduce(t, brokers, topic, partitions, 20)
	extra := "checkpoint_limit: 5\ncommit_period: 1h\nrevoke_wait: 15s\nbatching: {count: 100, period: 200ms}\n"
	a := kfiNewInput(t, brokers, topic, group, extra)
	held, ack := kfiRead(t, a)
	if n := len(kfiCoords(t, held)); n != partitions*5 {
		t.Fatalf("batch has %d records, want %d", n, partitions*5)
	}

	b := kfiNewInput(t, brokers, topic, group, extra)
	kfiEventually(t, "the revoke to wait for the batch", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, p := range a.tracker.parts {
			if p.revoking {
				return true
			}
		}
		return false
	})
	if err := ack(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	kfiEventually(t, "revoked partitions committed by the revoke", func() bool {
		a.mu.Lock()
		owned := len(a.tracker.parts)
		a.mu.Unlock()
		n := 0
		for _, off := range kfiCommitted(t, brokers, topic, group) {
			if off == 5 {
				n++
			}
		}
		return owned < partitions && n == partitions-owned
	})
	batch, _ := kfiRead(t, b)
	for _, d := range kfiCoords(t, batch) {
		if d.offset < 5 {
			t.Fatalf("new owner of partition %d got offset %d again although it was acked before the revoke", d.partition, d.offset)
		}
	}
}

// TestInputRestartResumesAtCommittedOffset closes an input with acked and
// unacked batches: a new input of the same group starts right after the
// acked records, delivering the unacked ones again.
func TestInputRestartResumesAtCommittedOffset(t *testing.T) {
	tests := []struct {
		name         string
		commitPeriod string
		acked        int  // batches of 10 acked before closing
		holdOne      bool // one more batch read but not acked
		wantStart    int64
	}{
		{"close commits acked", "1h", 2, false, 20},
		{"close leaves unacked", "1h", 2, true, 20},
		{"periodic commit then close", "20ms", 1, true, 10},
		{"nothing acked starts at oldest", "20ms", 0, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			topic, group := kfiName(t), kfiName(t)+"-g"
			brokers := kfiCluster(t, topic, 1)
			kfiProduce(t, brokers, topic, 1, 50)
			extra := fmt.Sprintf("checkpoint_limit: 10\ncommit_period: %s\nbatching: {count: 10}\n", tc.commitPeriod)
			first := kfiNewInput(t, brokers, topic, group, extra)
			for i := 0; i < tc.acked; i++ {
				_, ack := kfiRead(t, first)
				if err := ack(context.Background(), nil); err != nil {
					t.Fatal(err)
				}
			}
			if tc.holdOne {
				kfiRead(t, first)
			}
			if err := first.Close(context.Background()); err != nil {
				t.Fatalf("closing: %v", err)
			}
			second := kfiNewInput(t, brokers, topic, group, extra)
			batch, _ := kfiRead(t, second)
			if got := kfiCoords(t, batch)[0].offset; got != tc.wantStart {
				t.Fatalf("restarted input starts at %d, want %d", got, tc.wantStart)
			}
		})
	}
}

// TestInputMetadata checks every message carries the record's coordinates
// and headers, and that a header cannot overwrite a coordinate.
func TestInputMetadata(t *testing.T) {
	topic, group := kfiName(t), kfiName(t)+"-g"
	brokers := kfiCluster(t, topic, 3)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	ts := time.UnixMilli(1767225600123)
	rec := &kgo.Record{
		Topic: topic, Partition: 2, Key: []byte("ws-1:acct-9"), Value: []byte(`{"v":1}`), Timestamp: ts,
		Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}, {Key: "kafka_offset", Value: []byte("999")}},
	}
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()

	in := kfiNewInput(t, brokers, topic, group, "")
	batch, _ := kfiRead(t, in)
	if len(batch) != 1 {
		t.Fatalf("got %d messages, want 1", len(batch))
	}
	want := map[string]string{
		"kafka_key":          "ws-1:acct-9",
		"kafka_topic":        topic,
		"kafka_partition":    "2",
		"kafka_offset":       "0",
		"kafka_timestamp_ms": "1767225600123",
		"trace":              "abc",
	}
	for k, v := range want {
		if got, ok := batch[0].MetaGet(k); !ok || got != v {
			t.Errorf("metadata %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	if body, _ := batch[0].AsBytes(); string(body) != `{"v":1}` {
		t.Errorf("body = %q", body)
	}
}

// kfiGaugeRecorder keeps the last value of each gauge series.
type kfiGaugeRecorder struct {
	mu   sync.Mutex
	last map[string]int64
}

func (g *kfiGaugeRecorder) Set(v int64, labels ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.last[strings.Join(labels, "/")] = v
}

func (g *kfiGaugeRecorder) get(labels ...string) (int64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, ok := g.last[strings.Join(labels, "/")]
	return v, ok
}

// TestInputLagGauge checks the lag gauge counts the records not yet acked.
func TestInputLagGauge(t *testing.T) {
	topic, group := kfiName(t), kfiName(t)+"-g"
	brokers := kfiCluster(t, topic, 2)
	kfiProduce(t, brokers, topic, 2, 100)
	in := kfiNewInput(t, brokers, topic, group, "checkpoint_limit: 10\ncommit_period: 20ms\nbatching: {count: 10}\n")
	g := &kfiGaugeRecorder{last: map[string]int64{}}
	in.mu.Lock()
	in.lag = g
	in.mu.Unlock()

	acked := map[int32]int64{}
	for i := 0; i < 3; i++ {
		batch, ack := kfiRead(t, in)
		for _, d := range kfiCoords(t, batch) {
			acked[d.partition] = d.offset + 1
		}
		if err := ack(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	for p := int32(0); p < 2; p++ {
		want := 100 - acked[p]
		kfiEventually(t, fmt.Sprintf("lag of partition %d = %d", p, want), func() bool {
			v, ok := g.get(topic, strconv.Itoa(int(p)), group)
			return ok && v == want
		})
	}
}

func TestInputConfig(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{"minimal", "topics: [a]\nconsumer_group: g\n", ""},
		{"comma separated topics", "topics: ['a, b']\nconsumer_group: g\n", ""},
		{"no group", "topics: [a]\n", "consumer_group"},
		{"empty group", "topics: [a]\nconsumer_group: ' '\n", "consumer_group must not be empty"},
		{"no topics", "topics: []\nconsumer_group: g\n", "no topics"},
		{"zero checkpoint limit", "topics: [a]\nconsumer_group: g\ncheckpoint_limit: 0\n", "checkpoint_limit must be at least 1"},
		{"revoke wait too long", "topics: [a]\nconsumer_group: g\nrevoke_wait: 2m\n", "revoke_wait"},
		{"batching check", "topics: [a]\nconsumer_group: g\nbatching: {count: 5, check: 'true'}\n", "not supported"},
		{"batching processors", "topics: [a]\nconsumer_group: g\nbatching: {count: 5, processors: [{mapping: 'root = this'}]}\n", "not supported"},
		{"negative buffer budget", "topics: [a]\nconsumer_group: g\nmax_buffered_records: -1\n", "max_buffered_records must not be negative"},
		{"zero fetch bytes", "topics: [a]\nconsumer_group: g\nfetch_max_bytes: 0\n", "fetch_max_bytes must be between"},
		{"zero fetch wait", "topics: [a]\nconsumer_group: g\nfetch_max_wait: 0s\n", "fetch_max_wait must be at least"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conf, err := kafkaFranzInputSpec().ParseYAML(tc.yaml, nil)
			if err == nil {
				var in *kafkaFranzInput
				in, err = newKafkaFranzInput(conf, service.MockResources())
				if err == nil && tc.wantErr == "" {
					if in.checkpointLimit != 1024 || in.commitPeriod != time.Second || !in.startFromOldest || in.revokeWait != 10*time.Second {
						t.Errorf("defaults = limit %d, commit %s, oldest %v, revoke %s", in.checkpointLimit, in.commitPeriod, in.startFromOldest, in.revokeWait)
					}
				}
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want it to mention %q", err, tc.wantErr)
			}
		})
	}
}

// TestInputRetriesRefusedCommits has the broker refuse the first commits: an
// offset the group did not take must be sent again, not taken as committed.
func TestInputRetriesRefusedCommits(t *testing.T) {
	topic, group := kfiName(t), kfiName(t)+"-g"
	cluster := kfiFakeCluster(t, topic, 1)
	brokers := cluster.ListenAddrs()
	kfiProduce(t, brokers, topic, 1, 10)

	var refused atomic.Int32
	cluster.ControlKey(kmsg.OffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if refused.Load() >= 3 {
			return nil, nil, false
		}
		refused.Add(1)
		creq := req.(*kmsg.OffsetCommitRequest)
		resp := creq.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range creq.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.OffsetMetadataTooLarge.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	in := kfiNewInput(t, brokers, topic, group, "commit_period: 20ms\n")
	_, ack := kfiRead(t, in)
	if err := ack(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	kfiEventually(t, "the commit to land after refusals", func() bool {
		return kfiCommitted(t, brokers, topic, group)[0] == 10
	})
	if refused.Load() < 3 {
		t.Fatalf("only %d commits were refused; the fault was not exercised", refused.Load())
	}
}

// TestInputConnectFailsWithoutBroker makes sure an unreachable cluster is a
// connection failure the engine retries, not a silent hang.
func TestInputConnectFailsWithoutBroker(t *testing.T) {
	conf, err := kafkaFranzInputSpec().ParseYAML("seed_brokers: ['127.0.0.1:1']\ntopics: [a]\nconsumer_group: g\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	in, err := newKafkaFranzInput(conf, service.MockResources())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := in.Connect(ctx); err == nil {
		t.Fatal("Connect succeeded without a broker")
	}
	if _, _, err := in.ReadBatch(ctx); !errors.Is(err, service.ErrNotConnected) {
		t.Fatalf("ReadBatch before a connection = %v, want ErrNotConnected", err)
	}
	if err := in.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestInputBufferBudgetWithSlowOutput has an output hold every batch it gets:
// the records fetched and not handed out stay within max_buffered_records,
// well below what checkpoint_limit alone allows (4 × 100), and once the
// output acks, every record still arrives in order.
func TestInputBufferBudgetWithSlowOutput(t *testing.T) {
	const (
		partitions   = 4
		perPartition = 200
		budget       = 50
	)
	topic, group := kfiName(t), kfiName(t)+"-g"
	brokers := kfiCluster(t, topic, partitions)
	kfiProduce(t, brokers, topic, partitions, perPartition)
	in := kfiNewInput(t, brokers, topic, group,
		fmt.Sprintf("checkpoint_limit: 100\nmax_buffered_records: %d\ncommit_period: 20ms\nbatching: {count: 10}\n", budget))

	next := map[int32]int64{}
	record := func(batch service.MessageBatch) {
		t.Helper()
		for _, d := range kfiCoords(t, batch) {
			if d.offset != next[d.partition] {
				t.Fatalf("partition %d: got offset %d, want %d", d.partition, d.offset, next[d.partition])
			}
			next[d.partition]++
		}
	}
	// The slow output holds every batch it gets, until the input has
	// nothing more to hand out: each partition it buffers then has a batch
	// out, and the input can only fetch.
	var held []service.AckFunc
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		batch, ack, err := in.ReadBatch(ctx)
		cancel()
		if err != nil {
			break
		}
		record(batch)
		held = append(held, ack)
	}
	if len(held) == 0 {
		t.Fatalf("no batch handed out")
	}
	kfiEventually(t, "the budget to fill", func() bool { return in.bufferedRecords() == budget })
	// Give the poll loop time to overrun the budget if it could.
	time.Sleep(300 * time.Millisecond)
	if got := in.bufferedRecords(); got != budget {
		t.Fatalf("buffered with every batch held = %d, want the budget %d", got, budget)
	}

	ctx := context.Background()
	for _, ack := range held {
		_ = ack(ctx, nil)
	}
	total := 0
	for _, n := range next {
		total += int(n)
	}
	for total < partitions*perPartition {
		batch, ack := kfiRead(t, in)
		record(batch)
		total += len(batch)
		_ = ack(ctx, nil)
	}
	in.mu.Lock()
	peak := in.tracker.peakBuffered
	in.mu.Unlock()
	if peak > budget {
		t.Fatalf("buffered records peaked at %d, above max_buffered_records %d", peak, budget)
	}
}

// TestInputBufferBudgetDefault checks that an unset max_buffered_records
// follows batching.count, so raising the batch size never caps batches.
func TestInputBufferBudgetDefault(t *testing.T) {
	tests := []struct {
		extra string
		want  int
	}{
		{"", kfiDefaultBuffered},
		{"batching: {count: 5000}\n", 10000},
		{"batching: {count: 20000}\n", 40000},
		{"batching: {count: 5000}\nmax_buffered_records: 7000\n", 7000},
	}
	for _, tc := range tests {
		conf, err := kafkaFranzInputSpec().ParseYAML("topics: [a]\nconsumer_group: g\n"+tc.extra, nil)
		if err != nil {
			t.Fatalf("parsing %q: %v", tc.extra, err)
		}
		in, err := newKafkaFranzInput(conf, service.MockResources())
		if err != nil {
			t.Fatalf("building from %q: %v", tc.extra, err)
		}
		if in.maxBuffered != tc.want {
			t.Errorf("%q: max_buffered_records = %d, want %d", tc.extra, in.maxBuffered, tc.want)
		}
	}
}
