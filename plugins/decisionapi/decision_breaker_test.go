package decisionapi

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// A decision that ran out of time while Redis kept answering, or while
// Redis was asked nothing, does not open the breaker (it is the decision's
// deadline, answered "timeout"); Redis' own errors do, and so does a
// deadline once a question has gone unanswered for the silence bound (a
// hung Redis).
func TestRedisBreakerCountsOnlyRedisFailures(t *testing.T) {
	b := newRedisBreaker(50*time.Millisecond, 100*time.Millisecond)
	late := fmt.Errorf("features: %w", context.DeadlineExceeded)
	refused := errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	steps := []struct {
		sleep  time.Duration
		ask    bool  // b.asking() first
		fail   error // reported first, when set
		fault  bool  // failed's answer
		ok     bool  // b.ok() first
		paused bool
		why    string
	}{
		{sleep: 110 * time.Millisecond, fail: late, why: "Redis asked nothing for longer than the bound is not silent: the deadline is the decision's"},
		{ask: true, fail: late, why: "a deadline just after a question is the decision's, not Redis'"},
		{fail: refused, fault: true, paused: true, why: "a refused connection opens the breaker"},
		{sleep: 60 * time.Millisecond, why: "after the pause the first request probes"},
		{paused: true, why: "while one request probes, the others stay away"},
		// A question unanswered for longer than the silence bound: hung.
		{ask: true, sleep: 110 * time.Millisecond, fail: late, fault: true, paused: true, why: "a deadline after a question went unanswered that long opens it"},
		{sleep: 60 * time.Millisecond, why: "the next probe is let through"},
		{ok: true, why: "an answer closes the breaker"},
	}
	for i, s := range steps {
		if s.ok {
			b.ok()
		}
		if s.ask {
			b.asking()
		}
		time.Sleep(s.sleep)
		if s.fail != nil && b.failed(s.fail) != s.fault {
			t.Fatalf("step %d (%s): failed(%v) != %v", i, s.why, s.fail, s.fault)
		}
		if got := b.paused(); got != s.paused {
			t.Fatalf("step %d (%s): paused %v, want %v", i, s.why, got, s.paused)
		}
	}
}

// A probe whose own deadline runs out while Redis answers lets the next
// request probe instead of leaving the breaker stuck half-open.
func TestRedisBreakerProbeDeadlineReleasesProbe(t *testing.T) {
	b := newRedisBreaker(10*time.Millisecond, time.Hour)
	b.failed(errors.New("i/o timeout"))
	time.Sleep(15 * time.Millisecond)
	if b.paused() {
		t.Fatal("the first request after the pause must probe")
	}
	b.failed(context.DeadlineExceeded)
	if b.paused() {
		t.Fatal("the probe's deadline left the breaker stuck: the next request must probe")
	}
}
