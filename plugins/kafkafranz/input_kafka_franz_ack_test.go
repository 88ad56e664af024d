package kafkafranz

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/ownership"
	"github.com/speculapro/speculapro/internal/retry"
)

// An output that stored some partitions of a batch and hands the others
// back (a batch error naming their messages, with a wait) gets the others
// committed, and only the failed partition delivered again, after the wait.
func TestInputBatchErrorSettlesEachPartition(t *testing.T) {
	topic, group := kfiName(t), kfiName(t)+"-g"
	brokers := kfiCluster(t, topic, 3)
	kfiProduce(t, brokers, topic, 3, 5)
	in := kfiNewInput(t, brokers, topic, group, "commit_period: 20ms\nbatching: {count: 15, period: 500ms}\n")

	batch, ack := kfiRead(t, in)
	if len(batch) != 15 {
		t.Fatalf("batch of %d records, want all 15", len(batch))
	}
	const wait = 700 * time.Millisecond
	bErr := service.NewBatchError(batch, &retry.AfterError{Err: errors.New("waits for a partition"), Wait: wait})
	for i, m := range batch {
		if p, _ := m.MetaGet("kafka_partition"); p == "1" {
			bErr.Failed(i, errors.New("waits"))
		}
	}
	nacked := time.Now()
	if err := ack(context.Background(), bErr); err != nil {
		t.Fatal(err)
	}
	kfiEventually(t, "partitions 0 and 2 committed", func() bool {
		c := kfiCommitted(t, brokers, topic, group)
		return c[0] == 5 && c[2] == 5
	})
	if off, ok := kfiCommitted(t, brokers, topic, group)[1]; ok {
		t.Fatalf("partition 1 committed at %d although its records were handed back", off)
	}
	again, ack2 := kfiRead(t, in)
	if took := time.Since(nacked); took < wait {
		t.Errorf("partition 1 delivered again after %s, before the %s asked for", took, wait)
	}
	for _, c := range kfiCoords(t, again) {
		if c.partition != 1 {
			t.Fatalf("delivered again: %v, want only partition 1", kfiCoords(t, again))
		}
	}
	if len(again) != 5 {
		t.Fatalf("delivered again %d records, want partition 1's 5", len(again))
	}
	if err := ack2(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	kfiEventually(t, "partition 1 committed", func() bool { return kfiCommitted(t, brokers, topic, group)[1] == 5 })
}

// Every message carries its partition's lease: it ends with ErrShutdown
// when the engine's reading context is cancelled (the stream stops), and
// with ErrRevoked when the partition is given up.
func TestInputLeases(t *testing.T) {
	topic, group := kfiName(t), kfiName(t)+"-g"
	brokers := kfiCluster(t, topic, 2)
	kfiProduce(t, brokers, topic, 2, 3)
	in := kfiNewInput(t, brokers, topic, group, "batching: {count: 6, period: 500ms}\n")

	// The engine passes one context to every read.
	engine, stop := context.WithCancel(context.Background())
	batch, _, err := in.ReadBatch(engine)
	if err != nil {
		t.Fatal(err)
	}
	// The same context again (nothing more to read: it waits until the
	// stop): now it is watched.
	reading := make(chan struct{})
	go func() {
		defer close(reading)
		_, _, _ = in.ReadBatch(engine)
	}()
	time.Sleep(100 * time.Millisecond)
	for _, m := range batch {
		if m.Context().Err() != nil {
			t.Fatalf("a lease ended while the stream runs: %v", context.Cause(m.Context()))
		}
	}
	// A caller's own context for one read, cancelled when it returns, is
	// no stop.
	for range 2 {
		one, oneCancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, _, _ = in.ReadBatch(one)
		oneCancel()
	}
	time.Sleep(50 * time.Millisecond)
	if err := batch[0].Context().Err(); err != nil {
		t.Fatalf("a one-read context's cancel ended the leases: %v", context.Cause(batch[0].Context()))
	}
	// Revoked: the partition's lease ends, the other's does not.
	in.mu.Lock()
	tp := kfiTopicPartition{topic, 0}
	in.tracker.drop(tp)
	in.mu.Unlock()
	for _, m := range batch {
		p, _ := m.MetaGet("kafka_partition")
		cause := context.Cause(m.Context())
		if p == "0" && !errors.Is(cause, ownership.ErrRevoked) {
			t.Errorf("partition 0 dropped: lease cause %v, want ErrRevoked", cause)
		}
		if p == "1" && cause != nil {
			t.Errorf("partition 1's lease ended with %v", cause)
		}
	}
	stop()
	<-reading
	kfiEventually(t, "the leases end at shutdown", func() bool {
		for _, m := range batch {
			if p, _ := m.MetaGet("kafka_partition"); p == "1" && !errors.Is(context.Cause(m.Context()), ownership.ErrShutdown) {
				return false
			}
		}
		return true
	})
}

// While a topic does not exist, Connect fails and says which and how to
// create it.
func TestInputConnectFailsWhileTopicIsMissing(t *testing.T) {
	brokers := kfiCluster(t, "other", 1)
	conf, err := kafkaFranzInputSpec().ParseYAML("seed_brokers: [\""+strings.Join(brokers, ",")+"\"]\ntopics: [missing.topic]\nconsumer_group: g\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	in, err := newKafkaFranzInput(conf, service.MockResources())
	if err != nil {
		t.Fatal(err)
	}
	in.extraOpts = []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}
	defer in.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = in.Connect(ctx)
	if !errors.Is(err, errKfiMissingTopic) || !strings.Contains(err.Error(), "missing.topic") || !strings.Contains(err.Error(), "speculapro topics") {
		t.Fatalf("Connect = %v, want the missing topic named with `speculapro topics`", err)
	}
}
