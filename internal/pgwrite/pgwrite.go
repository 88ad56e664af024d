package pgwrite

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/speculapro/speculapro/internal/pgretry"
)

// IsolateTimeoutFactor times attempt_timeout bounds one isolating attempt.
const IsolateTimeoutFactor = 5

// Counter and Timer are what the outputs use of the engine's metrics
// (*service.MetricCounter, *service.MetricTimer); tests record their own.
// Counter is the retry policy's, which counts with the same counters.
type Counter = pgretry.Counter

// Timer: see Counter.
type Timer interface {
	Timing(delta int64, labelValues ...string)
}

// rollbackTimeout bounds the rollback InTx runs after a failure, on a
// context of its own (the batch's may be done).
const rollbackTimeout = 5 * time.Second

// InTx runs fn in a transaction of pool and commits it.
func InTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("starting a database transaction: %w", err)
	}
	defer func() {
		// A rollback after a commit is a no-op; after a failure it must run
		// even when ctx is done, or the connection goes back to the pool
		// inside a failed transaction.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}
