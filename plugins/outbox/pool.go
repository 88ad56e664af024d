package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/config"
	"github.com/speculapro/speculapro/internal/pgrole"
	"github.com/speculapro/speculapro/internal/retry"
)

// Fields every outbox component has.
const (
	fieldURL            = "url"
	fieldStartupTimeout = "startup_timeout"
)

func urlField() *service.ConfigField {
	return service.NewStringField(fieldURL).
		Description("PostgreSQL URL of a role that bypasses row-level security (speculapro_system). Empty means `SP_DB_SYSTEM_URL`, falling back to `SP_DB_URL`.").
		Secret().
		Default("")
}

func startupTimeoutField() *service.ConfigField {
	return service.NewDurationField(fieldStartupTimeout).
		Description("How long the start-up role check waits for PostgreSQL to answer before the process gives up starting.").
		Default("30s").
		Advanced()
}

// openPool opens a pool of at most maxConns speculapro_system connections
// and runs the start-up role check, so a worker started with the wrong role
// fails while the engine builds the stream. pgrole.ErrCannotBypassRLS is
// returned unwrapped: its text is the spec's line.
func openPool(ctx context.Context, conf *service.ParsedConfig, component string, maxConns int) (*pgxpool.Pool, error) {
	raw, err := conf.FieldString(fieldURL)
	if err != nil {
		return nil, err
	}
	if raw == "" {
		raw = config.SystemDBURL()
	}
	wait, err := conf.FieldDuration(fieldStartupTimeout)
	if err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		// pgx's parse errors can quote the URL, password included.
		return nil, fmt.Errorf("%s: the PostgreSQL URL cannot be parsed", component)
	}
	pcfg.MaxConns = int32(max(maxConns, 1))
	if pcfg.ConnConfig.ConnectTimeout == 0 || pcfg.ConnConfig.ConnectTimeout > 10*time.Second {
		pcfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("%s: creating the connection pool: %w", component, err)
	}
	cctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err = retry.Do(cctx, retry.Policy{
		Initial:   200 * time.Millisecond,
		Max:       5 * time.Second,
		Jitter:    0.2,
		Permanent: func(err error) bool { return errors.Is(err, pgrole.ErrCannotBypassRLS) },
	}, func(ctx context.Context, _ int) error {
		return pgrole.RequireBypassRLS(ctx, pool)
	})
	if err != nil {
		pool.Close()
		if errors.Is(err, pgrole.ErrCannotBypassRLS) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: start-up check: PostgreSQL did not answer within %s: %w", component, wait, err)
	}
	return pool, nil
}
