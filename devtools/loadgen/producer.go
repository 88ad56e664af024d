package loadgen

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/kafkaconf"
)

// DefaultLinger is how long the producer lets a partition's batch fill before
// sending it: long enough for batches of hundreds of records at full speed,
// short enough not to dominate produce-to-stored latency at 1,000/s.
const DefaultLinger = 5 * time.Millisecond

// deliveryTimeout bounds how long a record may wait for Kafka before it
// counts as failed, so a dead broker ends the run instead of hanging it.
const deliveryTimeout = 2 * time.Minute

// ProducerOpts are the franz-go options of the load generator's producer on
// conn: acks from all in-sync replicas and the idempotent producer (franz-go's
// default, kept on) so a retried batch is never duplicated, linger for
// throughput, a delivery timeout, and franz-go's default partitioner, which
// hashes keys exactly like the Java client.
func ProducerOpts(conn kafkaconf.Config, linger time.Duration) ([]kgo.Opt, error) {
	opts, err := conn.ClientOpts()
	if err != nil {
		return nil, err
	}
	return append(opts,
		kgo.ClientID("speculapro-loadgen"),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(linger),
		kgo.RecordDeliveryTimeout(deliveryTimeout),
		// Enough in flight to keep every partition's pipe full at full speed;
		// Produce blocks beyond it, which is the back-pressure we want.
		kgo.MaxBufferedRecords(50000),
		// Uncompressed, as the ingest API's output writes them (the
		// kafka_franz output's compression defaults to none): franz-go's
		// own default is snappy, which made every consumer of a pre-filled
		// topic pay a decompression a topic filled by ingest never asks.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	), nil
}

// ProduceOptions says where and how fast Produce sends.
type ProduceOptions struct {
	Topic string
	// Kind is what to send: transactions (the default, also when empty) or
	// the generator's account events (event.KindAccountEvent).
	Kind event.Kind
	// Rate is records per second; 0 sends as fast as Kafka takes them.
	Rate float64
	// From and To select records From..To-1 of the generator; To 0 means
	// the generator's Count (AccountEvents for account events).
	From, To int
	// Progress, when set, gets a line every ProgressEvery (default one
	// second) and none at the end; the caller prints the summary.
	Progress      io.Writer
	ProgressEvery time.Duration
}

// Summary is what a Produce run did.
type Summary struct {
	Topic   string
	Kind    event.Kind // transaction when empty
	Sent    int64      // handed to the producer
	Acked   int64      // acknowledged by all in-sync replicas
	Failed  int64
	Elapsed time.Duration
}

// Rate is acknowledged records per second over the run.
func (s Summary) Rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Acked) / s.Elapsed.Seconds()
}

// String is the final summary line.
func (s Summary) String() string {
	what := "transactions"
	if s.Kind == event.KindAccountEvent {
		what = "account events"
	}
	return fmt.Sprintf("loadgen: sent %d %s to %s in %s (%.0f/s), acked %d, failed %d",
		s.Sent, what, s.Topic, s.Elapsed.Round(time.Millisecond), s.Rate(), s.Acked, s.Failed)
}

// Produce sends the selected transactions (or account events) to o.Topic and waits until Kafka
// acknowledged (or refused) every one of them. Each record's ReceivedAt is
// stamped as it is handed to the producer, as the ingest API stamps it on
// acceptance. A cancelled ctx stops sending and returns ctx's error with
// the summary of what was sent; records Kafka did not acknowledge make an
// error wrapping ErrNotAcknowledged and the first failure.
func Produce(ctx context.Context, cl *kgo.Client, g *Generator, o ProduceOptions) (Summary, error) {
	total, what, record := g.cfg.Count, "transactions", g.Record
	if o.Kind == event.KindAccountEvent {
		total, what, record = g.cfg.AccountEvents, "account events", g.EventRecord
	} else if o.Kind != "" && o.Kind != event.KindTransaction {
		return Summary{}, fmt.Errorf("%w: kind %q: want %s or %s", ErrInvalidConfig, o.Kind, event.KindTransaction, event.KindAccountEvent)
	}
	to := o.To
	if to == 0 {
		to = total
	}
	if o.From < 0 || o.From > to || to > total {
		return Summary{}, fmt.Errorf("%w: %s %d..%d of %d", ErrInvalidConfig, what, o.From, to, total)
	}
	if o.Rate < 0 {
		return Summary{}, fmt.Errorf("%w: rate %v: want 0 (as fast as possible) or more", ErrInvalidConfig, o.Rate)
	}
	var (
		sent, acked, failed atomic.Int64
		errOnce             sync.Once
		firstErr            error
	)
	start := time.Now()
	stopProgress := progress(o, start, to-o.From, &sent, &acked)
	defer stopProgress()

	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.Add(1)
			errOnce.Do(func() { firstErr = err })
			return
		}
		acked.Add(1)
	}
	var genErr error
	for i := o.From; i < to; i++ {
		if ctx.Err() != nil {
			break
		}
		if o.Rate > 0 {
			// Pace against the absolute schedule, so sleeping late once is
			// made up by the next records instead of lowering the rate.
			due := start.Add(time.Duration(float64(i-o.From) / o.Rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
				if ctx.Err() != nil {
					break
				}
			}
		}
		key, value, _, err := record(i, time.Now())
		if err != nil {
			genErr = err
			break
		}
		cl.Produce(ctx, &kgo.Record{Topic: o.Topic, Key: []byte(key), Value: value}, promise)
		sent.Add(1)
	}
	// Flush waits for every promise, also after a cancellation (records
	// already handed over are then failed with the context's error), so the
	// counts below are final.
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deliveryTimeout+10*time.Second)
	defer cancel()
	flushErr := cl.Flush(flushCtx)
	s := Summary{Topic: o.Topic, Kind: o.Kind, Sent: sent.Load(), Acked: acked.Load(), Failed: failed.Load(), Elapsed: time.Since(start)}
	switch {
	case genErr != nil:
		return s, genErr
	case ctx.Err() != nil:
		return s, ctx.Err()
	case flushErr != nil:
		return s, fmt.Errorf("waiting for Kafka to acknowledge %d records on %s: %w", s.Sent-s.Acked, o.Topic, flushErr)
	case s.Failed > 0:
		return s, fmt.Errorf("%d of %d records on %s: %w: %w", s.Failed, s.Sent, o.Topic, ErrNotAcknowledged, firstErr)
	}
	return s, nil
}

// progress prints a line every o.ProgressEvery until the returned stop is
// called. Its goroutine ends when stop closes done, and stop waits for it,
// so no line is printed after Produce returned.
func progress(o ProduceOptions, start time.Time, total int, sent, acked *atomic.Int64) (stop func()) {
	if o.Progress == nil {
		return func() {}
	}
	every := o.ProgressEvery
	if every <= 0 {
		every = time.Second
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		var lastSent int64
		last := start
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				s := sent.Load()
				rate := float64(s-lastSent) / now.Sub(last).Seconds()
				lastSent, last = s, now
				pct := 100.0
				if total > 0 {
					pct = 100 * float64(s) / float64(total)
				}
				fmt.Fprintf(o.Progress, "loadgen: sent %d/%d (%.0f%%) at %.0f/s, acked %d\n", s, total, pct, rate, acked.Load())
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}
