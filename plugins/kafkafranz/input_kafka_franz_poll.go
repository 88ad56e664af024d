package kafkafranz

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"
)

// pollLoop moves fetched records into the tracker. It owns polling: it is
// the only caller of PollRecords and AllowRebalance while the input runs.
func (in *kafkaFranzInput) pollLoop(ctx context.Context, cl *kgo.Client) {
	defer in.loops.Done()
	// A canceled poll still counts as a poller; let the final leave run.
	defer cl.AllowRebalance()
	for {
		room, ok := in.waitForRoom(ctx)
		if !ok {
			return
		}
		fetches := cl.PollRecords(ctx, min(room, kfiPollRecords))
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return
		}
		failed := false
		fetches.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
				return
			}
			failed = true
			in.log.Errorf("kafka_franz: fetching %s/%d for group %s: %v", topic, partition, in.group, err)
		})
		in.mu.Lock()
		got := 0
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if fp.Err != nil || len(fp.Records) == 0 {
				return
			}
			got += len(fp.Records)
			p := in.tracker.add(kfiTopicPartition{fp.Topic, fp.Partition}, fp.Records, fp.HighWatermark)
			if !p.paused && p.unacked() >= in.checkpointLimit {
				cl.PauseFetchPartitions(map[string][]int32{fp.Topic: {fp.Partition}})
				p.paused = true
			}
			in.reportLagLocked(p)
		})
		if got > 0 {
			in.notifyLocked()
		}
		in.mu.Unlock()
		cl.AllowRebalance()
		if failed && got == 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(kfiPollErrorPause):
			}
		}
	}
}

// waitForRoom blocks while max_buffered_records records wait to be handed
// out and returns how many more may be polled; false once ctx ends. Not
// polling is what bounds memory: the client fetches again only after its
// buffered response has been polled.
func (in *kafkaFranzInput) waitForRoom(ctx context.Context) (int, bool) {
	for {
		in.mu.Lock()
		room := in.tracker.room()
		changed := in.changed
		in.mu.Unlock()
		if room > 0 {
			return room, true
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-changed:
		}
	}
}

// bufferedRecords is how many fetched records wait to be handed out.
func (in *kafkaFranzInput) bufferedRecords() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.tracker.buffered
}

// kfiClientLogger passes the client's own log lines on at debug level: they
// explain rebalances and fetch sessions when a group misbehaves.
type kfiClientLogger struct{ log *service.Logger }

func (l kfiClientLogger) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (l kfiClientLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	var b strings.Builder
	b.WriteString("kafka_franz client: ")
	b.WriteString(msg)
	for i := 0; i+1 < len(keyvals); i += 2 {
		fmt.Fprintf(&b, " %v=%v", keyvals[i], keyvals[i+1])
	}
	if level <= kgo.LogLevelWarn && level != kgo.LogLevelNone {
		l.log.Warnf("%s", b.String())
		return
	}
	l.log.Debugf("%s", b.String())
}
