package kafkafranz

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func kfiRecords(topic string, partition int32, from, to int64) []*kgo.Record {
	var out []*kgo.Record
	for o := from; o < to; o++ {
		out = append(out, &kgo.Record{Topic: topic, Partition: partition, Offset: o, Value: []byte("0123456789")})
	}
	return out
}

func kfiOffsets(c kfiClaim) []int64 {
	var out []int64
	for _, r := range c.records {
		out = append(out, r.Offset)
	}
	return out
}

func TestInputTrackerTake(t *testing.T) {
	tp0 := kfiTopicPartition{"t", 0}
	tp1 := kfiTopicPartition{"t", 1}
	tests := []struct {
		name     string
		limit    int
		count    int
		bytes    int
		pending  map[kfiTopicPartition]int64 // records per partition from offset 0
		wantTake map[kfiTopicPartition]int   // records per partition in the batch
	}{
		{"limit caps each partition", 3, 0, 0, map[kfiTopicPartition]int64{tp0: 10, tp1: 10}, map[kfiTopicPartition]int{tp0: 3, tp1: 3}},
		{"count caps the batch", 10, 12, 0, map[kfiTopicPartition]int64{tp0: 10, tp1: 10}, map[kfiTopicPartition]int{tp0: 10, tp1: 2}},
		{"byte bound stops at the record reaching it", 10, 0, 25, map[kfiTopicPartition]int64{tp0: 10, tp1: 10}, map[kfiTopicPartition]int{tp0: 3}},
		{"oversized record still moves", 10, 0, 5, map[kfiTopicPartition]int64{tp0: 10}, map[kfiTopicPartition]int{tp0: 1}},
		{"empty partition contributes nothing", 10, 0, 0, map[kfiTopicPartition]int64{tp0: 4, tp1: 0}, map[kfiTopicPartition]int{tp0: 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newKfiTracker(tc.limit, kfiTestNoBudget)
			for tp, n := range tc.pending {
				tr.assign(tp)
				tr.add(tp, kfiRecords(tp.topic, tp.partition, 0, n), n)
			}
			claims := tr.take(tc.count, tc.bytes, time.Now())
			got := map[kfiTopicPartition]int{}
			for _, c := range claims {
				got[c.part.tp] += len(c.records)
				for i, off := range kfiOffsets(c) {
					if off != int64(i) {
						t.Fatalf("%v: record %d has offset %d, want the oldest first", c.part.tp, i, off)
					}
				}
			}
			if len(got) != len(tc.wantTake) {
				t.Fatalf("took %v, want %v", got, tc.wantTake)
			}
			for tp, n := range tc.wantTake {
				if got[tp] != n {
					t.Fatalf("took %v, want %v", got, tc.wantTake)
				}
			}
		})
	}
}

func TestInputTrackerOnePartitionBatchInFlight(t *testing.T) {
	tp := kfiTopicPartition{"t", 0}
	tr := newKfiTracker(5, kfiTestNoBudget)
	tr.add(tp, kfiRecords("t", 0, 0, 20), 20)
	now := time.Now()
	first := tr.take(0, 0, now)
	if len(first) != 1 || len(first[0].records) != 5 {
		t.Fatalf("first take = %d claims, want one of 5 records", len(first))
	}
	if again := tr.take(0, 0, now); len(again) != 0 {
		t.Fatalf("partition handed out again while its batch is in flight: %v", kfiOffsets(again[0]))
	}
	if n, _, _ := tr.ready(now); n != 0 {
		t.Fatalf("ready = %d records while the only partition is in flight, want 0", n)
	}
	if c := tr.commits(nil); len(c) != 0 {
		t.Fatalf("commit offered before any ack: %+v", c)
	}
	tr.resolve(first, false, now)
	c := tr.commits(nil)
	if len(c) != 1 || c[0].offset != 5 {
		t.Fatalf("after ack commits = %+v, want offset 5", c)
	}
	next := tr.take(0, 0, now)
	if len(next) != 1 || next[0].records[0].Offset != 5 {
		t.Fatalf("after ack next batch starts at %v, want 5", kfiOffsets(next[0]))
	}
}

func TestInputTrackerNackRedeliversSameRecordsFirst(t *testing.T) {
	tp := kfiTopicPartition{"t", 0}
	tr := newKfiTracker(4, kfiTestNoBudget)
	tr.add(tp, kfiRecords("t", 0, 0, 10), 10)
	now := time.Now()
	first := tr.take(0, 0, now)
	tr.resolve(first, true, now)
	if got := tr.take(0, 0, now); len(got) != 0 {
		t.Fatalf("nacked partition handed out before its backoff: %v", kfiOffsets(got[0]))
	}
	if at := tr.earliestRetry(now); !at.Equal(now.Add(kfiNackBackoffMin)) {
		t.Fatalf("earliestRetry = %v, want now+%v", at.Sub(now), kfiNackBackoffMin)
	}
	later := now.Add(kfiNackBackoffMin)
	again := tr.take(0, 0, later)
	if len(again) != 1 {
		t.Fatalf("no redelivery after the backoff")
	}
	if got, want := kfiOffsets(again[0]), []int64{0, 1, 2, 3}; !slices.Equal(got, want) {
		t.Fatalf("redelivered %v, want %v", got, want)
	}
	if c := tr.commits(nil); len(c) != 0 {
		t.Fatalf("nacked records offered for commit: %+v", c)
	}
	tr.resolve(again, false, later)
	rest := tr.take(0, 0, later)
	if got, want := kfiOffsets(rest[0]), []int64{4, 5, 6, 7}; !slices.Equal(got, want) {
		t.Fatalf("after the redelivered batch got %v, want %v", got, want)
	}
}

