package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	tracer         pgx.QueryTracer // counts the statements a batch sends (store_work_test.go); nil in production
}

// newSystemPool builds the pool without connecting: pgxpool connects on
// demand, so building it is no I/O.
func newSystemPool(o systemPoolOptions) (*pgxpool.Pool, error) {
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
	if o.tracer != nil {
		pcfg.ConnConfig.Tracer = o.tracer
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		return nil, fmt.Errorf("%s: creating the connection pool: %w", o.component, err)
	}
	return pool, nil
}

// checkSystemPool runs the start-up role check. PostgreSQL may still be
// starting next to us, so an unreachable database is waited for (up to
// startupTimeout, and never past ctx); a role that cannot bypass row-level
// security is final. It returns pgrole.ErrCannotBypassRLS unwrapped, whose
// text is the spec's line.
func checkSystemPool(ctx context.Context, pool *pgxpool.Pool, o systemPoolOptions) error {
	cctx, cancel := context.WithTimeout(ctx, o.startupTimeout)
	defer cancel()
	err := retry.Do(cctx, retry.Policy{
		Initial:   startupCheckBackoff,
		Max:       5 * time.Second,
		Jitter:    retryJitter,
		Permanent: func(err error) bool { return errors.Is(err, pgrole.ErrCannotBypassRLS) },
	}, func(ctx context.Context, _ int) error {
		return pgrole.RequireBypassRLS(ctx, pool)
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgrole.ErrCannotBypassRLS):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("%s: start-up check: %w", o.component, ctx.Err())
	}
	return fmt.Errorf("%s: start-up check: PostgreSQL did not answer within %s: %w", o.component, o.startupTimeout, err)
}

// openSystemPool opens the pool and runs the start-up role check at once,
// for an output that checks while the engine builds the stream.
func openSystemPool(ctx context.Context, o systemPoolOptions) (*pgxpool.Pool, error) {
	pool, err := newSystemPool(o)
	if err != nil {
		return nil, err
	}
	if err := checkSystemPool(ctx, pool, o); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// refuseToStart stops the process with the spec's one line when the role
// check fails in Connect: the engine would otherwise log the failure and try
// to connect again forever, while the ingest API keeps accepting data that
// never reaches the database. Nothing was read for the output yet (it never
// connected), so nothing is committed. Tests replace it.
var refuseToStart = func(err error) {
	fmt.Fprintln(os.Stderr, "error: "+err.Error())
	os.Exit(1)
}
