package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/devtools/loadgen"
	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rules"
)

// streamBenchCount is the pre-filled topic's size: 1,000,000
// transactions (about four minutes on this machine, both roles);
// SP_TEST_BENCH_COUNT overrides it (100000 for a quick look).
func streamBenchCount(b *testing.B) int {
	n := 1000000
	if v := os.Getenv("SP_TEST_BENCH_COUNT"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("SP_TEST_BENCH_COUNT=%q: want a whole number of at least 1", v)
		}
	}
	return n
}

// applyStarterRules applies the starter pack (config/rules/*.yaml) to every
// workspace with `speculapro rules apply` and returns how many rules each
// workspace has.
func applyStarterRules(b *testing.B, s *proofStack, workspaces []event.UUID) int {
	b.Helper()
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(b), "config/rules/*.yaml"))
	if err != nil || len(files) == 0 {
		b.Fatalf("no starter rules in config/rules (%v)", err)
	}
	for _, ws := range workspaces {
		args := append([]string{"rules", "apply", "--workspace", ws.String()}, files...)
		out, errOut, code := runBin(b, map[string]string{"SP_DB_URL": s.db.AppURL}, args...)
		if code != 0 {
			b.Fatalf("rules apply exited with %d:\n%s%s", code, out, errOut)
		}
	}
	var n int
	if err := s.super.QueryRow(context.Background(),
		"SELECT count(*) FROM speculapro.rules WHERE workspace_id = $1 AND enabled", workspaces[0]).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// benchRow is one line of a benchmark's summary table.
type benchRow struct {
	metric   string
	value    float64
	unit     string
	baseline string  // what the value is compared with ("" none)
	ratio    float64 // value / baseline (0: none)
	aim      string
}

// logTable prints the summary table: metric, value, baseline, ratio, aim.
func logTable(b *testing.B, title string, rows []benchRow) {
	b.Helper()
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s\n", title)
	fmt.Fprintf(&sb, "  %-40s %16s  %-28s %7s  %s\n", "metric", "value", "baseline", "ratio", "aim")
	for _, r := range rows {
		ratio := "-"
		if r.ratio != 0 {
			ratio = fmt.Sprintf("%.2f", r.ratio)
		}
		base := r.baseline
		if base == "" {
			base = "-"
		}
		fmt.Fprintf(&sb, "  %-40s %12.0f %-3s  %-28s %7s  %s\n", r.metric, r.value, r.unit, base, ratio, r.aim)
	}
	b.Log(sb.String())
	// The same rows in make bench's summary table.
	for _, r := range rows {
		value := fmt.Sprintf("%.0f %s", r.value, r.unit)
		if r.value < 100 {
			value = fmt.Sprintf("%.1f %s", r.value, r.unit)
		}
		ratio, aim := "", r.aim
		if r.ratio != 0 {
			ratio = fmt.Sprintf("%.2f", r.ratio)
		}
		if aim == "-" {
			aim = ""
		}
		benchSummary(b, r.metric, strings.TrimSpace(value), r.baseline, ratio, aim)
	}
}

// redisUsedMemory is INFO memory's used_memory (bytes), summed over the
// masters of a Cluster.
func redisUsedMemory(b *testing.B, s *proofStack) int64 {
	b.Helper()
	ctx := context.Background()
	parse := func(info string) int64 {
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	if cc, ok := s.redis.(*redis.ClusterClient); ok {
		var sum int64
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			info, err := c.Info(ctx, "memory").Result()
			sum += parse(info)
			return err
		})
		return sum
	}
	info, err := s.redis.Info(ctx, "memory").Result()
	if err != nil {
		b.Fatalf("INFO memory: %v", err)
	}
	return parse(info)
}

