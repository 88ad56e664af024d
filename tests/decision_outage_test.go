package tests

import (
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// decisionTimeout is SP_DECISION_TIMEOUT's default, which these runs use.
const decisionTimeout = 250 * time.Millisecond

// checkAnswered fails on any request not answered 200, and reports the
// latency quantiles from the scheduled send times.
func checkAnswered(t *testing.T, run *decisionRun, sent int) {
	t.Helper()
	if len(run.failures) > 0 {
		t.Fatalf("%d of %d requests not answered 200, e.g. %v", len(run.failures), sent, run.failures[0])
	}
	if len(run.answers) != sent {
		t.Fatalf("%d answers for %d requests", len(run.answers), sent)
	}
	p50, p99, p999 := run.quantile(0.5), run.quantile(0.99), run.quantile(0.999)
	t.Logf("%d decisions: p50 %v, p99 %v, p99.9 %v (from the scheduled send times)", sent, p50, p99, p999)
	if p99 >= decisionTimeout {
		t.Errorf("p99 %v is not under SP_DECISION_TIMEOUT %v", p99, decisionTimeout)
	}
}

// decideWhileBrokerDown starts a decision node (redis_spool's max_wait
// shortened to maxWait unless "") on a private broker, stops the broker, and
// sends n decisions (external IDs prefix-…) at rate: each must be answered on
// time (checkAnswered), and each then waits inside the node for Kafka.
func decideWhileBrokerDown(t *testing.T, name, prefix string, n int, rate float64, maxWait string) (*testenv.PrivateKafkaBroker, *decisionStack, *binProcess, *decisionRun) {
	t.Helper()
	k := testenv.PrivateKafka(t)
	s := newDecisionStack(t, name, k.Brokers(), testenv.RedisURL(t), maxWait)
	dec := s.startDecision(t, "decision", nil)
	k.Stop()
	run := newDecisionRun()
	s.sendAtRate(prefix, 0, n, rate, run)
	checkAnswered(t, run, n)
	return k, s, dec, run
}

func degradedCount(run *decisionRun) map[string]int {
	n := map[string]int{}
	for _, a := range run.answers {
		if a.Degraded {
			n[a.Reason]++
		}
	}
	return n
}

// TestDecisionOutageKafkaDown: decisions at a fixed rate while the broker is
// stopped in the middle. Every request is answered on time and none is
// degraded because of Kafka; the spool rises, then drains to 0 after the
// broker is back; every decided transaction is stored exactly once with its
// decision (docs/kafka.md, "When Kafka is down", the decision role).
//
// Modest under make test (120/s for 24 s, the broker stopped 10 s, the
// in-memory wait shortened to 3 s so that the spool is used); full size under
// make chaos (500/s for 3 minutes, the broker stopped 60 s, the real 30 s).
func TestDecisionOutageKafkaDown(t *testing.T) {
	// Not parallel: checkAnswered bounds the p99 by SP_DECISION_TIMEOUT.
	rate, total, stopAt, outage, maxWait := 120.0, 24*time.Second, 5*time.Second, 10*time.Second, "3s"
	accounts, payees := 40, 13
	if fullScale() {
		rate, total, stopAt, outage, maxWait = 500, 3*time.Minute, 60*time.Second, 60*time.Second, ""
		// 90,000 payments over 2,000 accounts and 400 payees: 40 accounts
		// would each pay 12.5 times a second for 3 minutes, and their
		// running totals (replay memory, delta records) would grow the
		// decision process's CPU from 0.3 to 1.1 cores over the run, at the
		// same rate, before the broker is even stopped: decisions degraded by
		// the totals of implausibly busy accounts, not by Kafka.
		accounts, payees = 2000, 400
	}
	k := testenv.PrivateKafka(t)
	s := newDecisionStack(t, "dec-kafka-down", k.Brokers(), testenv.RedisURL(t), maxWait)
	s.accounts, s.payees = accounts, payees
	dec := s.startDecision(t, "decision", nil)
	s.startPersist(t)

	n := int(rate * total.Seconds())
	run := newDecisionRun()
	done := make(chan struct{})
	go func() { defer close(done); s.sendAtRate("kd", 0, n, rate, run) }()
	var maxSpool int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(500 * time.Millisecond):
			}
			if l, err := s.redis.LLen(t.Context(), s.spoolPrefix+"spool:{decisions}").Result(); err == nil && l > maxSpool {
				maxSpool = l
			}
		}
	}()
	time.Sleep(stopAt)
	k.Stop()
	t.Logf("broker stopped")
	time.Sleep(outage)
	k.Start()
	t.Logf("broker started again")
	<-done
	wg.Wait()
	checkAnswered(t, run, n)
	if d := degradedCount(run); len(d) > 0 {
		t.Errorf("degraded answers with Redis up: %v", d)
	}
	if maxSpool == 0 {
		t.Errorf("the spool never held anything during a %v outage", outage)
	}
	if !poll(3*time.Minute, time.Second, func() bool { return s.spoolLen(t) == 0 }) {
		t.Fatalf("the spool still holds %d entries after the broker came back", s.spoolLen(t))
	}
	got := s.waitStored(t, n, 3*time.Minute)
	if bad := s.checkStoredOnce(t, run.answers, nil); len(bad) > 0 {
		t.Errorf("%d of %d stored; differences:\n%s", got, n, strings.Join(bad, "\n"))
	}
	spooled := metricOf(t, dec, "speculapro_decision_events_spooled_total")
	unspooled := metricOf(t, dec, "speculapro_decision_events_unspooled_total")
	lost := metricOf(t, dec, "speculapro_decision_events_lost_total")
	gauge := metricOf(t, dec, "speculapro_decision_spool_events")
	t.Logf("spool peaked at %d; spooled %v, unspooled %v, lost %v", maxSpool, spooled, unspooled, lost)
	if spooled == 0 || unspooled != spooled || lost != 0 || gauge != 0 {
		t.Errorf("metrics: spooled %v, unspooled %v, lost %v, spool_events %v; want unspooled = spooled > 0, nothing lost, 0 waiting", spooled, unspooled, lost, gauge)
	}
}

