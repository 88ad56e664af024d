package tests

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The kill -9 proof: two workers on one queue, one SIGKILLed five
// times mid-send and restarted. Every delivery arrives at least once, the
// receiver sees every idempotency key, and the duplicates are at most the
// rows the killed process held (claimed, not yet recorded) at its kills:
// counted from claimed_by right after each kill, before any lease ran out
// (claimed rows include those waiting in the engine for a sender, so this
// bounds the duplicates from above), and every duplicated key among them.
func TestWorkerCrashKillsOneOfTwo(t *testing.T) {
	t.Parallel()
	n := 2000
	if fullScale() {
		n = 5000
	}
	s := newWorkerStack(t)
	rcv := newReceiver(t)
	// Sends stay in flight long enough to be killed mid-send, and the work
	// (each worker sends 100 at once, each row recorded as it ends)
	// outlasts the five kills.
	rcv.delay = time.Second
	ep, _ := s.addEndpoint(t, rcv.url("/delay/crash"))
	keys := s.queueDeliveries(t, ep, n)
	env := s.with(map[string]string{"SP_WORKER_LEASE": "6s", "SP_WEBHOOK_TIMEOUT": "2s", "SP_WORKER_SENDERS": "1"})

	steady := startWorker(t, "steady worker", env)
	victim := startWorker(t, "victim worker", env)
	inFlightAtKills := 0
	heldAtKill := map[string]bool{} // event ids the victim held at one of its kills
	heldBy := func(p *binProcess) []string {
		rows, err := s.conn.Query(t.Context(), `SELECT event_id::text FROM speculapro.webhook_deliveries
 WHERE status = 'pending' AND claimed_by LIKE $1`, "%/"+strconv.Itoa(p.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	for kill := 1; kill <= 5; kill++ {
		waitUntil(t, waitBound, "the victim to hold rows mid-send", func() error {
			if len(heldBy(victim)) == 0 {
				return fmt.Errorf("victim holds no rows")
			}
			return nil
		})
		time.Sleep(150 * time.Millisecond) // inside the receiver's second: requests are on the wire
		victim.kill(t)
		held := heldBy(victim)
		inFlightAtKills += len(held)
		for _, id := range held {
			heldAtKill[id] = true
		}
		t.Logf("kill %d: the victim held %d rows; %d of %d delivered", kill, len(held), s.count(t,
			"SELECT count(*) FROM speculapro.webhook_deliveries WHERE status = 'delivered'"), n)
		victim = startWorker(t, fmt.Sprintf("victim worker (restart %d)", kill), env)
	}
	s.waitDone(t, 3*time.Minute)
	steady.stop(t)
	victim.stop(t)

	if got := s.count(t, "SELECT count(*) FROM speculapro.webhook_deliveries WHERE status = 'delivered'"); got != n {
		t.Fatalf("%d of %d delivered", got, n)
	}
	seen := map[string]int{}
	for _, r := range rcv.requests("/delay/crash") {
		seen[r.key]++
	}
	dups := 0
	for _, k := range keys {
		switch c := seen[k]; {
		case c == 0:
			t.Errorf("event %s never arrived", k)
		case c > 1:
			dups += c - 1
			if !heldAtKill[k] {
				t.Errorf("event %s arrived %d times but the victim did not hold it at a kill", k, c)
			}
		}
	}
	t.Logf("%d deliveries, %d requests, %d duplicates; the killed process held %d rows at its five kills",
		n, len(rcv.requests("/delay/crash")), dups, inFlightAtKills)
	if dups > inFlightAtKills {
		t.Errorf("%d duplicates, more than the %d rows in flight at the kills", dups, inFlightAtKills)
	}
	if inFlightAtKills == 0 {
		t.Errorf("no kill landed mid-send: the test proved nothing")
	}
}
