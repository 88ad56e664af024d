package tests

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/testenv"
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

	s.produceLG(t, r.g, event.KindAccountEvent, 0, cfg.AccountEvents, 0)
	evp := s.startStream(t, "stream-events", streamEvtPipeline, replicaWait)
	s.waitDrained(t, evp, s.group+"-events", s.prefix+"account.events", cfg.AccountEvents, drainBound(cfg.AccountEvents))

	var wg sync.WaitGroup
	wg.Add(1)
	var produceErr error
	// The producer ends when the load is sent (bounded by its rate).
	go func() {
		defer wg.Done()
		_, produceErr = s.produceLGErr(r.g, event.KindTransaction, 0, cfg.Count, rate)
	}()
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

	wg.Wait()
	if produceErr != nil {
		t.Fatal(produceErr)
	}
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