// BenchmarkStreamThroughput: a topic pre-filled with N realistic
// transactions (streamBenchCount; 20,000 accounts) is drained first by
// the stream (pipelines/stream.yaml, the starter pack's rules on every
// workspace), then, in the same run, by the persister (persist.yaml, the
// baseline): one after the other, never at once, as the machine has two
// cores. Each is timed from its process's start until its group has
// committed the whole topic (start-up and group join included). Reports
// events/s of each and their ratio (aim ≥ 1.0: alerts never fall behind
// storage), the stream's peak RSS, and Redis memory per monitored account
// (MEMORY USAGE of every key of the run, and the growth of used_memory,
// divided by the accounts the transactions name).
// SP_TEST_BENCH_CPUPROFILE=<file> also saves a CPU profile of the stream;
// SP_TEST_BENCH_HEAPPROFILE=<file> its heap every 5 s (<file>.5, .10, …);
// SP_TEST_BENCH_REDIS_CLUSTER=1 keeps the totals on the local Redis Cluster;
// SP_TEST_BENCH_REDIS_REPLICAS=1 measures instead what waiting for a Redis
// replica costs (benchStreamReplicaWait); SP_TEST_BENCH_CASES=1 what cases
// cost the stream's alert creation (benchStreamCases);
// SP_TEST_BENCH_SET, SP_TEST_BENCH_GOGC and SP_TEST_BENCH_GOMEMLIMIT reach the
// stream process as for the persister's benchmark.
func BenchmarkStreamThroughput(b *testing.B) {
	n := streamBenchCount(b)
	if streamBenchReplicas() {
		benchStreamReplicaWait(b, n)
		return
	}
	if streamBenchCases() {
		benchStreamCases(b)
		return
	}
	testenv.Binary(b)
	redisURL := testenv.RedisURL(b)
	if os.Getenv("SP_TEST_BENCH_REDIS_CLUSTER") != "" {
		// The totals on the three-master Cluster: what sharding the Lua
		// calls over several Redis processes buys.
		redisURL = testenv.RedisClusterURL(b)
	}
	s := newProofStack(b, "stream-bench", redisURL)
	cfg := benchConfig(uint64(time.Now().UnixNano()), n)
	g, err := loadgen.New(cfg, lgProtector(b))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := loadgen.SeedKnownURL(ctx, s.db.SystemURL, g); err != nil {
		b.Fatal(err)
	}
	rules := applyStarterRules(b, s, g.Workspaces())
	sum := s.produceLG(b, g, event.KindTransaction, 0, n, 0)
	b.Logf("pre-filled %s; %d starter rules on each of %d workspaces", sum, rules, cfg.Workspaces)
	memBefore := redisUsedMemory(b, s)
	statsBefore := redisStats(b, s)
	topic := s.prefix + "txn.ingested"

	b.ResetTimer()
	// Debug endpoints always: the bytes allocated per event come from the
	// heap profile's TotalAlloc.
	extra := append(benchSetArgs(), "--set", "http.debug_endpoints=true")
	profile := os.Getenv("SP_TEST_BENCH_CPUPROFILE")
	heapProfile := os.Getenv("SP_TEST_BENCH_HEAPPROFILE")
	start := time.Now()
	p := s.startStream(b, "stream", streamPipeline, withBenchGOGC(nil), extra...)
	if heapProfile != "" {
		// What the heap holds, every 5 s of the run (<file>.<s>): the live
		// data behind the peak RSS.
		go func() {
			for t := 5; ; t += 5 {
				select {
				case <-p.exited:
					return
				case <-time.After(5 * time.Second):
				}
				saveHeapProfile(b, p, fmt.Sprintf("%s.%d", heapProfile, t))
			}
		}()
	}
	if profile != "" {
		// Once the stream serves HTTP and has started on the backlog; the
		// fetch ends with the profile's seconds (or the process).
		go func() {
			if poll(time.Minute, 100*time.Millisecond, func() bool { _, err := p.scrape(); return err == nil }) {
				time.Sleep(time.Second)
				// Well inside the run (about 20,000 events/s or more), so
				// the profile ends before the stream does.
				saveCPUProfile(b, p, "the stream's work", profile, max(1, min(20, n/60000)))
			}
		}()
	}
	// The stream's end is its output having written every event (benthos's
	// output_sent, polled as the persister's benchmark polls its stored
	// rows), not the group's offsets reaching the end: the input commits
	// them once a second, which would add up to a second to the stream's
	// time (at 300k events its rate would come out in steps 11 % apart). The offsets
	// are still waited for, so that every event is known consumed.
	within := time.Duration(n/1000)*time.Second + 3*time.Minute
	waitStreamSent(b, p, n, within)
	streamTime := time.Since(start)
	s.waitDrained(b, p, s.group, topic, n, within)
	b.StopTimer()
	rss := p.peakRSS(b)
	streamCPU := processCPU(b, p)
	allocated := totalAlloc(b, p)
	if profile != "" {
		// Allocations since start, where the GC's work comes from.
		saveAllocProfile(b, p, profile+".allocs")
	}
	scrape, _ := p.scrape()
	if code := p.signal(b, syscall.SIGTERM, time.Minute); code != 0 {
		b.Errorf("the stream exited with %d on SIGTERM", code)
	}
	b.Logf("hits by rule:\n%s", metricLines(scrape, "speculapro_stream_rule_hits_total"))
	var timing []string
	for _, l := range strings.Split(scrape, "\n") {
		if (strings.Contains(l, "_sum") || strings.Contains(l, "_count")) && !strings.HasPrefix(l, "#") &&
			(strings.Contains(l, "seconds") || strings.Contains(l, "_ns")) {
			timing = append(timing, l)
		}
	}
	b.Logf("timers:\n%s", strings.Join(timing, "\n"))
	evaluated := metricSum(scrape, "speculapro_stream_events_evaluated_total")
	// rule_eval's own time (its stage timer: input, the one program, the
	// hits), per event evaluated.
	evalSeconds := metricSum(scrape, "speculapro_stream_stage_duration_seconds_sum", `stage="evaluate"`)
	updateSeconds := metricSum(scrape, "speculapro_stream_feature_update_seconds_sum")
	hits := metricSum(scrape, "speculapro_stream_rule_hits_total")
	cacheHits := metricSum(scrape, "speculapro_stream_feature_cache_hits_total")
	cacheMisses := metricSum(scrape, "speculapro_stream_feature_cache_misses_total")
	conflicts := metricSum(scrape, "speculapro_stream_feature_conflicts_total")
	if cacheHits+cacheMisses == 0 {
		b.Errorf("the stream counted no entity in %s or %s", "speculapro_stream_feature_cache_hits_total", "speculapro_stream_feature_cache_misses_total")
	}
	memAfter := redisUsedMemory(b, s)
	rstats := redisStats(b, s).minus(statsBefore)
	b.Logf("Redis during the stream's run: %s", rstats.describe(n))
	keyBytes, keys := s.memoryOfKeys(b)
	accounts := map[string]bool{}
	for i := range n {
		accounts[g.Envelope(i).AccountExternalID] = true
	}

	// The baseline: the persister on the same topic, its own group.
	ls := &lgStack{testKafka: s.testKafka, prefix: s.prefix, group: s.group + "-persist", db: s.db, super: s.super}
	s.own(nil, []string{ls.group})
	start = time.Now()
	pp := startPersister(b, ls, "persister", nil)
	ls.waitStored(b, int64(n), time.Duration(n/1000)*time.Second+3*time.Minute)
	persistTime := time.Since(start)
	persistRSS := pp.peakRSS(b)
	persistCPU := processCPU(b, pp)
	if code := pp.signal(b, syscall.SIGTERM, time.Minute); code != 0 {
		b.Errorf("the persister exited with %d on SIGTERM", code)
	}

	streamRate, persistRate := float64(n)/streamTime.Seconds(), float64(n)/persistTime.Seconds()
	perAccount := float64(keyBytes) / float64(len(accounts))
	usedPerAccount := float64(memAfter-memBefore) / float64(len(accounts))
	b.ReportMetric(streamRate, "events/s")
	b.ReportMetric(persistRate, "persist-rows/s")
	b.ReportMetric(streamRate/persistRate, "stream/persist")
	b.ReportMetric(float64(rss)/(1<<20), "peak-RSS-MB")
	b.ReportMetric(perAccount, "redis-B/account")
	logTable(b, fmt.Sprintf("stream throughput: %d transactions over %d accounts, %d rules a workspace; %.0f evaluated, %.0f hits",
		n, len(accounts), rules, evaluated, hits), []benchRow{
		{"stream events/s (stream.yaml)", streamRate, "/s", fmt.Sprintf("persister %.0f/s", persistRate), streamRate / persistRate, "ratio >= 1.0"},
		{"stream events/s vs its aim", streamRate, "/s", "25,000/s", streamRate / 25000, ">= 25,000/s"},
		{"stream peak RSS", float64(rss) / (1 << 20), "MB", fmt.Sprintf("persister %.0f MB", float64(persistRSS)/(1<<20)), float64(rss) / float64(persistRSS), "-"},
		{"stream process CPU per event", streamCPU / float64(n) * 1e6, "µs", fmt.Sprintf("persister %.1f µs", persistCPU/float64(n)*1e6), streamCPU / persistCPU, "-"},
		{"stream bytes allocated per event", float64(allocated) / float64(n), "B", "", 0, "falls"},
		{fmt.Sprintf("rule evaluation per event (%d rules, in the stream)", rules), evalSeconds / max(evaluated, 1) * 1e6, "µs", "", 0, "-"},
		{"feature update per event (Redis round trips included)", updateSeconds / float64(n) * 1e6, "µs", "", 0, "-"},
		{"entities taken from the feature cache", 100 * cacheHits / max(cacheHits+cacheMisses, 1), "%", fmt.Sprintf("%.0f read from Redis", cacheMisses), 0, "-"},
		{"entity writes lost to another writer and redone", conflicts, "", "", 0, "-"},
		{"Redis CPU per event (user+sys)", rstats.cpu / float64(n) * 1e6, "µs", "", 0, "-"},
		{"Redis bytes in+out per event", float64(rstats.netIn+rstats.netOut) / float64(n), "B", "", 0, "-"},
		{"Redis bytes per account (MEMORY USAGE)", perAccount, "B", fmt.Sprintf("%d keys", keys), 0, "-"},
		{"Redis used_memory growth per account", usedPerAccount, "B", "", 0, "-"},
	})
}

