package kafkafranz

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/ownership"
)

// Nacked records wait before they are handed out again, so that an output
// that rejects everything does not spin the input. The wait doubles per
// consecutive nack of a partition, up to kfiNackBackoffMax.
const (
	kfiNackBackoffMin = 100 * time.Millisecond
	kfiNackBackoffMax = 5 * time.Second
)

// kfiTopicPartition names one partition of one topic.
type kfiTopicPartition struct {
	topic     string
	partition int32
}

// kfiPartition is the input's checkpoint for one partition it currently
// owns. A new value is made on every assignment, so a batch that remembers
// the value it was cut from can tell whether its partition has been revoked
// (and perhaps assigned again) since: its ack is then ignored.
//
// Invariant: pending and inFlight together hold the partition's records from
// ackedNext onwards in offset order, inFlight first. At most one batch of a
// partition is out at a time, which is what keeps the partition in order
// however many batches the output has in flight.
type kfiPartition struct {
	tp kfiTopicPartition

	pending  []*kgo.Record // fetched, not yet handed out
	inFlight []*kgo.Record // handed out in one batch, not yet acked
	claimSeq uint64        // identifies the batch now in flight

	ackedNext  int64 // offset after the highest contiguously acked record; -1 before the first ack
	ackedEpoch int32 // leader epoch of that record, for the commit
	committed  int64 // highest offset committed by this input; -1 none
	firstSeen  int64 // offset of the first record fetched; -1 none (the position before any ack)
	highWater  int64 // partition's high watermark as last seen; -1 unknown
	paused     bool  // fetching paused because checkpoint_limit records are unacked
	revoking   bool  // being revoked: nothing more is handed out

	nacks     int       // consecutive nacks, for the backoff
	notBefore time.Time // nacked records are not handed out before this

	// lease is the context every message cut from this assignment carries:
	// it ends with ownership.ErrRevoked when the partition is dropped (after
	// revoke_wait, or lost), and with ownership.ErrShutdown when the input
	// stops, so an output retrying one of its batches stops too.
	lease    context.Context
	endLease context.CancelCauseFunc

	// The partition's coordinates as metadata values, boxed once per
	// assignment: boxing a string into a metadata value allocates, and
	// every message of the partition carries the same two.
	topicMeta, partitionMeta any
}

// kfiPartitionKey is the context key under which a message's lease carries
// its *kfiPartition, so an ack names the partitions of the messages an
// output failed without an indexer of the whole batch.
type kfiPartitionKey struct{}

// partitionOfMessage is the partition whose lease ctx derives from, or nil
// for a context not cut from this input.
func partitionOfMessage(ctx context.Context) *kfiPartition {
	p, _ := ctx.Value(kfiPartitionKey{}).(*kfiPartition)
	return p
}

// unacked is how many records of the partition the input holds.
func (p *kfiPartition) unacked() int { return len(p.pending) + len(p.inFlight) }

// position is the offset the group has processed up to, or -1 when unknown.
func (p *kfiPartition) position() int64 {
	if p.ackedNext >= 0 {
		return p.ackedNext
	}
	return p.firstSeen
}

// kfiClaim is the part of a handed-out batch that came from one partition.
type kfiClaim struct {
	part    *kfiPartition
	seq     uint64
	records []*kgo.Record
}

// kfiCommit is an offset ready to be committed for a partition.
type kfiCommit struct {
	part   *kfiPartition
	offset int64
	epoch  int32
}

// kfiTracker holds the checkpoints of every owned partition. It is not safe
// for concurrent use: the input guards it with its mutex.
type kfiTracker struct {
	limit int // checkpoint_limit: most unacked records held per partition

	// budget is max_buffered_records: the poll loop adds no more records
	// while buffered (pending records of all partitions) reaches it. Only a
	// nack, which must not lose records, can take buffered past it.
	budget       int
	buffered     int
	peakBuffered int // highest buffered after an add, for tests
	parts        map[kfiTopicPartition]*kfiPartition

	order []kfiTopicPartition // sorted keys of parts, for a fair round robin
	next  int                 // where the next batch starts in order

	base context.Context // the partitions' leases derive from it
}

