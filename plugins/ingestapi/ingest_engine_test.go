package ingestapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/apisample"
	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
)

// ingest_test_kafka plays kafka_franz inside a real engine: it fails the
// messages holding "kafka-down" one by one (a *service.BatchError over the
// batch it was handed, as kafka_franz reports a timeout).
func init() {
	err := service.RegisterBatchOutput("ingest_test_kafka", service.NewConfigSpec(),
		func(*service.ParsedConfig, *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
			return testKafkaOutput{}, service.BatchPolicy{}, 4, nil
		})
	if err != nil {
		panic(err)
	}
}

type testKafkaOutput struct{}

func (testKafkaOutput) Connect(context.Context) error { return nil }
func (testKafkaOutput) Close(context.Context) error   { return nil }
func (testKafkaOutput) WriteBatch(_ context.Context, batch service.MessageBatch) error {
	var berr *service.BatchError
	for i, m := range batch {
		if b, _ := m.AsBytes(); bytes.Contains(b, []byte("kafka-down")) {
			err := errors.New("Kafka did not take the message within 10s: context deadline exceeded")
			if berr == nil {
				berr = service.NewBatchError(batch, err)
			}
			berr = berr.Failed(i, err)
		}
	}
	if berr != nil {
		return berr
	}
	return nil
}

// Through a real engine, as pipelines/ingest.yaml runs it (a processor,
// reject_errored around the output, which report failures on the batches
// they were handed, not the input's): each failed message is traced back
// to its own item, whatever its place in the request, so the item a
// processor failed is rejected, the one Kafka did not take is retry and
// every other is accepted.
func TestEngineFailuresReachTheirItems(t *testing.T) {
	f, yaml := setupAPIFixture(t, testenv.RedisURL(t))
	runIngestEngine(t, f, yaml, `mutation: |
  if content().string().contains("processor-fails") {
    root = throw("counterparty.identifier: invalid")
  }`)
	var items []string
	want := make([]string, 40)
	for i := range want {
		ext, status := "ok-"+string(rune('a'+i%26))+string(rune('a'+i/26)), statusAccepted
		switch i % 7 {
		case 3:
			ext, status = "kafka-down-"+ext, statusRetry
		case 5:
			ext, status = "processor-fails-"+ext, statusRejected
		}
		items = append(items, f.txnAt(ext, f.txTime, "1.00"))
		want[i] = status
	}
	code, out := f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(items...)))
	if code != 200 {
		t.Fatalf("answer %d: %v", code, out)
	}
	st, _ := results(t, out)
	if got := strings.Join(st, ","); got != strings.Join(want, ",") {
		t.Errorf("answers\n %s\nwant\n %s", got, strings.Join(want, ","))
	}
}

// Batch requests beyond max_active_requests wait and are let in in the
// order they arrived; one that waits longer than the ack timeout is
// refused (the handler answers 503 with Retry-After).
func TestActiveRequestsTakeTurns(t *testing.T) {
	a := &ingestAPI{turns: apirequest.NewTurnTaker(1), ackTimeout: time.Minute, closing: make(chan struct{})}
	var ws event.UUID
	ctx := context.Background()
	if !a.enter(ctx, ws) {
		t.Fatal("the first request waits with no other in")
	}
	const waiting = 4
	order := make(chan int, waiting)
	for i := range waiting {
		// Each waiter owns its slot once in, and gives it back at once.
		go func() {
			if a.enter(ctx, ws) {
				order <- i
				a.leave()
			}
		}()
		// Time to block in line before the next one arrives.
		time.Sleep(50 * time.Millisecond)
	}
	a.leave()
	for want := range waiting {
		if got := <-order; got != want {
			t.Fatalf("request %d was let in as number %d", got, want)
		}
	}

	a.ackTimeout = 50 * time.Millisecond
	if !a.enter(ctx, ws) {
		t.Fatal("the slot was not given back")
	}
	if a.enter(ctx, ws) {
		t.Error("a request was let in beyond max_active_requests")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	a.ackTimeout = time.Minute
	if a.enter(cctx, ws) {
		t.Error("a request whose client gave up was let in")
	}
}

// account_event_processors run on account events only, through a real
// engine: a processor that fails every message it is given rejects the
// account events (reject_errored refuses them, as it refuses a message a
// pipeline processor failed) and leaves the transactions, which never
// reach it, accepted.
func TestAccountEventProcessorsRunOnAccountEventsOnly(t *testing.T) {
	f, yaml := setupAPIFixture(t, testenv.RedisURL(t))
	yaml += `account_event_processors:
  - mutation: 'root = throw("attributes: refused by the processor")'
`
	runIngestEngine(t, f, yaml, "")
	code, out := f.call(t, "POST", "/v1/transactions", f.keyA, string(apisample.Batch(f.txn("t-1", ""), f.txn("t-2", ""))))
	if st, _ := results(t, out); code != 200 || strings.Join(st, ",") != "accepted,accepted" {
		t.Errorf("transactions: %d %v, want both accepted (the processors are not theirs)", code, out)
	}
	ev := func(ext string) string {
		return fmt.Sprintf(`{"external_id":%q,"occurred_at":%q,"customer_external_id":"cust-1","type":"sim_swap"}`, ext, f.txTime.Format(time.RFC3339Nano))
	}
	code, out = f.call(t, "POST", "/v1/account-events", f.keyA, string(apisample.Batch(ev("ae-1"), ev("ae-2"))))
	if st, _ := results(t, out); code != 200 || strings.Join(st, ",") != "rejected,rejected" {
		t.Fatalf("account events: %d %v, want both rejected by the processor", code, out)
	}
	if s := fmt.Sprint(out["results"]); !strings.Contains(s, "refused by the processor") {
		t.Errorf("the rejection does not carry the processor's reason: %s", s)
	}
}

// runIngestEngine runs ingest_api (its YAML) through a real engine, with
// processorYAML as the pipeline's one processor unless "", and the output
// inside reject_errored, as pipelines/ingest.yaml does; it returns once the
// input listens and stops the stream when the test ends.
func runIngestEngine(t *testing.T, f *apiFixture, yaml, processorYAML string) {
	t.Helper()
	b := service.NewStreamBuilder()
	if err := b.SetLoggerYAML("level: none"); err != nil {
		t.Fatal(err)
	}
	if err := b.AddInputYAML("ingest_api:" + strings.ReplaceAll(yaml, "\n", "\n  ")); err != nil {
		t.Fatal(err)
	}
	if processorYAML != "" {
		if err := b.AddProcessorYAML(processorYAML); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.AddOutputYAML("reject_errored:\n  ingest_test_kafka: {}"); err != nil {
		t.Fatal(err)
	}
	stream, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- stream.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	// The stream connects its input in the background.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := net.Dial("tcp", strings.TrimPrefix(f.base, "http://"))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream's ingest_api is not listening: %v", err)
		}
	}
}
