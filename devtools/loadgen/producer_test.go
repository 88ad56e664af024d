package loadgen

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/kafkaconf"
)

func fakeKafka(t *testing.T, topic string) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(6, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	opts, err := ProducerOpts(kafkaconf.Config{SeedBrokers: c.ListenAddrs()}, DefaultLinger)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c, cl
}

// Every selected transaction reaches the topic once, as the generator's
// record, in an uncompressed batch, and one account's transactions share a
// partition.
func TestProduceSendsEveryTransactionOnce(t *testing.T) {
	c, cl := fakeKafka(t, "lg.txn.ingested")
	cfg := testConfig()
	g := newTestGenerator(t, cfg)
	var progress bytes.Buffer
	s, err := Produce(context.Background(), cl, g, ProduceOptions{
		Topic: "lg.txn.ingested", From: 1000, To: 3000, Progress: &progress, ProgressEvery: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("Produce: %v", err)
	}
	if s.Sent != 2000 || s.Acked != 2000 || s.Failed != 0 {
		t.Fatalf("summary %+v, want 2000 sent and acked", s)
	}
	if !strings.Contains(s.String(), "acked 2000, failed 0") {
		t.Fatalf("summary line %q", s.String())
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("lg.txn.ingested"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	want := map[event.UUID]bool{}
	for i := 1000; i < 3000; i++ {
		want[g.Envelope(i).ID] = true
	}
	partitionOf := map[string]int32{}
	got := 0
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for got < 2000 && ctx.Err() == nil {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			got++
			e, err := event.Decode(r.Value)
			if err != nil {
				t.Fatalf("record at %d/%d does not decode: %v", r.Partition, r.Offset, err)
			}
			if !want[e.ID] {
				t.Fatalf("record %s was not selected or came twice", e.ID)
			}
			delete(want, e.ID)
			if string(r.Key) != Key(e) {
				t.Fatalf("key %q, want %q", r.Key, Key(e))
			}
			if p, ok := partitionOf[string(r.Key)]; ok && p != r.Partition {
				t.Fatalf("key %q on partitions %d and %d", r.Key, p, r.Partition)
			}
			partitionOf[string(r.Key)] = r.Partition
			// As the ingest API's output writes them, so a pre-filled topic
			// costs its consumers what one filled by ingest does.
			if c := r.Attrs.CompressionType(); c != 0 {
				t.Fatalf("record at %d/%d in a batch compressed with codec %d, want none", r.Partition, r.Offset, c)
			}
		})
	}
	if len(want) != 0 {
		t.Fatalf("%d transactions never reached the topic", len(want))
	}
	if len(partitionOf) < 100 {
		t.Fatalf("only %d distinct keys", len(partitionOf))
	}
}

// A rate of 0 sends as fast as possible; a rate paces the run. Only the
// lower bound is asserted: pacing can never make a run faster than
// count/rate, whatever the machine's load.
func TestProduceRateIsALowerBoundOnDuration(t *testing.T) {
	_, cl := fakeKafka(t, "lg.rate")
	g := newTestGenerator(t, testConfig())
	s, err := Produce(context.Background(), cl, g, ProduceOptions{Topic: "lg.rate", To: 300, Rate: 1000})
	if err != nil {
		t.Fatal(err)
	}
	// Record 299 is due 299 ms after the start.
	if s.Elapsed < 299*time.Millisecond || s.Acked != 300 {
		t.Fatalf("300 records at 1000/s took %s (acked %d), want at least 299ms", s.Elapsed, s.Acked)
	}
}

// Records Kafka refuses are counted and reported, not lost silently.
func TestProduceReportsRefusedRecords(t *testing.T) {
	c, cl := fakeKafka(t, "lg.refused")
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "lg.refused", Err: kerr.TopicAuthorizationFailed, Count: -1})
	g := newTestGenerator(t, testConfig())
	s, err := Produce(context.Background(), cl, g, ProduceOptions{Topic: "lg.refused", To: 50})
	if !errors.Is(err, ErrNotAcknowledged) || !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("Produce = %v, want ErrNotAcknowledged wrapping the broker's refusal", err)
	}
	if s.Failed != 50 || s.Acked != 0 {
		t.Fatalf("summary %+v, want 50 failed", s)
	}
}

// A cancelled run stops sending and says how far it got.
func TestProduceStopsOnCancel(t *testing.T) {
	_, cl := fakeKafka(t, "lg.cancel")
	g := newTestGenerator(t, testConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	s, err := Produce(ctx, cl, g, ProduceOptions{Topic: "lg.cancel", Rate: 100})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Produce = %v, want the context's error", err)
	}
	if s.Sent >= int64(g.Config().Count) || s.Sent == 0 {
		t.Fatalf("sent %d of %d before the cancel", s.Sent, g.Config().Count)
	}
}
