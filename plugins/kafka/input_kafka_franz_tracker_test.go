package kafka

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
			tr := newKfiTracker(tc.limit)
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
	tr := newKfiTracker(5)
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
	tr := newKfiTracker(4)
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
			tr := newKfiTracker(10)
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
	tr := newKfiTracker(2)
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
