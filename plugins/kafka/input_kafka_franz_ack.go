package kafka

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/lease"
	"github.com/speculapro/speculapro/internal/retry"
)

func (in *kafkaFranzInput) batchOf(claims []kfiClaim) service.MessageBatch {
	n := 0
	for _, c := range claims {
		n += len(c.records)
	}
	batch := make(service.MessageBatch, 0, n)
	for _, c := range claims {
		for _, r := range c.records {
			msg := service.NewMessage(r.Value).WithContext(c.part.lease)
			// Headers first, so a header cannot pass itself off as one
			// of the record's coordinates.
			for _, h := range r.Headers {
				msg.MetaSetMut(h.Key, string(h.Value))
			}
			msg.MetaSetMut(kfiMetaKey, string(r.Key))
			msg.MetaSetMut(kfiMetaTopic, r.Topic)
			msg.MetaSetMut(kfiMetaPartition, strconv.FormatInt(int64(r.Partition), 10))
			msg.MetaSetMut(kfiMetaOffset, strconv.FormatInt(r.Offset, 10))
			msg.MetaSetMut(kfiMetaTimestamp, strconv.FormatInt(r.Timestamp.UnixMilli(), 10))
			batch = append(batch, msg)
		}
	}
	return batch
}

// ackFunc settles a handed-out batch; idx is the indexer taken as it was
// handed out. A *service.BatchError that names some messages settles each
// claim on its own: a claim with a failed message is delivered again (after
// the wait the error asks for, retry.AfterError), the others are acked and
// their offsets committed. So an output that stored some partitions of a
// batch and handed back the ones that must wait holds back only those.
func (in *kafkaFranzInput) ackFunc(claims []kfiClaim, idx *service.Indexer) service.AckFunc {
	var once sync.Once
	return func(_ context.Context, err error) error {
		once.Do(func() { in.resolve(claims, idx, err) })
		return nil
	}
}

func (in *kafkaFranzInput) resolve(claims []kfiClaim, idx *service.Indexer, ackErr error) {
	failed := func(int) bool { return ackErr != nil }
	var bErr *service.BatchError
	if errors.As(ackErr, &bErr) && bErr.IndexedErrors() > 0 {
		// Claim k holds the messages [ends[k-1], ends[k]).
		ends := make([]int, len(claims))
		n := 0
		for k, c := range claims {
			n += len(c.records)
			ends[k] = n
		}
		claimFailed := make([]bool, len(claims))
		bErr.WalkMessagesIndexedBy(idx, func(i int, _ *service.Message, err error) bool {
			if err != nil && i >= 0 && i < n {
				claimFailed[sort.SearchInts(ends, i+1)] = true
			}
			return true
		})
		failed = func(k int) bool { return claimFailed[k] }
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	current := in.tracker.resolveEach(claims, failed, retry.WaitOf(ackErr), time.Now())
	for _, p := range current {
		in.maybeResumeLocked(p)
		in.reportLagLocked(p)
	}
	if ackErr != nil && len(current) > 0 && !in.closing && !lease.Ended(ackErr) && in.running.Err() == nil {
		in.log.Warnf("kafka_franz: batch of group %s nacked, delivering its records again: %v", in.group, ackErr)
	}
	in.notifyLocked()
}

// notifyLocked wakes everyone waiting for the tracker to change.
func (in *kafkaFranzInput) notifyLocked() {
	close(in.changed)
	in.changed = make(chan struct{})
}

func (in *kafkaFranzInput) maybeResumeLocked(p *kfiPartition) {
	if p.paused && p.unacked() < in.checkpointLimit && in.client != nil {
		in.client.ResumeFetchPartitions(map[string][]int32{p.tp.topic: {p.tp.partition}})
		p.paused = false
	}
}
