package ownership

import (
	"context"
	"errors"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// The causes a record's context ends with (context.Cause).
var (
	// ErrShutdown: the process is shutting down; nothing in flight will be
	// committed, and the records are read again after the restart.
	ErrShutdown = errors.New("the process is shutting down")
	// ErrRevoked: the record's partition was revoked from (or lost by) this
	// process; another owner reads it again from the committed offset.
	ErrRevoked = errors.New("the record's partition was revoked from this process")
)

// Ended reports whether err is the end of this process's ownership of a record rather than a failure.
func Ended(err error) bool {
	return errors.Is(err, ErrShutdown) || errors.Is(err, ErrRevoked)
}

// Watch returns a context that ends when parent does or when the context of
// any message of batch ends, with that context's cause, and the function
// that releases it. Messages of one partition share one context, so a batch
// watches a handful at most.
func Watch(parent context.Context, batch service.MessageBatch) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	seen := map[<-chan struct{}]bool{}
	var stops []func() bool
	for _, m := range batch {
		mctx := m.Context()
		done := mctx.Done()
		if done == nil || seen[done] {
			continue
		}
		seen[done] = true
		stops = append(stops, context.AfterFunc(mctx, func() { cancel(context.Cause(mctx)) }))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(context.Canceled)
	}
}

// Cause is why ctx ended: ErrShutdown or ErrRevoked (wrapped) for an ended ownership,
// else ctx.Err(); nil while it runs.
func Cause(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	if c := context.Cause(ctx); Ended(c) {
		return c
	}
	return ctx.Err()
}
