package kafkafranz

import (
	"context"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func (in *kafkaFranzInput) onAssigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	in.mu.Lock()
	for topic, parts := range assigned {
		for _, partition := range parts {
			in.tracker.assign(kfiTopicPartition{topic, partition})
		}
	}
	// A partition paused while we owned it before stays paused in the
	// client until resumed.
	cl.ResumeFetchPartitions(assigned)
	in.notifyLocked()
	in.mu.Unlock()
	in.log.Debugf("kafka_franz: group %s assigned %v", in.group, assigned)
}

// onRevoked lets partitions go in a rebalance or on leaving: it waits (up to
// revoke_wait) for their batches in flight, commits what was acked, and
// forgets them so that later acks commit nothing.
func (in *kafkaFranzInput) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	tps := kfiFlatten(revoked)
	if len(tps) == 0 {
		return
	}
	deadline := time.Now().Add(in.revokeWait)
	in.mu.Lock()
	for _, tp := range tps {
		if p := in.tracker.parts[tp]; p != nil {
			// Hand out nothing more of a partition on its way out.
			p.revoking = true
		}
	}
	for !in.closing && in.tracker.inFlight(tps) > 0 {
		wait := time.Until(deadline)
		if wait <= 0 {
			break
		}
		changed := in.changed
		in.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		in.mu.Lock()
		if ctx.Err() != nil {
			break
		}
	}
	stuck := in.tracker.inFlight(tps)
	closing := in.closing
	in.mu.Unlock()
	if stuck > 0 && !closing {
		in.log.Warnf("kafka_franz: group %s gave up %d partitions with a batch still unacked after %s; the next owner delivers those records again", in.group, stuck, in.revokeWait)
	}

	in.commitMu.Lock()
	defer in.commitMu.Unlock()
	only := map[kfiTopicPartition]bool{}
	for _, tp := range tps {
		only[tp] = true
	}
	in.mu.Lock()
	commits := in.tracker.commits(only)
	for _, tp := range tps {
		if p := in.tracker.drop(tp); p != nil {
			in.lag.Set(0, tp.topic, strconv.FormatInt(int64(tp.partition), 10), in.group)
		}
	}
	cl.ResumeFetchPartitions(revoked)
	in.notifyLocked()
	in.mu.Unlock()
	if err := in.commit(ctx, cl, commits); err != nil && ctx.Err() == nil {
		in.log.Errorf("kafka_franz: on revoke: %v; the next owner delivers those records again", err)
	}
	in.log.Debugf("kafka_franz: group %s revoked %v", in.group, revoked)
}

// onLost forgets partitions the group took away without a revoke (session
// expired, fenced): committing for them would be refused, so nothing is.
func (in *kafkaFranzInput) onLost(_ context.Context, cl *kgo.Client, lost map[string][]int32) {
	tps := kfiFlatten(lost)
	if len(tps) == 0 {
		return
	}
	in.commitMu.Lock()
	defer in.commitMu.Unlock()
	in.mu.Lock()
	for _, tp := range tps {
		if p := in.tracker.drop(tp); p != nil {
			in.lag.Set(0, tp.topic, strconv.FormatInt(int64(tp.partition), 10), in.group)
		}
	}
	cl.ResumeFetchPartitions(lost)
	in.notifyLocked()
	closing := in.closing
	in.mu.Unlock()
	if !closing {
		in.log.Warnf("kafka_franz: group %s lost %d partitions; their uncommitted records are delivered again", in.group, len(tps))
	}
}

func kfiFlatten(m map[string][]int32) []kfiTopicPartition {
	var out []kfiTopicPartition
	for topic, parts := range m {
		for _, p := range parts {
			out = append(out, kfiTopicPartition{topic, p})
		}
	}
	return out
}
