package tests

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/loadgen"
	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/event"
)

// streamBenchReplicasEnv asks BenchmarkStreamThroughput for the cost of
// waiting for a Redis replica instead of its usual rows.
const streamBenchReplicasEnv = "SP_TEST_BENCH_REDIS_REPLICAS"

// benchStreamReplicaWait is BenchmarkStreamThroughput with
// SP_TEST_BENCH_REDIS_REPLICAS=1: the totals on a Redis Cluster of three
// masters with a replica each (testenv.PrivateRedisClusterWithReplicas),
// the pre-filled topic drained by the stream twice in the same run, first
// with SP_REDIS_REPLICAS_TO_WAIT=0 and then with 1 (Redis WAIT for a
// replica after every batch's writes), each with its own consumer group and
// Redis key prefix so the second counts everything afresh. Each is timed
// from its process's start until its output has written every event.
// Reports events/s of each and their ratio.
func benchStreamReplicaWait(b *testing.B, n int) {
	testenv.Binary(b)
	cluster := testenv.PrivateRedisClusterWithReplicas(b, 3)
	s := newProofStack(b, "stream-bench-replicas", cluster.URL())
	g, err := loadgen.New(benchConfig(uint64(time.Now().UnixNano()), n), lgProtector(b))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := loadgen.SeedKnownURL(context.Background(), s.db.SystemURL, g); err != nil {
		b.Fatal(err)
	}
	rules := applyStarterRules(b, s, g.Workspaces())
	sum := s.produceLG(b, g, event.KindTransaction, 0, n, 0)
	b.Logf("pre-filled %s; %d starter rules a workspace; Redis Cluster with replicas at %s", sum, rules, cluster.URL())

	b.ResetTimer()
	rates := map[string]float64{}
	for _, wait := range []string{"0", "1"} {
		group := s.group + "-wait" + wait
		s.own(nil, []string{group})
		env := withBenchGOGC(map[string]string{
			"SP_REDIS_REPLICAS_TO_WAIT": wait,
			"SP_STREAM_GROUP":           group,
			// Under the stack's prefix, so its cleanup deletes these keys too.
			"SP_REDIS_KEY_PREFIX": s.keyPrefix + "wait" + wait + ":",
		})
		start := time.Now()
		p := s.startStream(b, "stream-wait"+wait, streamPipeline, env, benchSetArgs()...)
		within := time.Duration(n/1000)*time.Second + 3*time.Minute
		waitStreamSent(b, p, n, within)
		rates[wait] = float64(n) / time.Since(start).Seconds()
		s.waitDrained(b, p, group, s.prefix+"txn.ingested", n, within)
		if code := p.signal(b, syscall.SIGTERM, time.Minute); code != 0 {
			b.Errorf("the stream (replicas to wait %s) exited with %d on SIGTERM", wait, code)
		}
	}
	b.StopTimer()
	b.ReportMetric(rates["1"], "events/s")
	b.ReportMetric(rates["0"], "no-wait-events/s")
	b.ReportMetric(rates["1"]/rates["0"], "wait/no-wait")
	logTable(b, fmt.Sprintf("stream throughput on a Redis Cluster with replicas: %d transactions, %d rules a workspace", n, rules), []benchRow{
		{"stream events/s waiting for a Redis replica (SP_REDIS_REPLICAS_TO_WAIT=1)", rates["1"], "/s",
			fmt.Sprintf("without the wait %.0f/s", rates["0"]), rates["1"] / rates["0"], "-"},
	})
}

// waitStreamSent waits until the stream's output has written n events
// (benthos's output_sent), failing the benchmark if p exits first or within
// passes. Its end is the output having written every event, not the group's
// offsets reaching the end: the input commits them once a second, which
// would add up to a second to the stream's time.
func waitStreamSent(b *testing.B, p *binProcess, n int, within time.Duration) {
	b.Helper()
	var sent float64
	if !poll(within, 200*time.Millisecond, func() bool {
		if !p.running() {
			b.Fatalf("%s exited (code %d) before writing %d events:\n%s", p.name, p.cmd.ProcessState.ExitCode(), n, p.tail(4000))
		}
		sc, err := p.scrape()
		sent = metricSum(sc, "output_sent")
		return err == nil && sent >= float64(n)
	}) {
		b.Fatalf("after %s the stream's output_sent is %.0f of %d", within, sent, n)
	}
}

// streamBenchReplicas reports whether SP_TEST_BENCH_REDIS_REPLICAS asks
// for the replica-wait measurement.
func streamBenchReplicas() bool { return os.Getenv(streamBenchReplicasEnv) != "" }
