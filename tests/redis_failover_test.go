package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// replicaWait is the stream's setting on a Redis Cluster with replicas:
// every batch's writes are on a replica before its offsets are committed.
var replicaWait = map[string]string{"SP_REDIS_REPLICAS_TO_WAIT": "1", "SP_REDIS_REPLICA_WAIT_TIMEOUT": "1s"}

// TestRedisClusterFailoverStream: both stream pipelines run against a Redis
// Cluster of three masters with a replica each, with replicas_to_wait 1.
// Under a steady transaction load a master is killed (SIGKILL), its replica
// is promoted, and the killed node is started again (it rejoins as the new
// master's replica, which the writes wait for). Afterwards every total of a
// sample of accounts, customers and counterparties equals the model's
// (nothing lost, nothing counted twice) and every predicted rule hit and
// alert is stored exactly once. The promotion and the stream's pause are
// logged.
func TestRedisClusterFailoverStream(t *testing.T) {
	t.Parallel()
	txns, events, accounts := exactSizes()
	loadFor := 30 * time.Second
	if fullScale() {
		loadFor = 90 * time.Second
	}
	cfg := proofConfig(lgSeed(t), txns, events, accounts)
	rate := float64(cfg.Count) / loadFor.Seconds()
	rnd := rand.New(rand.NewPCG(cfg.Seed, 35))

	testenv.Binary(t)
	cluster := testenv.PrivateRedisClusterWithReplicas(t, 3)
	s := newProofStack(t, "rc-failover", cluster.URL())
	r := newProofRun(t, cfg)
	x := newExactRun(t, s, r)
	t.Logf("seed %d (SP_TEST_SEED replays it): %d transactions at %.0f/s, %d account events; predicted %v",
		cfg.Seed, cfg.Count, rate, cfg.AccountEvents, countByRule(x.hits))

	evp := s.applyAccountEvents(t, r, cfg.AccountEvents, replicaWait)

	// The producer ends when the load is sent (bounded by its rate).
	produced := s.produceInBackground(r, cfg.Count, rate)
	topic := s.prefix + "txn.ingested"
	committed := func() int64 {
		var sum int64
		for _, at := range s.committed(t, s.group)[topic] {
			sum += at
		}
		return sum
	}
	stream := s.startStream(t, "stream", streamPipeline, replicaWait)
	start := time.Now()

	// The kill lands in the middle third of the load, once the stream has
	// committed something.
	time.Sleep(loadFor/3 + time.Duration(rnd.Int64N(int64(loadFor/3))))
	if !poll(waitBound, 100*time.Millisecond, func() bool { return committed() > 0 || !stream.running() }) || !stream.running() {
		t.Fatalf("the stream committed nothing before the kill:\n%s", stream.tail(4000))
	}
	masters := cluster.Masters()
	victim := masters[rnd.IntN(len(masters))]
	replica := cluster.ReplicaOf(victim)
	before := committed()
	killedAt := time.Now()
	cluster.Kill(victim)
	promoted := cluster.WaitPromoted(replica, 30*time.Second)
	t.Logf("master %s killed at %s (%d committed); its replica %s promoted %s later",
		cluster.Addrs()[victim], killedAt.Sub(start).Round(100*time.Millisecond), before,
		cluster.Addrs()[replica], promoted.Round(time.Millisecond))

	// The promoted master has no replica: the writes to its slots wait
	// until the killed node rejoins as one.
	cluster.Start(victim)
	cluster.WaitHealthy(60 * time.Second)
	healthy := time.Since(killedAt)
	atHealthy := committed()
	if !poll(waitBound, 100*time.Millisecond, func() bool { return committed() > atHealthy || !stream.running() }) || !stream.running() {
		t.Fatalf("the stream made no progress within %s of the cluster's recovery:\n%s", waitBound, stream.tail(4000))
	}
	t.Logf("cluster healthy again (the killed node a replica) %s after the kill; the stream committed again %s after the kill",
		healthy.Round(time.Millisecond), time.Since(killedAt).Round(time.Millisecond))

	produced(t)
	s.waitDrained(t, stream, s.group, topic, cfg.Count, drainBound(cfg.Count))
	t.Logf("transactions drained %s after the load began", time.Since(start).Round(time.Millisecond))
	stopAll(t, evp, stream)
	// The test's own client learns the new slot owners.
	if cc, ok := s.redis.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
		time.Sleep(time.Second)
	}
	x.check(t, "after a master failover", 1)
}

