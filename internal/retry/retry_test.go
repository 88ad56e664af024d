package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

var (
	errTransient = errors.New("transient")
	errFatal     = errors.New("fatal")
)

func TestDo(t *testing.T) {
	fast := Policy{Initial: time.Millisecond, Max: 4 * time.Millisecond, Jitter: 0.5}
	tests := []struct {
		name        string
		policy      Policy
		fn          func(cancel context.CancelFunc, attempt int) error
		cancelFirst bool
		wantErr     error // errors.Is target; nil for success
		wantNotErr  error // must not be in the chain
		wantCalls   int
		wantRetries int
	}{
		{
			name:      "succeeds at once",
			policy:    fast,
			fn:        func(context.CancelFunc, int) error { return nil },
			wantCalls: 1,
		},
		{
			name:   "succeeds on the third attempt after two backoffs",
			policy: fast,
			fn: func(_ context.CancelFunc, a int) error {
				if a < 3 {
					return errTransient
				}
				return nil
			},
			wantCalls: 3, wantRetries: 2,
		},
		{
			name:    "exhaustion calls no onRetry for the final attempt",
			policy:  Policy{MaxAttempts: 5, Initial: time.Millisecond, Max: time.Millisecond},
			fn:      func(context.CancelFunc, int) error { return errTransient },
			wantErr: ErrExhausted, wantCalls: 5, wantRetries: 4,
		},
		{
			name:    "exhaustion keeps the last error",
			policy:  Policy{MaxAttempts: 2, Initial: time.Millisecond},
			fn:      func(context.CancelFunc, int) error { return errTransient },
			wantErr: errTransient, wantCalls: 2, wantRetries: 1,
		},
		{
			name:   "a permanent error stops at once",
			policy: Policy{Initial: time.Millisecond, Permanent: func(err error) bool { return errors.Is(err, errFatal) }},
			fn: func(_ context.CancelFunc, a int) error {
				if a == 2 {
					return errFatal
				}
				return errTransient
			},
			wantErr: errFatal, wantNotErr: ErrExhausted, wantCalls: 2, wantRetries: 1,
		},
		{
			name:        "cancelled before the first attempt",
			policy:      fast,
			fn:          func(context.CancelFunc, int) error { return nil },
			cancelFirst: true,
			wantErr:     context.Canceled, wantCalls: 0,
		},
		{
			name:   "cancellation during the final attempt is not exhaustion",
			policy: Policy{MaxAttempts: 3, Initial: time.Millisecond},
			fn: func(cancel context.CancelFunc, a int) error {
				if a == 3 {
					cancel()
					return context.Canceled
				}
				return errTransient
			},
			wantErr: context.Canceled, wantNotErr: ErrExhausted, wantCalls: 3, wantRetries: 2,
		},
		{
			name:   "cancellation during an attempt that fails otherwise calls no onRetry",
			policy: Policy{Initial: time.Millisecond},
			fn: func(cancel context.CancelFunc, a int) error {
				cancel()
				return errTransient // e.g. "connection reset" from a torn-down query
			},
			wantErr: context.Canceled, wantNotErr: errTransient, wantCalls: 1, wantRetries: 0,
		},
		{
			name:   "cancellation during an attempt is not classified as permanent",
			policy: Policy{Initial: time.Millisecond, Permanent: func(error) bool { return true }},
			fn: func(cancel context.CancelFunc, a int) error {
				cancel()
				return errFatal
			},
			wantErr: context.Canceled, wantNotErr: errFatal, wantCalls: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancelFirst {
				cancel()
			}
			calls, retries := 0, 0
			p := tt.policy
			p.OnRetry = func(attempt int, err error, backoff time.Duration) {
				retries++
				if attempt != calls {
					t.Errorf("onRetry for attempt %d while on call %d", attempt, calls)
				}
				if err == nil || backoff <= 0 {
					t.Errorf("onRetry(%d, %v, %s): want an error and a positive backoff", attempt, err, backoff)
				}
			}
			err := Do(ctx, p, func(_ context.Context, attempt int) error {
				calls++
				if attempt != calls {
					t.Errorf("attempt %d on call %d", attempt, calls)
				}
				return tt.fn(cancel, attempt)
			})
			if tt.wantErr == nil && err != nil {
				t.Fatalf("Do: %v, want nil", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Do: %v, want %v", err, tt.wantErr)
			}
			if tt.wantNotErr != nil && errors.Is(err, tt.wantNotErr) {
				t.Fatalf("Do: %v, must not be %v", err, tt.wantNotErr)
			}
			if calls != tt.wantCalls || retries != tt.wantRetries {
				t.Fatalf("calls=%d retries=%d, want %d and %d", calls, retries, tt.wantCalls, tt.wantRetries)
			}
		})
	}
}

func TestCancelDuringBackoff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	retries := 0
	p := Policy{Initial: time.Hour, OnRetry: func(int, error, time.Duration) { retries++; cancel() }}
	start := time.Now()
	err := Do(ctx, p, func(context.Context, int) error { return errTransient })
	if !errors.Is(err, context.Canceled) || errors.Is(err, errTransient) {
		t.Fatalf("Do: %v, want context.Canceled alone", err)
	}
	if retries != 1 || time.Since(start) > time.Minute {
		t.Fatalf("retries=%d after %s: the backoff must end at cancellation", retries, time.Since(start))
	}
}

func TestBackoff(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Max: 30 * time.Second}
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000}
	for i, w := range want {
		if got := p.Backoff(i + 1); got != w*time.Millisecond {
			t.Errorf("Backoff(%d) = %s, want %s", i+1, got, w*time.Millisecond)
		}
	}
	if got := p.Backoff(1000); got != 30*time.Second {
		t.Errorf("Backoff(1000) = %s, want the cap", got)
	}
	j := Policy{Initial: time.Second, Max: time.Second, Jitter: 0.2}
	for range 200 {
		if d := j.jittered(3); d < 800*time.Millisecond || d > time.Second {
			t.Fatalf("jittered backoff %s outside [800ms, 1s]", d)
		}
	}
}