// TestDecisionShutdownFullBuffer: with the broker stopped, decisions wait in
// memory; SIGTERM makes the process exit within about 10 s, the spool then
// holds exactly the undelivered ones, and a new process replays them all,
// each stored once: stopping a decision node does not lose its buffer
// (docs/kafka.md, "When Kafka is down").
func TestDecisionShutdownFullBuffer(t *testing.T) {
	// Not parallel: checkAnswered bounds the p99 by SP_DECISION_TIMEOUT.
	n, rate := 300, 100.0
	if fullScale() {
		n, rate = 5000, 500
	}
	k, s, dec, run := decideWhileBrokerDown(t, "dec-stop", "st", n, rate, "")
	start := time.Now()
	code := dec.signal(t, syscall.SIGTERM, exitBound)
	took := time.Since(start)
	t.Logf("exit code %d after %v", code, took.Round(100*time.Millisecond))
	if took > 20*time.Second {
		t.Errorf("the process took %v to stop (stop_wait is 10 s)", took)
	}
	if got := s.spoolLen(t); got != int64(n) {
		t.Errorf("the spool holds %d entries after the stop, want exactly the %d undelivered", got, n)
	}
	if lost := lostIn(dec.stdout.String() + dec.stderr.String()); len(lost) > 0 {
		t.Errorf("%d LOST lines with Redis up", len(lost))
	}

	k.Start()
	s.startPersist(t)
	dec2 := s.startDecision(t, "decision-2", nil)
	if !poll(2*time.Minute, 500*time.Millisecond, func() bool { return s.spoolLen(t) == 0 }) {
		t.Fatalf("the new process left %d entries in the spool", s.spoolLen(t))
	}
	s.waitStored(t, n, 2*time.Minute)
	if bad := s.checkStoredOnce(t, run.answers, nil); len(bad) > 0 {
		t.Errorf("stored decisions differ:\n%s", strings.Join(bad, "\n"))
	}
	if got := metricOf(t, dec2, "speculapro_decision_events_unspooled_total"); got != float64(n) {
		t.Errorf("the new process unspooled %v, want %d", got, n)
	}
}

// TestDecisionOutageKafkaAndRedis: with both Kafka and Redis down, decided
// transactions stay in memory (tried on both again and again); a clean stop
// then loses them, and each is counted in speculapro_decision_events_lost_total
// and logged `decision: event LOST workspace=… external_id=…`. The LOST lines
// plus the stored transactions are exactly the decisions answered.
func TestDecisionOutageKafkaAndRedis(t *testing.T) {
	// Not parallel: checkAnswered bounds the p99 by SP_DECISION_TIMEOUT.
	per := 100
	if fullScale() {
		per = 1000
	}
	k := testenv.PrivateKafka(t)
	r := testenv.PrivateRedis(t)
	s := newDecisionStack(t, "dec-both-down", k.Brokers(), r.URL(), "2s")
	dec := s.startDecision(t, "decision", nil)
	s.startPersist(t)
	run := newDecisionRun()
	s.sendAtRate("b1", 0, per, 100, run) // all up
	s.waitStored(t, per, waitBound)
	k.Stop()
	r.Stop()
	t.Logf("Kafka and Redis stopped")
	s.sendAtRate("b2", 0, per, 100, run) // both down: degraded answers, nowhere to go
	time.Sleep(3 * time.Second)          // past max_wait: the spool refuses them too
	lostBefore := metricOf(t, dec, "speculapro_decision_events_lost_total")
	dec.signal(t, syscall.SIGTERM, exitBound)
	out := dec.stdout.String() + dec.stderr.String()
	lost := lostIn(out)
	t.Logf("lost_total before the stop %v; LOST lines at the stop: %d", lostBefore, len(lost))
	if lostBefore != 0 {
		t.Errorf("%v lost while the process could still hold them", lostBefore)
	}
	if len(lost) != per || strings.Count(out, `msg="decision: event LOST"`) != per {
		t.Errorf("%d LOST lines (%d distinct), want one for each of the %d undelivered", strings.Count(out, `msg="decision: event LOST"`), len(lost), per)
	}
	for ext := range lost {
		if !strings.HasPrefix(ext, "b2-") {
			t.Errorf("%s LOST, but it was decided while Kafka and Redis were up", ext)
		}
	}
	line := lostLine.FindString(out)
	if !strings.Contains(line, "workspace="+s.ws.String()) {
		t.Errorf("a LOST line does not name the workspace: %q", line)
	}
	r.Start()
	k.Start()
	t.Logf("Kafka and Redis started again")
	s.startDecision(t, "decision-2", nil)
	s.sendAtRate("b3", 0, per, 100, run) // all up again
	checkAnswered(t, run, 3*per)
	s.waitStored(t, len(run.answers)-len(lost), 2*time.Minute)
	time.Sleep(2 * time.Second)
	if bad := s.checkStoredOnce(t, run.answers, lost); len(bad) > 0 {
		t.Errorf("LOST lines + stored != answered:\n%s", strings.Join(bad, "\n"))
	}
	t.Logf("%d answered, %d lost (logged and counted), the rest stored once; e.g. %s", len(run.answers), len(lost), line)
}