// saveHeapProfile saves what the process's heap holds now to path.
func saveHeapProfile(b *testing.B, p *binProcess, path string) {
	client := http.Client{Timeout: time.Minute}
	resp, err := client.Get("http://" + p.httpAddr + "/debug/pprof/heap")
	if err != nil {
		b.Logf("heap profile: %v", err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode == http.StatusOK {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Logf("heap profile: status %d, %v", resp.StatusCode, err)
	}
}

// BenchmarkStreamLatency: produce-to-alert latency at 1,000 transactions
// per second for 20 s, through a stream that has caught up. A rule that
// fires on every transaction (beside the starter pack) raises an alert for
// each; the alerts table's created_at default is clock_timestamp() in this
// benchmark's database, so it is the moment the alert is inserted, and the
// latency is created_at minus the envelope's received_at (stamped by
// loadgen as it hands the record to the producer): producer linger, the
// acks=all write, the fetch, batching, the Redis round trip, the rules and
// the database transaction (its commit, a few ms, not counted). Reports
// p50, p99 and max in ms.
func BenchmarkStreamLatency(b *testing.B) {
	const rate, seconds = 1000, 20
	testenv.Binary(b)
	s := newProofStack(b, "stream-latency", testenv.RedisURL(b))
	ctx := context.Background()
	if _, err := s.super.Exec(ctx, "ALTER TABLE speculapro.alerts ALTER COLUMN created_at SET DEFAULT clock_timestamp()"); err != nil {
		b.Fatal(err)
	}
	// One generator: its first transactions warm the stream up (group
	// joined, connections open, rules compiled), the rest are measured.
	const warm = 2000
	cfg := benchConfig(uint64(time.Now().UnixNano()), warm+rate*seconds)
	g, err := loadgen.New(cfg, lgProtector(b))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := loadgen.SeedKnownURL(ctx, s.db.SystemURL, g); err != nil {
		b.Fatal(err)
	}
	rules := applyStarterRules(b, s, g.Workspaces())
	for _, ws := range g.Workspaces() {
		if _, err := s.super.Exec(ctx, `INSERT INTO speculapro.rules (workspace_id, name, applies_to, expression, severity, action, alert)
VALUES ($1, 't_every_transaction', 'transaction', 'event.amount >= 0', 'low', 'alert', true)`, ws); err != nil {
			b.Fatal(err)
		}
	}
	p := s.startStream(b, "stream", streamPipeline, nil)
	s.produceLG(b, g, event.KindTransaction, 0, warm, 0)
	s.waitDrained(b, p, s.group, s.prefix+"txn.ingested", warm, 3*time.Minute)

	b.ResetTimer()
	s.produceLG(b, g, event.KindTransaction, warm, cfg.Count, rate)
	s.waitDrained(b, p, s.group, s.prefix+"txn.ingested", cfg.Count, 3*time.Minute)
	b.StopTimer()
	rss := p.peakRSS(b)
	stopAll(b, p)
	measured := cfg.Count - warm

	// received_at of every measured transaction, from the topic itself.
	isMeasured := map[event.UUID]bool{}
	for i := warm; i < cfg.Count; i++ {
		isMeasured[g.Envelope(i).ID] = true
	}
	received := map[event.UUID]time.Time{}
	for _, rec := range s.consume(b, s.prefix+"txn.ingested", cfg.Count, 2*time.Minute) {
		e, err := event.Decode(rec.Value)
		if err == nil && isMeasured[e.ID] {
			received[e.ID] = e.ReceivedAt
		}
	}
	rows, err := s.super.Query(ctx, `SELECT a.event_id, a.created_at FROM speculapro.alerts a
JOIN speculapro.rules r ON r.id = a.rule_id WHERE r.name = 't_every_transaction'`)
	if err != nil {
		b.Fatal(err)
	}
	var lat []float64
	for rows.Next() {
		var id event.UUID
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			b.Fatal(err)
		}
		if r, ok := received[id]; ok {
			lat = append(lat, float64(at.Sub(r).Microseconds())/1000)
		}
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	if len(lat) != measured {
		var alerts, hits int
		_ = s.super.QueryRow(ctx, `SELECT (SELECT count(*) FROM speculapro.alerts), (SELECT count(*) FROM speculapro.rule_hits h JOIN speculapro.rules r ON r.id = h.rule_id WHERE r.name = 't_every_transaction')`).Scan(&alerts, &hits)
		b.Fatalf("latency of %d alerts, want %d (received_at of %d; %d alerts in all, %d hits of t_every_transaction):\n%s",
			len(lat), measured, len(received), alerts, hits, p.tail(3000))
	}
	sort.Float64s(lat)
	pct := func(q float64) float64 { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	p50, p99, pmax := pct(0.50), pct(0.99), lat[len(lat)-1]
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
	b.ReportMetric(pmax, "max-ms")
	b.ReportMetric(float64(rss)/(1<<20), "peak-RSS-MB")
	logTable(b, fmt.Sprintf("stream latency: %d transactions at %d/s, %d starter rules + 1 that always fires", measured, rate, rules), []benchRow{
		{"produce-to-alert p50", p50, "ms", "", 0, "-"},
		{"produce-to-alert p99", p99, "ms", "500 ms", p99 / 500, "p99 <= 500 ms"},
		{"produce-to-alert max", pmax, "ms", "", 0, "-"},
		{"stream peak RSS (latency run)", float64(rss) / (1 << 20), "MB", "", 0, "-"},
	})
}

// redisCounters are cumulative Redis counters (summed over a Cluster's
// masters): CPU seconds, network bytes, calls and µs per command.
type redisCounters struct {
	cpu           float64
	netIn, netOut int64
	calls, usec   map[string]int64
}

func (c redisCounters) minus(o redisCounters) redisCounters {
	d := redisCounters{cpu: c.cpu - o.cpu, netIn: c.netIn - o.netIn, netOut: c.netOut - o.netOut,
		calls: map[string]int64{}, usec: map[string]int64{}}
	for k, v := range c.calls {
		if v -= o.calls[k]; v > 0 {
			d.calls[k], d.usec[k] = v, c.usec[k]-o.usec[k]
		}
	}
	return d
}

// describe says, per event of n, Redis's CPU, bytes and the commands that
// took the most time.
func (c redisCounters) describe(n int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "CPU %.1f µs/event, in %.0f B/event, out %.0f B/event; commands:",
		c.cpu/float64(n)*1e6, float64(c.netIn)/float64(n), float64(c.netOut)/float64(n))
	names := make([]string, 0, len(c.calls))
	for k := range c.calls {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return c.usec[names[i]] > c.usec[names[j]] })
	for _, k := range names[:min(6, len(names))] {
		fmt.Fprintf(&sb, " %s %d calls %.1f µs/event (%.1f µs/call);", k, c.calls[k],
			float64(c.usec[k])/float64(n), float64(c.usec[k])/float64(c.calls[k]))
	}
	return sb.String()
}

// redisStats reads INFO's CPU, network and command counters.
func redisStats(b *testing.B, s *proofStack) redisCounters {
	b.Helper()
	ctx := context.Background()
	c := redisCounters{calls: map[string]int64{}, usec: map[string]int64{}}
	parse := func(info string) {
		for _, l := range strings.Split(info, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
			if !ok {
				continue
			}
			switch {
			case k == "used_cpu_user" || k == "used_cpu_sys":
				f, _ := strconv.ParseFloat(v, 64)
				c.cpu += f
			case k == "total_net_input_bytes":
				n, _ := strconv.ParseInt(v, 10, 64)
				c.netIn += n
			case k == "total_net_output_bytes":
				n, _ := strconv.ParseInt(v, 10, 64)
				c.netOut += n
			case strings.HasPrefix(k, "cmdstat_"):
				for _, f := range strings.Split(v, ",") {
					fk, fv, _ := strings.Cut(f, "=")
					n, _ := strconv.ParseInt(fv, 10, 64)
					switch fk {
					case "calls":
						c.calls[k[len("cmdstat_"):]] += n
					case "usec":
						c.usec[k[len("cmdstat_"):]] += n
					}
				}
			}
		}
	}
	// ForEachMaster calls read on every master at once: the sums are
	// added up one reply at a time.
	var mu sync.Mutex
	read := func(ctx context.Context, c redis.UniversalClient) error {
		info, err := c.Info(ctx, "cpu", "stats", "commandstats").Result()
		if err == nil {
			mu.Lock()
			parse(info)
			mu.Unlock()
		}
		return err
	}
	var err error
	if cc, ok := s.redis.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return read(ctx, c) })
	} else {
		err = read(ctx, s.redis)
	}
	if err != nil {
		b.Fatalf("INFO: %v", err)
	}
	return c
}