func newKfiTracker(limit, budget int) *kfiTracker {
	return &kfiTracker{limit: limit, budget: budget, parts: map[kfiTopicPartition]*kfiPartition{}, base: context.Background()}
}

// room is how many more records may be added within the budget.
func (t *kfiTracker) room() int { return max(t.budget-t.buffered, 0) }

// assign starts tracking a partition unless it is tracked already.
func (t *kfiTracker) assign(tp kfiTopicPartition) *kfiPartition {
	if p, ok := t.parts[tp]; ok {
		return p
	}
	p := &kfiPartition{tp: tp, ackedNext: -1, ackedEpoch: -1, committed: -1, firstSeen: -1, highWater: -1}
	lease, end := context.WithCancelCause(t.base)
	p.lease, p.endLease = context.WithValue(lease, kfiPartitionKey{}, p), end
	p.topicMeta, p.partitionMeta = tp.topic, strconv.FormatInt(int64(tp.partition), 10)
	t.parts[tp] = p
	t.reorder()
	return p
}

// drop forgets a partition: its buffered records are discarded (the next
// owner reads them again from the committed offset) and acks for batches cut
// from it are ignored from now on.
func (t *kfiTracker) drop(tp kfiTopicPartition) *kfiPartition {
	p, ok := t.parts[tp]
	if !ok {
		return nil
	}
	delete(t.parts, tp)
	p.endLease(ownership.ErrRevoked)
	t.buffered -= len(p.pending)
	t.reorder()
	return p
}

func (t *kfiTracker) reorder() {
	t.order = t.order[:0]
	for tp := range t.parts {
		t.order = append(t.order, tp)
	}
	sort.Slice(t.order, func(i, j int) bool {
		if t.order[i].topic != t.order[j].topic {
			return t.order[i].topic < t.order[j].topic
		}
		return t.order[i].partition < t.order[j].partition
	})
	if t.next >= len(t.order) {
		t.next = 0
	}
}

// add appends freshly fetched records of one partition, which the client
// hands over in offset order and exactly once per assignment.
func (t *kfiTracker) add(tp kfiTopicPartition, records []*kgo.Record, highWater int64) *kfiPartition {
	p := t.assign(tp)
	if len(records) > 0 && p.firstSeen < 0 && p.ackedNext < 0 {
		p.firstSeen = records[0].Offset
	}
	p.pending = append(p.pending, records...)
	t.buffered += len(records)
	t.peakBuffered = max(t.peakBuffered, t.buffered)
	if highWater > p.highWater {
		p.highWater = highWater
	}
	return p
}

// eligible reports whether the partition may contribute to the next batch.
func (t *kfiTracker) eligible(p *kfiPartition, now time.Time) bool {
	return len(p.inFlight) == 0 && len(p.pending) > 0 && !p.revoking && !now.Before(p.notBefore)
}

// ready counts the records and bytes the next batch could take now, and
// whether more could still become ready without an ack: only a partition
// with nothing in flight and room below the limit can fetch records that
// would be eligible, and only while the budget has room.
func (t *kfiTracker) ready(now time.Time) (records, bytes int, canGrow bool) {
	for _, tp := range t.order {
		p := t.parts[tp]
		if t.eligible(p, now) {
			n := min(len(p.pending), t.limit)
			records += n
			for _, r := range p.pending[:n] {
				bytes += len(r.Value)
			}
		}
		if len(p.inFlight) == 0 && p.unacked() < t.limit && !p.revoking && !now.Before(p.notBefore) && t.buffered < t.budget {
			canGrow = true
		}
	}
	return records, bytes, canGrow
}

// earliestRetry is when the first nack-delayed partition becomes eligible,
// or the zero time when none waits.
func (t *kfiTracker) earliestRetry(now time.Time) time.Time {
	var at time.Time
	for _, p := range t.parts {
		if len(p.inFlight) == 0 && len(p.pending) > 0 && now.Before(p.notBefore) {
			if at.IsZero() || p.notBefore.Before(at) {
				at = p.notBefore
			}
		}
	}
	return at
}

