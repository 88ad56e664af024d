package tests

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/event"
)

// TestStreamCrashKills: while transactions keep arriving, the stream
// process is killed with SIGKILL five times at random moments (at least
// restartGap apart, so each restart first waits out the killed member's
// session and then works for a while) and restarted each time. Everything
// happens inside the replay window, so at the end no hit or alert is stored
// twice, none is missing (exactly the model's set), and every total of the
// sample equals the model's. SP_TEST_SEED replays a run, its kill moments
// included.
func TestStreamCrashKills(t *testing.T) {
	t.Parallel()
	txns, events, accounts := exactSizes()
	cfg := proofConfig(lgSeed(t), txns, events, accounts)
	const kills, restartGap = 5, 8 * time.Second
	loadFor := 60 * time.Second
	if fullScale() {
		loadFor = 120 * time.Second
	}
	rate := float64(cfg.Count) / loadFor.Seconds()
	rnd := mrand.New(mrand.NewPCG(cfg.Seed, 3))

	testenv.Binary(t)
	s := newProofStack(t, "crash", testenv.RedisURL(t))
	r := newProofRun(t, cfg)
	x := newExactRun(t, s, r)
	t.Logf("seed %d (SP_TEST_SEED replays it): %d transactions at %.0f/s, %d account events; predicted %v",
		cfg.Seed, cfg.Count, rate, cfg.AccountEvents, countByRule(x.hits))

	// The account events first, as in the exactness test, so the rules
	// over them can be predicted; the kills hit the transaction stream.
	evp := s.applyAccountEvents(t, r, cfg.AccountEvents, nil)

	// The producer ends when the load is sent (bounded by its rate).
	produced := s.produceInBackground(r, cfg.Count, rate)
	// A short session, so a restarted stream gets the killed one's
	// partitions within seconds instead of the default 45.
	crashArgs := []string{"--set", "input.kafka_franz.session_timeout=6s"}
	topic := s.prefix + "txn.ingested"
	committed := func() int64 {
		var sum int64
		for _, at := range s.committed(t, s.group)[topic] {
			sum += at
		}
		return sum
	}
	stream := s.startStream(t, "stream-0", streamPipeline, nil, crashArgs...)

	// Five kills, each of a stream that is working: at a random moment of
	// its fifth of the load, but never before the restarted process has
	// committed something of its own (bounded), and then after a random
	// part of a second so the kill lands anywhere in a batch. A bounded
	// loop, by count and by time.
	start := time.Now()
	deadline := start.Add(loadFor + time.Duration(kills)*(restartGap+waitBound))
	killed := 0
	for slot := 0; killed < kills && time.Now().Before(deadline); slot++ {
		base := committed()
		slotLen := loadFor / kills
		at := start.Add(time.Duration(slot)*slotLen + time.Duration(rnd.Int64N(int64(slotLen))))
		if earliest := time.Now().Add(restartGap); at.Before(earliest) {
			at = earliest
		}
		time.Sleep(time.Until(at))
		if !poll(waitBound, 100*time.Millisecond, func() bool { return committed() > base || !stream.running() }) {
			t.Fatalf("%s committed nothing in %s:\n%s", stream.name, waitBound, stream.tail(4000))
		}
		if !stream.running() {
			t.Fatalf("%s exited by itself:\n%s", stream.name, stream.tail(4000))
		}
		time.Sleep(time.Duration(rnd.Int64N(int64(time.Second))))
		lag, _, _ := s.lagOf(t, s.group, topic)
		stream.kill(t)
		killed++
		t.Logf("kill %d at %s, %d committed since the last start, lag %d", killed, time.Since(start).Round(100*time.Millisecond), committed()-base, lag)
		stream = s.startStream(t, fmt.Sprintf("stream-%d", killed), streamPipeline, nil, crashArgs...)
	}
	if killed != kills {
		t.Fatalf("only %d of %d kills happened before %s", killed, kills, deadline.Sub(start))
	}
	produced(t)
	s.waitDrained(t, stream, s.group, topic, cfg.Count, drainBound(cfg.Count)+restartGap)
	stopAll(t, evp, stream)
	x.check(t, fmt.Sprintf("after %d kills", kills), 1)
}

