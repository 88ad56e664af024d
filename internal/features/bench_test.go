package features

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/devtools/testenv"
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
	cpu0 := redisCPU(b, c)
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
	elapsed := time.Since(start)
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
	// Redis' own CPU time (INFO cpu, every master), per event: what bounds
	// the figure on the Redis side. Other clients of the same Redis count too.
	b.ReportMetric(float64((redisCPU(b, c)-cpu0).Microseconds())/float64(n), "redis-µs/event")
}

// redisCPU is the CPU time (user + system) the Redis servers behind c have
// used: INFO cpu of each master.
func redisCPU(b *testing.B, c redis.UniversalClient) time.Duration {
	return testenv.ReadRedisUsage(b, c).CPU
}

// BenchmarkApplyLoadgen applies what the stream benchmark drains (loadgen's
// transactions, whose counterparty pool has a heavy head: a few
// counterparties receive a large share of a workspace's payments) in the
// stream's batches of 5,000, against the local Redis, and reports this
// process's CPU, the bytes it allocated and the Redis CPU per event: the
// running totals' own cost, without Kafka or the rules.
// SP_TEST_BENCH_COUNT sets the events (default 200,000),
// SP_TEST_BENCH_CACHE the cache's bytes.
func BenchmarkApplyLoadgen(b *testing.B) {
	n := 200000
	if v := os.Getenv("SP_TEST_BENCH_COUNT"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	var cacheBytes int64
	if v := os.Getenv("SP_TEST_BENCH_CACHE"); v != "" {
		cacheBytes, _ = strconv.ParseInt(v, 10, 64)
	}
	evs := loadgenTransactions(b, n, 4, time.Now().UTC().Truncate(time.Second))
	c, prefix, _ := open(b, targets[0])
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		s := New(c, Options{KeyPrefix: fmt.Sprintf("%s%d:", prefix, i), CacheBytes: cacheBytes})
		runtime.GC()
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		cpu0, ru0 := processCPU(b), testenv.ReadRedisUsage(b, c)
		var peak uint64
		b.StartTimer()
		for off := 0; off < n; off += 5000 {
			if _, _, err := s.ApplyValues(ctx, evs[off:min(off+5000, n)]); err != nil {
				b.Fatal(err)
			}
			if off%50000 == 0 {
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				peak = max(peak, m.HeapInuse)
			}
		}
		b.StopTimer()
		runtime.ReadMemStats(&ms1)
		// What the Store keeps between batches (its cache): the heap
		// still live after a collection, beyond what it was before.
		var live runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&live)
		b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(n), "cpu-µs/event")
		ru := testenv.ReadRedisUsage(b, c).Since(ru0)
		b.Logf("per event: %s", ru.PerOp(n))
		b.ReportMetric(float64(ru.CPU.Microseconds())/float64(n), "redis-µs/event")
		b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(n), "alloc-B/event")
		b.ReportMetric(float64(peak)/(1<<20), "heap-inuse-MB")
		b.ReportMetric(float64(int64(live.HeapAlloc)-int64(ms0.HeapAlloc))/(1<<20), "live-heap-MB")
		hits, reads := s.CacheStats()
		b.ReportMetric(float64(hits)/float64(max(hits+reads, 1)), "cache-hit-ratio")
	}
}

// processCPU is this process's CPU time (user + system).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScriptCommandCost is what bounds the running totals' Redis CPU:
// the same commands (per entity a GETRANGE of 8 bytes and two APPENDs of
// 60 bytes, on keys that exist), 100 entities a call, sent as a pipeline
// and run by a script (redis.call), and the script's call and arguments
// alone (script-bare), reported as Redis CPU per entity
// (INFO cpu; precise on a Redis of the benchmark's own, SP_REDIS_URL).
func BenchmarkScriptCommandCost(b *testing.B) {
	c, prefix, _ := open(b, targets[0])
	ctx := context.Background()
	const n = 100
	keys := make([]string, 2*n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s{e%d}:%d", prefix, i/2, i%2)
		if err := c.Set(ctx, keys[i], "01234567", time.Hour).Err(); err != nil {
			b.Fatal(err)
		}
	}
	rec := strings.Repeat("r", 60)
	sc := redis.NewScript(`for k = 1, #KEYS, 2 do
  if redis.call('GETRANGE', KEYS[k], 0, 7) == ARGV[1] then
    redis.call('APPEND', KEYS[k], ARGV[2])
    redis.call('APPEND', KEYS[k + 1], ARGV[2])
  end
end
return 1`)
	// The script's call and arguments alone, no command run.
	bare := redis.NewScript(`for k = 1, #KEYS, 2 do
  if KEYS[k] == ARGV[1] then
    return 0
  end
end
return 1`)
	for _, how := range []string{"pipeline", "script", "script-bare"} {
		b.Run(how, func(b *testing.B) {
			cpu0 := redisCPU(b, c)
			for i := 0; i < b.N; i++ {
				// Every key back to 8 bytes now and then, outside the
				// measure's commands only by its share.
				if i%50 == 0 {
					_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
						for _, k := range keys {
							p.Set(ctx, k, "01234567", time.Hour)
						}
						return nil
					})
				}
				var err error
				switch how {
				case "script":
					err = sc.Run(ctx, c, keys, "01234567", rec).Err()
				case "script-bare":
					err = bare.Run(ctx, c, keys, "01234567", rec).Err()
				default:
					_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
						for k := 0; k < len(keys); k += 2 {
							p.GetRange(ctx, keys[k], 0, 7)
							p.Append(ctx, keys[k], rec)
							p.Append(ctx, keys[k+1], rec)
						}
						return nil
					})
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((redisCPU(b, c)-cpu0).Nanoseconds())/1e3/float64(b.N*n), "redis-µs/entity")
		})
	}
}