// processCPU is the CPU time (user + system, seconds) p has used so far.
func processCPU(b *testing.B, p *binProcess) float64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		b.Fatalf("reading the stat of %s: %v", p.name, err)
	}
	// The fields after the command name (in parentheses): utime and stime
	// are the 12th and 13th, in clock ticks (100 a second on Linux).
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// BenchmarkRuleEvaluation: rule evaluation per event, as the stream runs
// it (rules.Program.EvaluateFeatures, one reused Scratch), for one
// workspace with the starter pack and with 100 rules (the pack repeated
// under other names), over the pack's own test cases' events and features;
// the baseline is the same rules all run through Bloblang
// (rules.CompileBloblang), as they run without the native evaluator.
func BenchmarkRuleEvaluation(b *testing.B) {
	defs := starterDefinitions(b)
	type tcase struct {
		env   *event.Envelope
		feats rules.MapFeatures
	}
	var cases []tcase
	for _, d := range defs {
		for _, tc := range d.Tests {
			cases = append(cases, tcase{tc.Event, rules.MapFeatures(tc.Features)})
		}
	}
	perEvent := func(run func(c tcase)) float64 {
		const rounds = 200
		start := time.Now()
		for range rounds {
			for _, c := range cases {
				run(c)
			}
		}
		return float64(time.Since(start).Nanoseconds()) / float64(rounds*len(cases)) / 1000
	}
	var rowsOut []benchRow
	for _, n := range []int{len(defs), 100} {
		var rs []rules.Rule
		for i := range n {
			r := defs[i%len(defs)].Rule
			r.Name = fmt.Sprintf("%s_%d", r.Name, i)
			rs = append(rs, r)
		}
		prog, err := rules.Compile(rs)
		if err != nil {
			b.Fatal(err)
		}
		blob, err := rules.CompileBloblang(rs)
		if err != nil {
			b.Fatal(err)
		}
		var sc rules.Scratch
		base := perEvent(func(c tcase) { blob.EvaluateFeatures(c.env, c.feats, &sc) })
		us := perEvent(func(c tcase) { prog.EvaluateFeatures(c.env, c.feats, &sc) })
		rowsOut = append(rowsOut, benchRow{fmt.Sprintf("rule evaluation per event, %d rules", n), us, "µs",
			fmt.Sprintf("all through Bloblang %.1f µs", base), us / base, "-"})
		b.ReportMetric(us, fmt.Sprintf("µs/event-%d-rules", n))
	}
	logTable(b, fmt.Sprintf("rule evaluation: %d events (the starter pack's test cases), one workspace", len(cases)), rowsOut)
}
