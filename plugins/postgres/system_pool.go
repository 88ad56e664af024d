package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/speculapro/speculapro/internal/pgrole"
	"github.com/speculapro/speculapro/internal/retry"
)

// systemPoolOptions say how an output of the persist or stream role opens
// its pool of speculapro_system connections.
type systemPoolOptions struct {
	component      string // names the output in errors
	url            string
	maxConns       int                                          // writers; one more is added for checks and reconnects
	afterConnect   func(ctx context.Context, c *pgx.Conn) error // per-connection set-up, may be nil
	startupTimeout time.Duration
}

// openSystemPool opens the pool and runs the start-up role check, so a role
// started with the wrong database role fails while the engine builds the
// stream, before its input has handed out anything. It returns
// pgrole.ErrCannotBypassRLS unwrapped, whose text is the spec's line.
func openSystemPool(ctx context.Context, o systemPoolOptions) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(o.url)
	if err != nil {
		// pgx's parse errors can quote the URL, password included.
		return nil, fmt.Errorf("%s: the PostgreSQL URL cannot be parsed", o.component)
	}
	// One connection per writer, and one for the start-up check and a
	// writer's retry while a broken connection is replaced.
	pcfg.MaxConns = int32(max(o.maxConns, 1) + 1)
	if pcfg.ConnConfig.ConnectTimeout == 0 || pcfg.ConnConfig.ConnectTimeout > 10*time.Second {
		pcfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	pcfg.AfterConnect = o.afterConnect
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("%s: creating the connection pool: %w", o.component, err)
	}

	// The role check. PostgreSQL may still be starting next to us, so an
	// unreachable database is waited for (startup_timeout); a role that
	// cannot bypass row-level security is final.
	cctx, cancel := context.WithTimeout(ctx, o.startupTimeout)
	defer cancel()
	err = retry.Do(cctx, retry.Policy{
		Initial:   startupCheckBackoff,
		Max:       5 * time.Second,
		Jitter:    retryJitter,
		Permanent: func(err error) bool { return errors.Is(err, pgrole.ErrCannotBypassRLS) },
	}, func(ctx context.Context, _ int) error {
		return pgrole.RequireBypassRLS(ctx, pool)
	})
	if err != nil {
		pool.Close()
		if errors.Is(err, pgrole.ErrCannotBypassRLS) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: start-up check: PostgreSQL did not answer within %s: %w", o.component, o.startupTimeout, err)
	}
	return pool, nil
}