// TestRedisClusterFailoverDecisions: decisions at a fixed rate against a
// Redis Cluster of three masters with a replica each, with the persister
// running; a master is killed (SIGKILL) in the middle, its replica is
// promoted and the killed node is started again. Every request is answered
// 200, those that needed the dead master degraded (the fallback) at about
// SP_DECISION_TIMEOUT, and every decided transaction is stored once with
// its decision. How many were degraded, over how long, and the latencies
// are logged.
func TestRedisClusterFailoverDecisions(t *testing.T) {
	t.Parallel()
	n, rate := 1500, 100.0
	if fullScale() {
		n = 6000
	}
	cluster := testenv.PrivateRedisClusterWithReplicas(t, 3)
	// The stack's own Redis client (it cleans its keys up) only speaks to
	// one Redis: give it the stack's, where these processes write nothing,
	// and the processes the cluster, whose keys die with it.
	s := newDecisionStack(t, "dec-rc-failover", testenv.KafkaBrokers(t), testenv.RedisURL(t), "")
	s.redisURL = cluster.URL()
	s.startDecision(t, "decision", nil)
	s.startPersist(t)

	run := newDecisionRun()
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	// The sender ends when the n requests are answered (bounded by the
	// rate and the HTTP client's timeout).
	go func() {
		defer wg.Done()
		s.sendAtRate("rf", 0, n, rate, run)
	}()
	loadFor := time.Duration(float64(n) / rate * float64(time.Second))
	time.Sleep(loadFor / 3)
	masters := cluster.Masters()
	victim := masters[0]
	replica := cluster.ReplicaOf(victim)
	killedAt := time.Now()
	cluster.Kill(victim)
	promoted := cluster.WaitPromoted(replica, 30*time.Second)
	cluster.Start(victim)
	cluster.WaitHealthy(60 * time.Second)
	t.Logf("master killed %s into the load; its replica promoted %s later; the cluster healthy again %s after the kill",
		killedAt.Sub(start).Round(100*time.Millisecond), promoted.Round(time.Millisecond), time.Since(killedAt).Round(time.Millisecond))
	wg.Wait()

	if len(run.failures) > 0 {
		t.Fatalf("%d of %d requests not answered 200, e.g. %v", len(run.failures), n, run.failures[0])
	}
	if len(run.answers) != n {
		t.Fatalf("%d answers for %d requests", len(run.answers), n)
	}
	// Degraded answers and the span of send times they cover.
	first, last, degraded := n, -1, 0
	for ext, a := range run.answers {
		if !a.Degraded {
			continue
		}
		degraded++
		var i int
		if _, err := fmt.Sscanf(ext, "rf-%06d", &i); err != nil {
			t.Fatalf("external id %q: %v", ext, err)
		}
		first, last = min(first, i), max(last, i)
		if a.Decision != "review" {
			t.Errorf("%s degraded with %q, want the fallback review", ext, a.Decision)
		}
	}
	slowest := quantileOf(run.latencies, 1)
	t.Logf("%d decisions: p50 %v, p99 %v, slowest %v; %d degraded %v, sent over %s from %s after the kill",
		n, run.quantile(0.5), run.quantile(0.99), slowest, degraded, degradedCount(run),
		time.Duration(float64(last-first)/rate*float64(time.Second)).Round(10*time.Millisecond),
		(start.Add(time.Duration(float64(first) / rate * float64(time.Second))).Sub(killedAt)).Round(10*time.Millisecond))
	// On time: the answer never waits for the failover itself (a bound
	// well above SP_DECISION_TIMEOUT, for a loaded test machine).
	if slowest > decisionTimeout+2*time.Second {
		t.Errorf("slowest answer %v: a decision waited for the failover", slowest)
	}
	s.waitStored(t, n, 2*time.Minute)
	if bad := s.checkStoredOnce(t, run.answers, nil); len(bad) > 0 {
		t.Errorf("stored decisions differ:\n%s", strings.Join(bad, "\n"))
	}
}
