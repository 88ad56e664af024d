package pgsystem

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/pgrole"
	"github.com/speculapro/speculapro/internal/retry"
)

// The fields every component with a system pool has.
const (
	FieldURL         = "url"
	FieldFallbackURL = "fallback_url"
)

// URLFields are the `url` and `fallback_url` fields.
func URLFields() []*service.ConfigField {
	return []*service.ConfigField{
		service.NewStringField(FieldURL).
			Description("PostgreSQL URL of a role that bypasses row-level security (speculapro_system); the pipelines set it to `${SP_DB_SYSTEM_URL:}`. Empty means `fallback_url`.").
			Secret().
			Default(""),
		service.NewStringField(FieldFallbackURL).
			Description("The URL used when `url` is empty; the pipelines set it to `SP_DB_URL`, since `SP_DB_SYSTEM_URL` defaults to it.").
			Secret().
			Default(""),
	}
}

// URLFromParsed is `url`, or `fallback_url` when `url` is empty.
func URLFromParsed(conf *service.ParsedConfig) (string, error) {
	return Pick(conf, FieldURL, FieldFallbackURL)
}

// Pick is the field named url, or the one named fallback when it is empty;
// for a component whose fields have other names.
func Pick(conf *service.ParsedConfig, url, fallback string) (string, error) {
	u, err := conf.FieldString(url)
	if err != nil || u != "" {
		return u, err
	}
	return conf.FieldString(fallback)
}

// Options say how a component opens its pool.
type Options struct {
	Component      string // names the component in errors
	URL            string
	MaxConns       int                                          // the pool's size, at least 1
	AfterConnect   func(ctx context.Context, c *pgx.Conn) error // per-connection set-up, may be nil
	StartupTimeout time.Duration
	Tracer         pgx.QueryTracer // nil in production
}

// startupBackoff is the first wait between start-up checks.
const startupBackoff = 500 * time.Millisecond

// New builds the pool without connecting: pgxpool connects on demand, so
// building it is no I/O.
func New(o Options) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(o.URL)
	if err != nil {
		// pgx's parse errors can quote the URL, password included.
		return nil, fmt.Errorf("%s: the PostgreSQL URL cannot be parsed", o.Component)
	}
	pcfg.MaxConns = int32(max(o.MaxConns, 1))
	if pcfg.ConnConfig.ConnectTimeout == 0 || pcfg.ConnConfig.ConnectTimeout > 10*time.Second {
		pcfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	pcfg.AfterConnect = o.AfterConnect
	if o.Tracer != nil {
		pcfg.ConnConfig.Tracer = o.Tracer
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		return nil, fmt.Errorf("%s: creating the connection pool: %w", o.Component, err)
	}
	return pool, nil
}

// Check runs the start-up role check. PostgreSQL may still be starting next
// to us, so an unreachable database is waited for (up to o.StartupTimeout,
// and never past ctx); a role that cannot bypass row-level security is
// final. It returns pgrole.ErrCannotBypassRLS unwrapped, whose text is the
// documented line.
func Check(ctx context.Context, pool *pgxpool.Pool, o Options) error {
	cctx, cancel := context.WithTimeout(ctx, o.StartupTimeout)
	defer cancel()
	err := retry.Do(cctx, retry.Policy{
		Initial:   startupBackoff,
		Max:       5 * time.Second,
		Jitter:    0.2,
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
		return fmt.Errorf("%s: start-up check: %w", o.Component, ctx.Err())
	}
	return fmt.Errorf("%s: start-up check: PostgreSQL did not answer within %s: %w", o.Component, o.StartupTimeout, err)
}

// CheckOrRefuse is Check, stopping the process (RefuseToStart) when the
// role cannot bypass row-level security.
func CheckOrRefuse(ctx context.Context, pool *pgxpool.Pool, o Options) error {
	err := Check(ctx, pool, o)
	if errors.Is(err, pgrole.ErrCannotBypassRLS) {
		RefuseToStart(err)
	}
	return err
}

// RefuseToStart stops the process with the one documented line when the role
// check fails in Connect: the engine would otherwise log the failure and
// try to connect again forever, while the rest of the process keeps
// accepting work that never reaches the database. Nothing was read for the
// component yet (it never connected), so nothing is committed. Tests
// replace it.
var RefuseToStart = func(err error) {
	fmt.Fprintln(os.Stderr, "error: "+err.Error())
	os.Exit(1)
}

// Pool is a pool built by New and its start-up role check, run by
// CheckOnce from the component's Connect (or first use), inside the
// engine's context, which a SIGTERM ends.
type Pool struct {
	*pgxpool.Pool
	opts    Options
	mu      sync.Mutex
	checked bool
}

// Open is New, keeping o for CheckOnce.
func Open(o Options) (*Pool, error) {
	pool, err := New(o)
	if err != nil {
		return nil, err
	}
	return &Pool{Pool: pool, opts: o}, nil
}

// CheckOnce runs CheckOrRefuse until it passes once.
func (p *Pool) CheckOnce(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.checked {
		return nil
	}
	if err := CheckOrRefuse(ctx, p.Pool, p.opts); err != nil {
		return err
	}
	p.checked = true
	return nil
}

// Connect is what a component's Connect runs: the start-up role check until
// it passes once, then a ping, so that after a lost connection the engine
// counts the component connected again only once PostgreSQL answers.
func (p *Pool) Connect(ctx context.Context) error {
	p.mu.Lock()
	checked := p.checked
	p.mu.Unlock()
	if !checked {
		return p.CheckOnce(ctx)
	}
	if err := p.Ping(ctx); err != nil {
		return fmt.Errorf("%s: reaching PostgreSQL: %w", p.opts.Component, err)
	}
	return nil
}
