package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Errors a caller may classify with errors.Is.
var (
	// ErrExhausted wraps the last attempt's error when MaxAttempts attempts
	// all failed. It is never returned for a cancelled context.
	ErrExhausted = errors.New("retries exhausted")
)

// Policy says how often and how patiently to retry.
type Policy struct {
	// MaxAttempts is the most attempts, the first included; 0 means no limit
	// (retry until success, a permanent error or cancellation).
	MaxAttempts int
	// Initial is the backoff before the second attempt; it doubles per
	// attempt up to Max.
	Initial time.Duration
	// Max caps one backoff.
	Max time.Duration
	// Jitter is the share of each backoff that is randomised, 0 to 1: 0.2
	// waits between 80 % and 100 % of the nominal backoff, so writers that
	// failed together do not come back together.
	Jitter float64
	// Permanent, if not nil, reports errors that no retry can fix; Do returns
	// them at once.
	Permanent func(error) bool
	// OnRetry, if not nil, is called after a failed attempt when, and only
	// when, a backoff of the given length follows. attempt is the attempt
	// that failed, counting from 1.
	OnRetry func(attempt int, err error, backoff time.Duration)
}

// Backoff returns the nominal backoff after the given failed attempt
// (counting from 1), before jitter: Initial doubling per attempt, capped at
// Max.
func (p Policy) Backoff(attempt int) time.Duration {
	d := p.Initial
	if d <= 0 {
		d = 100 * time.Millisecond
	}
	for i := 1; i < attempt; i++ {
		if p.Max > 0 && d >= p.Max {
			break
		}
		d *= 2
	}
	if p.Max > 0 && d > p.Max {
		d = p.Max
	}
	return d
}

// Delay is the backoff to wait after the given failed attempt (counting
// from 1) with the policy's jitter applied: what Do waits, for a caller that
// schedules its retries elsewhere (the worker stores the next attempt's time
// in PostgreSQL instead of sleeping).
func (p Policy) Delay(attempt int) time.Duration { return p.jittered(attempt) }

func (p Policy) jittered(attempt int) time.Duration {
	d := p.Backoff(attempt)
	j := min(max(p.Jitter, 0), 1)
	if j == 0 {
		return d
	}
	cut := time.Duration(float64(d) * j * rand.Float64())
	return d - cut
}

// Do calls fn until it succeeds and returns nil. It stops early and returns:
//   - ctx's error when ctx is cancelled before an attempt, while fn runs (fn
//     failed and ctx.Err() is set: the failure is taken to be the
//     cancellation's doing) or during a backoff; OnRetry is not called;
//   - fn's error, unwrapped, when Permanent says it is permanent;
//   - an error wrapping both ErrExhausted and the last error after
//     MaxAttempts failures; OnRetry is not called for the final attempt,
//     because no backoff follows it.
func Do(ctx context.Context, p Policy, fn func(ctx context.Context, attempt int) error) error {
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := fn(ctx, attempt)
		if err == nil {
			return nil
		}
		// Checked before anything else: a shutdown that lands during the
		// attempt usually surfaces as the attempt's failure, and must be
		// neither a fault, nor a retry, nor an exhaustion.
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if p.Permanent != nil && p.Permanent(err) {
			return err
		}
		if p.MaxAttempts > 0 && attempt >= p.MaxAttempts {
			return fmt.Errorf("%w after %d attempts: %w", ErrExhausted, attempt, err)
		}
		wait := p.jittered(attempt)
		if p.OnRetry != nil {
			p.OnRetry(attempt, err, wait)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// AfterError asks whoever retries the work to wait at least Wait before the
// next attempt: an output that hands a batch back (so its writer is free for
// other work) says how long its records should wait. It wraps Err.
type AfterError struct {
	Err  error
	Wait time.Duration
}

func (e *AfterError) Error() string { return e.Err.Error() }

func (e *AfterError) Unwrap() error { return e.Err }

// WaitOf returns the wait an AfterError in err's chain asks for, or 0.
func WaitOf(err error) time.Duration {
	var a *AfterError
	if errors.As(err, &a) {
		return a.Wait
	}
	return 0
}
