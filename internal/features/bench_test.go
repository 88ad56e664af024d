package features

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// realistic makes n events of a live stream over accounts accounts: 90 %
// transactions (most with a customer and a counterparty out of 20 per
// account), 10 % account events, occurred_at advancing about as fast as
// the stream runs (one per 40 µs of event time, 25,000/s).
func realistic(n, accounts int, start time.Time, seed uint64) []*event.Envelope {
	r := rand.New(rand.NewPCG(seed, 1))
	types := []string{"sign_in", "sign_in", "sign_in", "failed_otp", "device_change", "sim_swap", "profile_change"}
	out := make([]*event.Envelope, n)
	for i := range out {
		at := start.Add(time.Duration(i) * 40 * time.Microsecond).Truncate(time.Second)
		a := r.IntN(accounts)
		acct, cust := fmt.Sprintf("acc-%d", a), fmt.Sprintf("cust-%d", a/2)
		ext := fmt.Sprintf("e-%d-%d", seed, i)
		if r.IntN(10) == 0 {
			out[i] = &event.Envelope{V: 1, Kind: event.KindAccountEvent, ID: event.AccountEventID(testWorkspace, ext, at),
				WorkspaceID: testWorkspace, ExternalID: ext, OccurredAt: at, CustomerExternalID: cust,
				Type: types[r.IntN(len(types))]}
			continue
		}
		dir := event.DirectionOut
		if r.IntN(3) == 0 {
			dir = event.DirectionIn
		}
		e := txn(ext, acct, cust, "", fmt.Sprintf("%d.%02d", r.IntN(2000), r.IntN(100)), "EUR", dir, at)
		if r.IntN(10) < 8 {
			e.Counterparty = &event.Counterparty{Fingerprint: fmt.Sprintf("fp-%d-%d", a, r.IntN(20))}
		}
		out[i] = e
	}
	return out
}

// BenchmarkApply measures Apply on batches of 1000 events against the local
// Redis: events/s is the figure to compare with the stream's target.
func BenchmarkApply(b *testing.B) { benchmarkApply(b, targets[0]) }

// BenchmarkApplyCluster is BenchmarkApply on the three-master Cluster.
func BenchmarkApplyCluster(b *testing.B) { benchmarkApply(b, targets[1]) }

func benchmarkApply(b *testing.B, tg target) {
	c, prefix, _ := open(b, tg)
	s := New(c, Options{KeyPrefix: prefix})
	ctx := context.Background()
	const batch = 1000
	evs := realistic(200*batch, 10000, time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC), 1)
	if _, err := s.Apply(ctx, evs[:batch]); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	n := 0
	for i := 0; i < b.N; i++ {
		off := ((i + 1) % (len(evs) / batch)) * batch
		if _, err := s.Apply(ctx, evs[off:off+batch]); err != nil {
			b.Fatal(err)
		}
		n += batch
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "events/s")
}
