package kafka

import (
	"context"
	"errors"
	"slices"
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
			msg.MetaSetMut(kfiMetaTopic, c.part.topicMeta)
			msg.MetaSetMut(kfiMetaPartition, c.part.partitionMeta)
			msg.MetaSetMut(kfiMetaOffset, strconv.FormatInt(r.Offset, 10))
			msg.MetaSetMut(kfiMetaTimestamp, strconv.FormatInt(r.Timestamp.UnixMilli(), 10))
			batch = append(batch, msg)
		}
	}
	return batch
}

// ackFunc settles a handed-out batch. A *service.BatchError that names some
// messages settles each claim on its own: a claim with a failed message is
// delivered again (after the wait the error asks for, retry.AfterError), the
// others are acked and their offsets committed. So an output that stored
// some partitions of a batch and hands back the ones that must wait holds
// back only those.
func (in *kafkaFranzInput) ackFunc(claims []kfiClaim) service.AckFunc {
	var once sync.Once
	return func(_ context.Context, err error) error {
		once.Do(func() { in.resolve(claims, err) })
		return nil
	}
}

// failedClaims says which claims hold a message a batch error failed. A
// failed message names its claim by its context, which derives from its
// partition's lease however the pipeline reshaped the batch (an indexer of
// the whole batch cost five allocations a record to build, on every batch,
// for the rare partial failure). A failed message that does not name a
// claim of the batch (a processor made it anew) fails every claim: its
// records are delivered again, never skipped.
func failedClaims(claims []kfiClaim, bErr *service.BatchError) []bool {
	failed := make([]bool, len(claims))
	all := false
	bErr.WalkMessages(func(_ int, m *service.Message, err error) bool {
		if err == nil {
			return true
		}
		p := partitionOfMessage(m.Context())
		k := slices.IndexFunc(claims, func(c kfiClaim) bool { return c.part == p })
		if p == nil || k < 0 {
			all = true
			return false
		}
		failed[k] = true
		return true
	})
	if all {
		for k := range failed {
			failed[k] = true
		}
	}
	return failed
}

func (in *kafkaFranzInput) resolve(claims []kfiClaim, ackErr error) {
	failed := func(int) bool { return ackErr != nil }
	var bErr *service.BatchError
	if errors.As(ackErr, &bErr) && bErr.IndexedErrors() > 0 {
		claimFailed := failedClaims(claims, bErr)
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
