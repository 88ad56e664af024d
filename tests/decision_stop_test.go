package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// slowDecision is a decision request whose headers and first half of body are
// sent, the rest held back until finish: the server is working on it (its
// handler has started) for as long as the test wants.
type slowDecision struct {
	conn net.Conn
	ext  string
	rest []byte
}

// startSlowDecision opens a connection to the stack's decision API and sends
// transaction n of run up to the middle of its body.
func (s *decisionStack) startSlowDecision(t *testing.T, run string, n int) *slowDecision {
	t.Helper()
	txn := decisionTxnOver(run, n, time.Now().UTC(), s.accounts, s.payees)
	body, _ := json.Marshal(txn)
	conn, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dialing the decision API: %v", err)
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	half := len(body) / 2
	head := fmt.Sprintf("POST /v1/decisions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		s.addr, s.key, len(body))
	if _, err := conn.Write(append([]byte(head), body[:half]...)); err != nil {
		t.Fatalf("sending half a decision request: %v", err)
	}
	return &slowDecision{conn: conn, ext: txn["external_id"].(string), rest: body[half:]}
}

// finish sends the rest of the body and records the answer in into (200
// only; anything else is a failure, as sendAtRate records it).
func (d *slowDecision) finish(into *decisionRun) {
	defer d.conn.Close()
	code, a, err := func() (int, decisionAnswer, error) {
		if _, err := d.conn.Write(d.rest); err != nil {
			return 0, decisionAnswer{}, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(d.conn), nil)
		if err != nil {
			return 0, decisionAnswer{}, err
		}
		return readDecisionAnswer(resp)
	}()
	into.mu.Lock()
	defer into.mu.Unlock()
	switch {
	case err != nil:
		into.failures = append(into.failures, fmt.Sprintf("%s: %v", d.ext, err))
	case code != http.StatusOK:
		into.failures = append(into.failures, fmt.Sprintf("%s: status %d %s", d.ext, code, a.Error))
	default:
		into.answers[a.ExternalID] = a
	}
}

// TestDecisionStopKeepsAnswered: SIGTERM reaches a decision process while
// decisions arrive at a steady rate and a few requests are half sent (their
// bodies finish during the stop, so they are answered while it stops). A new
// decision process then starts on the same spool, beside the persister: every
// request answered 200, before or during the stop, is stored exactly once
// with the decision answered (docs/decision-api.md, "Stopping a decision
// node"). Requests refused or cut off by the stop may be absent: their
// clients got no decision.
func TestDecisionStopKeepsAnswered(t *testing.T) {
	// Not parallel: the stop must land while requests are in flight, and the half-sent ones must finish within the server's 5 s shutdown grace; a loaded machine moves both.
	const rate, total, slow = 400.0, 2400, 16
	s := newDecisionStack(t, "dec-sigterm", testenv.KafkaBrokers(t), testenv.RedisURL(t), "")
	dec := s.startDecision(t, "decision", nil)
	s.startPersist(t)

	run := newDecisionRun()
	sent := make(chan struct{})
	go func() { defer close(sent); s.sendAtRate("sg", 0, total, rate, run) }()
	time.Sleep(2 * time.Second)
	var held []*slowDecision
	for i := range slow {
		held = append(held, s.startSlowDecision(t, "sgs", i))
	}
	time.Sleep(100 * time.Millisecond) // their handlers are reading the bodies
	exited := make(chan int, 1)
	go func() { exited <- dec.signal(t, syscall.SIGTERM, exitBound) }()
	time.Sleep(300 * time.Millisecond) // the stop has begun: the server takes no new requests
	var wg sync.WaitGroup
	for _, d := range held {
		wg.Add(1)
		go func() { defer wg.Done(); d.finish(run) }()
	}
	wg.Wait()
	code := <-exited
	<-sent
	duringStop := 0
	for ext := range run.answers {
		if strings.HasPrefix(ext, "sgs-") {
			duringStop++
		}
	}
	t.Logf("exit code %d; %d answered 200 (%d of the %d finished during the stop), %d refused or cut off",
		code, len(run.answers), duringStop, slow, len(run.failures))
	if duringStop < slow/2 {
		t.Fatalf("only %d of the %d requests finishing during the stop were answered (e.g. %v): the stop was not exercised",
			duringStop, slow, run.failures)
	}
	out := dec.stdout.String() + dec.stderr.String()
	if lost := lostIn(out); len(lost) > 0 || strings.Contains(out, "LOST") {
		t.Errorf("%d LOST lines with Kafka and Redis up", strings.Count(out, "LOST"))
	}
	// The ones answered during the stop reach the pipeline only after the
	// engine stopped taking batches: the process parks them, and says so.
	if !strings.Contains(out, `msg="decision: stopping, parked the answered decisions the pipeline had not delivered"`) {
		t.Errorf("no line saying the stop parked the answered decisions left; the log ends:\n%s", dec.tail(2000))
	}

	s.startDecision(t, "decision-2", nil)
	if !poll(time.Minute, 500*time.Millisecond, func() bool { return s.spoolLen(t) == 0 }) {
		t.Fatalf("the new process left %d entries in the spool", s.spoolLen(t))
	}
	s.waitStored(t, len(run.answers), 30*time.Second)
	time.Sleep(2 * time.Second) // a second copy of one would have arrived by now
	got := s.stored(t)
	var lost, twice, differ []string
	for ext, a := range run.answers {
		switch sd := got[ext]; {
		case sd == nil:
			lost = append(lost, ext)
		case sd.txns != 1 || sd.decisions != 1:
			twice = append(twice, fmt.Sprintf("%s (%d transaction rows, %d decisions rows)", ext, sd.txns, sd.decisions))
		case sd.decision != a.Decision || sd.outcome != a.Decision:
			differ = append(differ, fmt.Sprintf("%s (answered %s, stored %q / %q)", ext, a.Decision, sd.decision, sd.outcome))
		}
	}
	sort.Strings(lost)
	t.Logf("answered %d: %d not stored, %d stored more than once, %d stored with another decision", len(run.answers), len(lost), len(twice), len(differ))
	if len(lost) > 0 {
		t.Errorf("%d answered decisions lost by the stop, e.g. %v", len(lost), lost[:min(len(lost), 5)])
	}
	if len(twice) > 0 || len(differ) > 0 {
		t.Errorf("stored more than once: %v; stored with another decision: %v", twice, differ)
	}
}
