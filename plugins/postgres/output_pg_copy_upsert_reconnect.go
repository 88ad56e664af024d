package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/speculapro/speculapro/internal/retry"
)

// reconnection is the output's own wait for PostgreSQL after a lost
// connection. WriteBatch hands the batch back to the engine as not connected
// (readiness then shows the outage) and the engine calls Connect again at
// once; Connect pings until PostgreSQL answers, backing off by the output's
// own policy and logging each wait before it makes it. The backoff a retry
// line shows is the wait that follows, whatever the engine's own reconnect
// timing, because Connect returns only once connected (or at shutdown).
// Safe for concurrent use.
type reconnection struct {
	mu   sync.Mutex
	lost bool // a batch met a lost connection since the last Connect
	rows int  // that batch's rows, for the retry lines
}

// lose records that a batch of rows met a lost connection.
func (r *reconnection) lose(rows int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost, r.rows = true, rows
}

// pending reports whether a lost connection waits for Connect, and the rows
// of the batch that met it.
func (r *reconnection) pending() (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lost, r.rows
}

func (r *reconnection) reconnected() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = false
}

// reconnect pings PostgreSQL until it answers: after a lost connection with
// the output's backoff between pings, each wait logged and counted as a
// retry of the batch that met it (its fault was counted then); otherwise
// once, as a connection check. It returns ctx's error at shutdown.
func (o *pgCopyUpsert) reconnect(ctx context.Context) error {
	ping := func(ctx context.Context, _ int) error {
		if o.attemptTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, o.attemptTimeout)
			defer cancel()
		}
		if err := o.pool.Ping(ctx); err != nil {
			return fmt.Errorf("pg_copy_upsert: reaching PostgreSQL: %w", err)
		}
		return nil
	}
	lost, rows := o.lost.pending()
	if !lost {
		return ping(ctx, 1)
	}
	faulted := true
	err := retry.Do(ctx, retry.Policy{
		Initial: o.initialBackoff,
		Max:     o.maxBackoff,
		Jitter:  retryJitter,
		OnRetry: func(_ int, err error, backoff time.Duration) {
			o.retrying(rows, err, backoff, &faulted)
		},
	}, ping)
	if err != nil {
		return err
	}
	o.lost.reconnected()
	return nil
}
