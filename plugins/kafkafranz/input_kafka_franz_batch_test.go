package kafkafranz

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestInputDigits(t *testing.T) {
	for _, v := range []int64{0, 1, 9, 10, 99, 100, 12345, 1767225600123, math.MaxInt64, -1, -10, -999, math.MinInt64 + 1, math.MinInt64} {
		if got, want := kfiDigits(v), len(strconv.FormatInt(v, 10)); got != want {
			t.Errorf("kfiDigits(%d) = %d, want %d", v, got, want)
		}
	}
}

// kfiBatchOfRecords takes a batch of n records with keys over three
// partitions, as the poll loop hands them to the tracker.
func kfiBatchOfRecords(n int) []kfiClaim {
	tr := newKfiTracker(n, kfiTestNoBudget)
	ts := time.UnixMilli(1767225600123)
	for p := range int32(3) {
		tp := kfiTopicPartition{"sp.txn.ingested", p}
		tr.assign(tp)
		var recs []*kgo.Record
		for o := range int64(n / 3) {
			recs = append(recs, &kgo.Record{
				Topic: tp.topic, Partition: p, Offset: o*997 + int64(p), Timestamp: ts.Add(time.Duration(o) * time.Millisecond),
				Key: []byte("ws-" + strconv.Itoa(int(p)) + ":acct-" + strconv.FormatInt(o, 10)), Value: []byte(`{"v":1}`),
			})
		}
		// One record without a key, one with a header.
		recs[0].Key = nil
		recs[1].Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}}
		tr.add(tp, recs, int64(len(recs)))
	}
	return tr.take(0, 0, time.Now())
}

// TestInputBatchMetadataOfEveryRecord: each message of a batch carries its
// own record's key, offset and timestamp, which the batch's messages share
// one buffer for.
func TestInputBatchMetadataOfEveryRecord(t *testing.T) {
	claims := kfiBatchOfRecords(300)
	in := &kafkaFranzInput{}
	batch := in.batchOf(claims)
	i := 0
	for _, c := range claims {
		for _, r := range c.records {
			m := batch[i]
			i++
			want := map[string]string{
				kfiMetaKey:       string(r.Key),
				kfiMetaTopic:     r.Topic,
				kfiMetaPartition: strconv.Itoa(int(r.Partition)),
				kfiMetaOffset:    strconv.FormatInt(r.Offset, 10),
				kfiMetaTimestamp: strconv.FormatInt(r.Timestamp.UnixMilli(), 10),
			}
			for _, h := range r.Headers {
				want[h.Key] = string(h.Value)
			}
			for k, v := range want {
				if got, ok := m.MetaGet(k); !ok || got != v {
					t.Fatalf("record %s/%d@%d: metadata %s = %q (present %v), want %q", r.Topic, r.Partition, r.Offset, k, got, ok, v)
				}
			}
		}
	}
	if i != len(batch) || i != 300 {
		t.Fatalf("%d messages for %d records, want 300", len(batch), i)
	}
}

// TestInputBatchAllocationsPerRecord guards the work of building a batch:
// the message, its context and its metadata map and values, and no string
// a record for the key, offset and timestamp (8 allocations a record today,
// 11 with a string each).
func TestInputBatchAllocationsPerRecord(t *testing.T) {
	const n = 3000
	claims := kfiBatchOfRecords(n)
	in := &kafkaFranzInput{}
	allocs := testing.AllocsPerRun(5, func() { in.batchOf(claims) })
	t.Logf("%.2f allocations a record", allocs/n)
	if per := allocs / n; per > 8.5 {
		t.Fatalf("batchOf allocates %.2f times a record, want at most 8.5", per)
	}
}
