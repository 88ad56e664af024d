package decisionapi

import (
	"context"
	"errors"
	"sync"
	"time"
)

// redisBreaker leaves Redis alone for a while after it failed, so that a
// Redis that is down or hung costs each decision nothing (answered degraded
// at once) instead of its whole timeout; then one request probes it.
//
// Only Redis' own failures open it: an error Redis answered, a refused or
// broken connection, a socket timeout. A decision whose deadline ran out
// while it waited (for its turn in the running-totals batch, for a busy
// CPU, for a slow batch ahead of it, for its own late body) says nothing
// about Redis as long as Redis goes on answering: counting those would open
// the breaker for a whole second of degraded answers while the spool
// replays into a broker that is back (179 of 482 degraded answers in the
// full-size Kafka-down proof). A deadline counts only when Redis was asked
// something `silence` ago and has not answered since: then it is hung.
// Being asked nothing is not silence: requests whose deadline passed before
// they reached Redis (a workspace whose bodies arrive late) never open it.
type redisBreaker struct {
	pause   time.Duration // how long Redis is left alone after a failure
	silence time.Duration // asked and no answer for this long: a deadline is Redis' fault

	mu      sync.Mutex
	open    bool      // Redis failed: left alone until until, then probed
	until   time.Time // end of the pause
	probing bool      // one request probes an open breaker
	waiting time.Time // the first question since Redis' last answer; zero when none
}

func newRedisBreaker(pause, silence time.Duration) *redisBreaker {
	return &redisBreaker{pause: pause, silence: silence}
}

// paused reports whether a decision leaves Redis alone: during the pause,
// then while one request probes it (that request gets false).
func (b *redisBreaker) paused() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return false
	}
	if time.Now().Before(b.until) || b.probing {
		return true
	}
	b.probing = true
	return false
}

// failed reports a Redis call that returned err, and whether it was
// Redis' failure (else the decision's own deadline ran out).
func (b *redisBreaker) failed(err error) (redisFault bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) &&
		(b.waiting.IsZero() || time.Since(b.waiting) < b.silence) {
		// The decision ran out of time, Redis did not: a probe that ran
		// out lets the next request probe.
		b.probing = false
		return false
	}
	b.open, b.probing = true, false
	b.until = time.Now().Add(b.pause)
	return true
}

// asking reports a question sent to Redis: unanswered, it starts the
// silence.
func (b *redisBreaker) asking() {
	b.mu.Lock()
	if b.waiting.IsZero() {
		b.waiting = time.Now()
	}
	b.mu.Unlock()
}

// ok reports an answer from Redis (a value or a miss) and closes the
// breaker again.
func (b *redisBreaker) ok() {
	b.mu.Lock()
	b.open, b.probing = false, false
	b.waiting = time.Time{}
	b.mu.Unlock()
}
