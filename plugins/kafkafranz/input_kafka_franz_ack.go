package kafkafranz

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/ownership"
	"github.com/speculapro/speculapro/internal/retry"
)

func (in *kafkaFranzInput) batchOf(claims []kfiClaim) service.MessageBatch {
	n, size := 0, 0
	for _, c := range claims {
		n += len(c.records)
		for _, r := range c.records {
			size += len(r.Key) + kfiDigits(r.Offset) + kfiDigits(r.Timestamp.UnixMilli())
		}
	}
	// Every record's key, offset and timestamp as text, in one buffer for
	// the batch, exactly its size, read as one string that is never written
	// again: a string each (string(key) and two strconv.FormatInt) were
	// three allocations of the input's eleven a record, each rounded up to
	// its size class. The metadata holds substrings of it, so the buffer
	// lives as long as the last of the batch's messages.
	buf := make([]byte, 0, size)
	for _, c := range claims {
		for _, r := range c.records {
			buf = append(buf, r.Key...)
			buf = strconv.AppendInt(buf, r.Offset, 10)
			buf = strconv.AppendInt(buf, r.Timestamp.UnixMilli(), 10)
		}
	}
	text := unsafe.String(unsafe.SliceData(buf), len(buf))
	at := 0
	next := func(end int) string {
		s := text[at:end]
		at = end
		return s
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
			key := next(at + len(r.Key))
			offset := next(at + kfiDigits(r.Offset))
			ts := next(at + kfiDigits(r.Timestamp.UnixMilli()))
			msg.MetaSetMut(kfiMetaKey, key)
			msg.MetaSetMut(kfiMetaTopic, c.part.topicMeta)
			msg.MetaSetMut(kfiMetaPartition, c.part.partitionMeta)
			msg.MetaSetMut(kfiMetaOffset, offset)
			msg.MetaSetMut(kfiMetaTimestamp, ts)
			batch = append(batch, msg)
		}
	}
	return batch
}

// kfiDigits is how many bytes strconv.AppendInt(nil, v, 10) writes.
func kfiDigits(v int64) int {
	n := 1
	if v < 0 {
		n++
		if v == math.MinInt64 {
			return 20
		}
		v = -v
	}
	for v >= 10 {
		v /= 10
		n++
	}
	return n
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
	if ackErr != nil && len(current) > 0 && !in.closing && !ownership.Ended(ackErr) && in.running.Err() == nil {
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