// TestStreamCrashBetweenTotalsAndHits kills the stream at the worst
// moment, on purpose rather than by chance: every transaction is already
// in the running totals (the Lua calls ran) but none of their hits is
// stored, because the rule_hits table is locked by another transaction.
// The restarted stream reads the same records again inside the replay
// window: the totals must not change and every hit the rules' definitions
// predict must be stored once, none missing, none twice.
func TestStreamCrashBetweenTotalsAndHits(t *testing.T) {
	// Not parallel: the hits held behind the lock are only as many as the
	// stream's blocked batches hold, and on a busy machine its batches are
	// smaller than the whole load.
	cfg := proofConfig(lgSeed(t), 4000, 500, 200)
	testenv.Binary(t)
	s := newProofStack(t, "crash-mid", testenv.RedisURL(t))
	r := newProofRun(t, cfg)
	ctx := context.Background()
	x := newExactRun(t, s, r)
	t.Logf("seed %d: predicted %v", cfg.Seed, countByRule(x.hits))
	stopAll(t, s.applyAccountEvents(t, r, cfg.AccountEvents, nil))

	// Hold rule_hits: the stream's writes wait behind the lock.
	alertsBefore := persistCountAny(t, s, "SELECT count(*) FROM speculapro.alerts")
	lock := s.db.Connect(t, s.db.SuperuserURL)
	tx, err := lock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE speculapro.rule_hits IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	s.produceLG(t, r.g, event.KindTransaction, 0, cfg.Count, 0)
	crashArgs := []string{"--set", "input.kafka_franz.session_timeout=6s"}
	p := s.startStream(t, "stream-0", streamPipeline, nil, crashArgs...)
	waitUntil(t, waitBound, "every transaction in the totals and evaluated", func() error {
		scrape, err := p.scrape()
		if err != nil {
			return err
		}
		if n := metricSum(scrape, "speculapro_stream_events_evaluated_total"); n < float64(cfg.Count) {
			return fmt.Errorf("%v of %d evaluated", n, cfg.Count)
		}
		return nil
	})
	if n := persistCountAny(t, s, "SELECT count(*) FROM speculapro.alerts"); n != alertsBefore {
		t.Fatalf("%d alerts stored while rule_hits was locked", n-alertsBefore)
	}
	p.kill(t)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	p = s.startStream(t, "stream-1", streamPipeline, nil, crashArgs...)
	s.waitDrained(t, p, s.group, s.prefix+"txn.ingested", cfg.Count, drainBound(cfg.Count)+10*time.Second)
	stopAll(t, p)
	x.check(t, "after a kill between the totals and the hits", 1)
}

// TestStreamTwoProcesses: two stream processes share the group while the
// load arrives. Each start and each stop moves partitions from one to the
// other, so a batch in flight at a rebalance may be written by both: every
// hit, alert, case and case event is still stored once, and the totals of
// a sample equal the model's.
func TestStreamTwoProcesses(t *testing.T) {
	t.Parallel()
	txns, events, accounts := exactSizes()
	cfg := proofConfig(lgSeed(t), txns, events, accounts)
	const loadFor = 30 * time.Second
	testenv.Binary(t)
	s := newProofStack(t, "two", testenv.RedisURL(t))
	r := newProofRun(t, cfg)
	x := newExactRun(t, s, r)
	evp := s.applyAccountEvents(t, r, cfg.AccountEvents, nil)

	produced := s.produceInBackground(r, cfg.Count, float64(cfg.Count)/loadFor.Seconds())
	// A short session, so a stopped process's partitions move within
	// seconds.
	args := []string{"--set", "input.kafka_franz.session_timeout=6s"}
	first := s.startStream(t, "stream-a", streamPipeline, nil, args...)
	time.Sleep(loadFor / 4)
	second := s.startStream(t, "stream-b", streamPipeline, nil, args...)
	time.Sleep(loadFor / 4)
	if code := first.stop(t); code != 0 {
		t.Errorf("%s exited with %d on SIGTERM:\n%s", first.name, code, first.tail(3000))
	}
	third := s.startStream(t, "stream-c", streamPipeline, nil, args...)
	produced(t)
	s.waitDrained(t, second, s.group, s.prefix+"txn.ingested", cfg.Count, drainBound(cfg.Count))
	stopAll(t, evp, second, third)
	x.check(t, "after two processes shared the load", 1)
}