func TestInputTrackerNackBackoffGrows(t *testing.T) {
	tests := []struct {
		nacks int
		want  time.Duration
	}{
		{0, 100 * time.Millisecond},
		{1, 200 * time.Millisecond},
		{3, 800 * time.Millisecond},
		{10, kfiNackBackoffMax},
		{1000, kfiNackBackoffMax},
	}
	for _, tc := range tests {
		if got := kfiNackBackoff(tc.nacks); got != tc.want {
			t.Errorf("kfiNackBackoff(%d) = %v, want %v", tc.nacks, got, tc.want)
		}
	}
}

func TestInputTrackerAckAfterRevokeIgnored(t *testing.T) {
	tp := kfiTopicPartition{"t", 0}
	tests := []struct {
		name     string
		reassign bool // the partition comes back to this member before the ack
	}{
		{"revoked", false},
		{"revoked and assigned again", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newKfiTracker(10, kfiTestNoBudget)
			tr.add(tp, kfiRecords("t", 0, 0, 5), 5)
			now := time.Now()
			claims := tr.take(0, 0, now)
			tr.drop(tp)
			if tc.reassign {
				tr.assign(tp)
				tr.add(tp, kfiRecords("t", 0, 0, 5), 5)
			}
			if cur := tr.resolve(claims, false, now); len(cur) != 0 {
				t.Fatalf("late ack was applied to %d partitions", len(cur))
			}
			if c := tr.commits(nil); len(c) != 0 {
				t.Fatalf("late ack made offsets committable: %+v", c)
			}
			if tc.reassign {
				next := tr.take(0, 0, now)
				if len(next) != 1 || next[0].records[0].Offset != 0 {
					t.Fatalf("reassigned partition does not start over at 0")
				}
			}
		})
	}
}

func TestInputTrackerRoundRobin(t *testing.T) {
	tr := newKfiTracker(2, kfiTestNoBudget)
	for p := int32(0); p < 3; p++ {
		tr.add(kfiTopicPartition{"t", p}, kfiRecords("t", p, 0, 10), 10)
	}
	now := time.Now()
	seen := map[int32]int{}
	for i := 0; i < 3; i++ {
		claims := tr.take(2, 0, now)
		if len(claims) != 1 {
			t.Fatalf("take %d: %d claims, want 1", i, len(claims))
		}
		seen[claims[0].part.tp.partition]++
	}
	if len(seen) != 3 {
		t.Fatalf("three batches served partitions %v, want each of 0,1,2 once", seen)
	}
}

// kfiTestNoBudget is a max_buffered_records no test reaches, for tests about
// something else.
const kfiTestNoBudget = 1 << 30

// TestInputTrackerBudget checks the accounting behind max_buffered_records:
// room shrinks as records are fetched and grows as they are handed out or
// dropped, a full budget stops a batch from waiting for more, and a nacked
// batch goes back in front of its partition even when the budget is full.
func TestInputTrackerBudget(t *testing.T) {
	tp0 := kfiTopicPartition{"t", 0}
	tp1 := kfiTopicPartition{"t", 1}
	tr := newKfiTracker(10, 12)
	now := time.Now()
	tr.add(tp0, kfiRecords("t", 0, 0, 8), 8)
	if got := tr.room(); got != 4 {
		t.Fatalf("room after 8 of 12 = %d, want 4", got)
	}
	if _, _, canGrow := tr.ready(now); !canGrow {
		t.Fatalf("ready says nothing more can arrive with room in the budget")
	}
	tr.add(tp1, kfiRecords("t", 1, 0, 4), 4)
	if got := tr.room(); got != 0 {
		t.Fatalf("room with the budget full = %d, want 0", got)
	}
	if records, _, canGrow := tr.ready(now); records != 12 || canGrow {
		t.Fatalf("ready with the budget full = %d records, canGrow %v; want 12, false", records, canGrow)
	}

	first := tr.take(5, 0, now) // 5 records of partition 0
	if got := tr.room(); got != 5 {
		t.Fatalf("room after handing out 5 = %d, want 5", got)
	}
	tr.add(tp0, kfiRecords("t", 0, 8, 13), 13)
	if got := tr.room(); got != 0 {
		t.Fatalf("room after refilling = %d, want 0", got)
	}
	tr.resolve(first, true, now)
	if got := tr.buffered; got != 17 {
		t.Fatalf("buffered after a nack over a full budget = %d, want 17 (nothing dropped)", got)
	}
	again := tr.take(0, 0, now.Add(kfiNackBackoffMax))
	var redelivered []int64
	for _, c := range again {
		if c.part.tp == tp0 {
			redelivered = kfiOffsets(c)
		}
	}
	if want := []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(redelivered, want) {
		t.Fatalf("after the nack partition 0 handed out %v, want %v", redelivered, want)
	}
	if got := tr.buffered; got != 3 {
		t.Fatalf("buffered after handing out 14 of 17 = %d, want 3", got)
	}
	tr.drop(tp0)
	if got := tr.buffered; got != 0 {
		t.Fatalf("buffered after dropping partition 0 with its 3 pending = %d, want 0", got)
	}
}
