package pgretry

import (
	"context"
	"fmt"
	"sync"
)

// reconnection remembers the batch that met a lost connection, so the wait
// for PostgreSQL that Connect makes is logged and counted as that batch's
// retries. The engine calls Connect again at once after
// service.ErrNotConnected and does not let an output choose that wait, so
// the wait is the policy's own: Connect pings with the policy's backoff and
// returns only once PostgreSQL answers (or at shutdown), and each retry line
// shows the wait that really follows.
type reconnection struct {
	mu    sync.Mutex
	lost  bool // a batch met a lost connection since the last Connect
	rows  int  // that batch's rows, for the retry lines
	batch *Batch
}

func (r *reconnection) lose(b *Batch, rows int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost, r.rows, r.batch = true, rows, b
}

func (r *reconnection) pending() (*Batch, int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.batch, r.rows, r.lost
}

func (r *reconnection) reconnected() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost, r.batch = false, nil
}

// Reconnect is an output's Connect after the first: it pings PostgreSQL
// until it answers. After a batch met a lost connection it backs off by the
// policy between pings, each wait logged and counted as a retry of that
// batch (its fault was counted when it met the loss); otherwise it pings
// once, so the engine counts the output connected only while PostgreSQL
// answers. It returns ctx's error at shutdown.
func (p *Policy) Reconnect(ctx context.Context, what string, ping func(ctx context.Context) error) error {
	attempt := func(ctx context.Context) error {
		if p.AttemptTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, p.AttemptTimeout)
			defer cancel()
		}
		if err := ping(ctx); err != nil {
			return fmt.Errorf("%s: reaching PostgreSQL: %w", what, err)
		}
		return nil
	}
	b, rows, lost := p.lost.pending()
	if !lost {
		return attempt(ctx)
	}
	if err := b.Keep(ctx, rows, attempt); err != nil {
		return err
	}
	p.lost.reconnected()
	return nil
}