// TestDecisionOutageRedisDown: with Redis stopped (Kafka up), decisions are
// still answered on time, degraded (the running totals cannot be read) with
// the fallback, and still delivered and stored with that decision.
func TestDecisionOutageRedisDown(t *testing.T) {
	// Not parallel: checkAnswered bounds the p99 by SP_DECISION_TIMEOUT, which a hung Redis already comes close to.
	n := 200
	if fullScale() {
		n = 3000
	}
	r := testenv.PrivateRedis(t)
	s := newDecisionStack(t, "dec-redis-down", testenv.KafkaBrokers(t), r.URL(), "")
	dec := s.startDecision(t, "decision", nil)
	s.startPersist(t)
	r.Stop()
	run := newDecisionRun()
	s.sendAtRate("rd", 0, n, 100, run)
	checkAnswered(t, run, n)
	for ext, a := range run.answers {
		if !a.Degraded || a.Decision != "review" {
			t.Errorf("%s with Redis down: %+v, want the fallback review, degraded", ext, a)
			break
		}
	}
	// A hung Redis (SIGSTOP): answered at the timeout, degraded, on time.
	r.Start()
	time.Sleep(1500 * time.Millisecond)
	r.Pause()
	hung := newDecisionRun()
	s.sendAtRate("rh", 0, n/4, 50, hung)
	checkAnswered(t, hung, n/4)
	r.Resume()
	for ext, a := range hung.answers {
		run.answers[ext] = a
	}
	t.Logf("degraded with Redis down: %v; with Redis hung: %v", degradedCount(run), degradedCount(hung))
	s.waitStored(t, len(run.answers), waitBound)
	if bad := s.checkStoredOnce(t, run.answers, nil); len(bad) > 0 {
		t.Errorf("stored decisions differ:\n%s", strings.Join(bad, "\n"))
	}
	if got := metricOf(t, dec, "speculapro_decision_degraded_total"); got < float64(n) {
		t.Errorf("speculapro_decision_degraded_total = %v, want at least %d", got, n)
	}
}

// TestDecisionCrashDuringReplay: decisions parked in the spool while Kafka
// was down; a new process replaying them is SIGKILLed mid-replay; a third
// process finishes. Nothing is lost, and any duplicate is absorbed by
// idempotent storage (each transaction, decision and webhook stored once).
func TestDecisionCrashDuringReplay(t *testing.T) {
	// Not parallel: checkAnswered bounds the p99 by SP_DECISION_TIMEOUT.
	n, rate := 1500, 300.0
	if fullScale() {
		n, rate = 30000, 1000
	}
	k, s, dec, run := decideWhileBrokerDown(t, "dec-crash", "cr", n, rate, "1s")
	dec.signal(t, syscall.SIGTERM, exitBound)
	if got := s.spoolLen(t); got != int64(n) {
		t.Fatalf("spool holds %d, want all %d parked", got, n)
	}
	k.Start()
	s.startPersist(t)
	dec2 := s.startDecision(t, "decision-2", nil)
	var at int64 = -1
	poll(time.Minute, 5*time.Millisecond, func() bool {
		l := s.spoolLen(t)
		if l < int64(n) {
			at = l
			return true
		}
		return false
	})
	dec2.kill(t)
	t.Logf("SIGKILL with %d of %d entries left in the spool", at, n)
	if at <= 0 {
		t.Logf("the replay had finished before the kill; the run still checks nothing is lost")
	}
	s.startDecision(t, "decision-3", nil)
	if !poll(2*time.Minute, 500*time.Millisecond, func() bool { return s.spoolLen(t) == 0 }) {
		t.Fatalf("the spool still holds %d", s.spoolLen(t))
	}
	s.waitStored(t, n, 2*time.Minute)
	if bad := s.checkStoredOnce(t, run.answers, nil); len(bad) > 0 {
		t.Errorf("after the crash:\n%s", strings.Join(bad, "\n"))
	}
}
