package features

import (
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/loadgen"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

// BenchmarkMemoryApply is the running totals' computation alone, as a
// backtest runs it (Memory, no Redis): the history BenchmarkRulesBacktest
// stores (loadgen's transactions over 20,000 accounts of one workspace,
// in the order generated), in the backtest's batches of 4,096, and reports
// this process's CPU and the bytes it allocated per event. Each round
// starts from an empty Memory. SP_TEST_BENCH_COUNT sets the events
// (default 200,000).
//
//	go test -run '^$' -bench 'BenchmarkMemoryApply$' -count 6 ./internal/features/
func BenchmarkMemoryApply(b *testing.B) {
	n := 200000
	if v := os.Getenv("SP_TEST_BENCH_COUNT"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	// As BenchmarkRulesBacktest stores them: one workspace.
	evs := loadgenTransactions(b, n, 1, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	b.ResetTimer()
	var cpu time.Duration
	var alloc uint64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		m := NewMemory()
		runtime.GC()
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		cpu0 := processCPU(b)
		b.StartTimer()
		for off := 0; off < n; off += 4096 {
			if _, err := m.Apply(evs[off:min(off+4096, n)]); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		cpu += processCPU(b) - cpu0
		runtime.ReadMemStats(&ms1)
		alloc += ms1.TotalAlloc - ms0.TotalAlloc
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N*n), "cpu-µs/event")
	b.ReportMetric(float64(alloc)/float64(b.N*n), "alloc-B/event")
}

// loadgenTransactions are loadgen's first n transactions over 20,000
// accounts of the given number of workspaces, 5,000 counterparties, in the
// 48 hours before start.
func loadgenTransactions(b *testing.B, n, workspaces int, start time.Time) []*event.Envelope {
	p, err := identity.NewProtector(identity.DevKeys())
	if err != nil {
		b.Fatal(err)
	}
	g, err := loadgen.New(loadgen.Config{
		Seed: 7, Count: n, Accounts: 20000, Workspaces: workspaces, Counterparties: 5000,
		KnownAccountsRatio: 0.3, LinkedRatio: loadgen.DefaultLinkedRatio,
		Start: start, Spread: 48 * time.Hour,
	}, p)
	if err != nil {
		b.Fatal(err)
	}
	evs := make([]*event.Envelope, n)
	for i := range evs {
		e := g.Envelope(i)
		evs[i] = &e
	}
	return evs
}
