package pgcopyupsert

import (
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/eventmsg"
)

// BenchmarkCopyRowContentHash: what the content hash (event.ContentHash,
// written with every row for the ingest API's resend check) costs in the
// COPY encoding of a transaction. Each round encodes a chunk of whole rows
// as the persister does, hash included, then hashes the same chunk alone,
// so a machine whose load changes during the run slows both alike; it
// reports both per row and the hash's share of the row (hash-%-of-row).
// The realistic rows are the persister tests' shape; a kilobyte of
// metadata shows how the hash grows with the content.
func BenchmarkCopyRowContentHash(b *testing.B) {
	batch := realisticBatch(b, event.UUID{1}, 0, 1000)
	envs := make([]*event.Envelope, len(batch))
	for i, m := range batch {
		envs[i], _ = eventmsg.Attached(m)
	}
	large := make([]*event.Envelope, len(envs))
	meta := []byte(`{"note":"` + strings.Repeat("x", 1000) + `"}`)
	for i, e := range envs {
		c := *e
		c.Metadata = meta
		large[i] = &c
	}
	for _, shape := range []struct {
		name string
		envs []*event.Envelope
	}{{"realistic", envs}, {"metadata_1KiB", large}} {
		b.Run(shape.name, func(b *testing.B) {
			buf := newCopyRowsBuf(len(shape.envs))
			defer buf.release()
			var rowTime, hashTime time.Duration
			var sink byte
			for done := 0; done < b.N; {
				n := min(len(shape.envs), b.N-done)
				start := time.Now()
				buf.b = append(buf.b[:0], copyBinaryHeader...)
				for _, e := range shape.envs[:n] {
					r := txnRow{e: e, account: e.ID, customer: e.ID, counterparty: e.ID, hasCounterparty: e.Counterparty != nil}
					if err := buf.appendTransaction(r); err != nil {
						b.Fatal(err)
					}
				}
				mid := time.Now()
				for _, e := range shape.envs[:n] {
					h := event.ContentHash(e)
					sink ^= h[0]
				}
				rowTime, hashTime = rowTime+mid.Sub(start), hashTime+time.Since(mid)
				done += n
			}
			_ = sink
			b.ReportMetric(float64(rowTime.Nanoseconds())/float64(b.N), "row-ns")
			b.ReportMetric(float64(hashTime.Nanoseconds())/float64(b.N), "hash-ns")
			b.ReportMetric(100*float64(hashTime)/float64(rowTime), "hash-%-of-row")
		})
	}
}
