package kafkafranz

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitLoop commits acked offsets and refreshes the lag gauge every
// commit_period until ctx ends.
func (in *kafkaFranzInput) commitLoop(ctx context.Context, cl *kgo.Client) {
	defer in.loops.Done()
	tick := time.NewTicker(in.commitPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		in.commitMu.Lock()
		in.mu.Lock()
		commits := in.tracker.commits(nil)
		in.mu.Unlock()
		err := in.commit(ctx, cl, commits)
		in.commitMu.Unlock()
		if err != nil && ctx.Err() == nil {
			// The next tick retries: offsets only ever grow.
			in.log.Warnf("kafka_franz: %v", err)
		}
		in.refreshLag(ctx, cl)
	}
}

// commit sends the offsets and records which ones the group took. The
// caller holds commitMu.
func (in *kafkaFranzInput) commit(ctx context.Context, cl *kgo.Client, commits []kfiCommit) error {
	if len(commits) == 0 {
		return nil
	}
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for _, c := range commits {
		if offsets[c.part.tp.topic] == nil {
			offsets[c.part.tp.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[c.part.tp.topic][c.part.tp.partition] = kgo.EpochOffset{Epoch: c.epoch, Offset: c.offset}
	}
	cctx, cancel := context.WithTimeout(ctx, kfiCommitTimeout)
	defer cancel()
	var (
		commitErr error
		done      = map[kfiTopicPartition]bool{}
	)
	cl.CommitOffsetsSync(cctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			commitErr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
					commitErr = fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, perr)
					continue
				}
				done[kfiTopicPartition{t.Topic, p.Partition}] = true
			}
		}
	})
	in.mu.Lock()
	for _, c := range commits {
		if done[c.part.tp] && c.offset > c.part.committed {
			c.part.committed = c.offset
		}
	}
	in.mu.Unlock()
	if commitErr != nil {
		return fmt.Errorf("committing offsets of %d partitions for group %s: %w", len(commits), in.group, commitErr)
	}
	return nil
}

// refreshLag reads the partitions' end offsets, because a paused or idle
// partition has no fetch to carry its high watermark.
func (in *kafkaFranzInput) refreshLag(ctx context.Context, cl *kgo.Client) {
	in.mu.Lock()
	topicSet := map[string]bool{}
	for tp := range in.tracker.parts {
		topicSet[tp.topic] = true
	}
	in.mu.Unlock()
	if len(topicSet) == 0 {
		return
	}
	topics := make([]string, 0, len(topicSet))
	for t := range topicSet {
		topics = append(topics, t)
	}
	lctx, cancel := context.WithTimeout(ctx, kfiCommitTimeout)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(lctx, topics...)
	if err != nil {
		if ctx.Err() == nil {
			in.log.Debugf("kafka_franz: listing end offsets for the lag of group %s: %v", in.group, err)
		}
		return
	}
	committed := cl.CommittedOffsets()
	in.mu.Lock()
	defer in.mu.Unlock()
	ends.Each(func(o kadm.ListedOffset) {
		p := in.tracker.parts[kfiTopicPartition{o.Topic, o.Partition}]
		if p == nil || o.Err != nil {
			return
		}
		if o.Offset > p.highWater {
			p.highWater = o.Offset
		}
		if p.position() < 0 {
			// Nothing fetched yet: the group stands at its commit.
			if eo, ok := committed[o.Topic][o.Partition]; ok && eo.Offset >= 0 {
				in.lag.Set(max(p.highWater-eo.Offset, 0), o.Topic, strconv.FormatInt(int64(o.Partition), 10), in.group)
			}
			return
		}
		in.reportLagLocked(p)
	})
}

func (in *kafkaFranzInput) reportLagLocked(p *kfiPartition) {
	pos := p.position()
	if pos < 0 || p.highWater < 0 {
		return
	}
	in.lag.Set(max(p.highWater-pos, 0), p.tp.topic, strconv.FormatInt(int64(p.tp.partition), 10), in.group)
}