// take cuts the next batch: from each eligible partition in round-robin
// order, its oldest pending records, at most limit of them, until maxCount
// records or maxBytes bytes are taken (0 means no bound). Each partition
// taken from is then in flight until its claim is resolved.
func (t *kfiTracker) take(maxCount, maxBytes int, now time.Time) []kfiClaim {
	var (
		claims []kfiClaim
		count  int
		bytes  int
	)
	n, start := len(t.order), t.next
	for i := 0; i < n; i++ {
		if maxCount > 0 && count >= maxCount || maxBytes > 0 && bytes >= maxBytes {
			break
		}
		idx := (start + i) % n
		p := t.parts[t.order[idx]]
		if !t.eligible(p, now) {
			continue
		}
		k := min(len(p.pending), t.limit)
		if maxCount > 0 {
			k = min(k, maxCount-count)
		}
		if maxBytes > 0 {
			// Stop at the record that reaches the byte bound, keeping at
			// least one so a record larger than the bound still moves.
			for j := 0; j < k; j++ {
				bytes += len(p.pending[j].Value)
				if bytes >= maxBytes {
					k = j + 1
					break
				}
			}
		}
		records := p.pending[:k:k]
		p.pending = p.pending[k:]
		t.buffered -= k
		p.inFlight = records
		p.claimSeq++
		claims = append(claims, kfiClaim{part: p, seq: p.claimSeq, records: records})
		count += k
		t.next = (idx + 1) % n
	}
	return claims
}

// resolve settles a handed-out batch. It returns the partitions whose claim
// was still current (the ones a late ack after a revoke is not).
//
// On success the partition's acked offset moves past the claim. On failure
// the claim's records go back in front of the partition's pending records,
// so the same records are handed out again, before anything later.
func (t *kfiTracker) resolve(claims []kfiClaim, failed bool, now time.Time) []*kfiPartition {
	return t.resolveEach(claims, func(int) bool { return failed }, 0, now)
}

// resolveEach is resolve with each claim's outcome its own (failed(i) for
// claims[i]), as an output that stored some partitions of a batch and handed
// the others back reports it; a failed claim waits at least wait (the
// output's backoff) before it is handed out again.
func (t *kfiTracker) resolveEach(claims []kfiClaim, failed func(i int) bool, wait time.Duration, now time.Time) []*kfiPartition {
	var current []*kfiPartition
	for i, c := range claims {
		p := c.part
		if t.parts[p.tp] != p || len(p.inFlight) == 0 || p.claimSeq != c.seq {
			continue
		}
		current = append(current, p)
		p.inFlight = nil
		if !failed(i) {
			last := c.records[len(c.records)-1]
			p.ackedNext = last.Offset + 1
			p.ackedEpoch = last.LeaderEpoch
			p.nacks = 0
			p.notBefore = time.Time{}
			continue
		}
		back := make([]*kgo.Record, 0, len(c.records)+len(p.pending))
		back = append(back, c.records...)
		p.pending = append(back, p.pending...)
		t.buffered += len(c.records)
		p.notBefore = now.Add(max(kfiNackBackoff(p.nacks), wait))
		p.nacks++
	}
	return current
}

func kfiNackBackoff(nacks int) time.Duration {
	d := kfiNackBackoffMin
	for i := 0; i < nacks && d < kfiNackBackoffMax; i++ {
		d *= 2
	}
	return min(d, kfiNackBackoffMax)
}

// commits lists, for the given partitions (all when nil), the acked offsets
// not committed yet.
func (t *kfiTracker) commits(only map[kfiTopicPartition]bool) []kfiCommit {
	var out []kfiCommit
	for _, tp := range t.order {
		if only != nil && !only[tp] {
			continue
		}
		p := t.parts[tp]
		if p.ackedNext > p.committed {
			out = append(out, kfiCommit{part: p, offset: p.ackedNext, epoch: p.ackedEpoch})
		}
	}
	return out
}

// inFlight reports whether any of the given partitions has a batch out.
func (t *kfiTracker) inFlight(tps []kfiTopicPartition) int {
	n := 0
	for _, tp := range tps {
		if p, ok := t.parts[tp]; ok && len(p.inFlight) > 0 {
			n++
		}
	}
	return n
}
