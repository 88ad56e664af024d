package pgpartitions

import (
	"context"
	"fmt"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/dbmigrate"
	"github.com/speculapro/speculapro/internal/outbox"
	"github.com/speculapro/speculapro/internal/pgsystem"
	"github.com/speculapro/speculapro/internal/retry"
)

const (
	ppFieldMonthsAhead = "months_ahead"
	ppFieldTimeout     = "timeout"
)

func pgPartitionsSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("On every message, makes sure the monthly partitions of transactions and account_events exist from last month to `months_ahead` months ahead, then drops the message.").
		Description(`
Meant to be fed a tick (worker.yaml: a `+"`generate`"+` input every hour, the first at start). Calls
`+"`speculapro.ensure_partitions`"+` (through internal/dbmigrate, as `+"`speculapro migrate`"+` does), which takes a
transaction-scoped advisory lock: several workers at once create each partition once. Logs
`+"`level=INFO msg=\"worker: created partition\" partition=transactions_p2027_03`"+` for each one it creates, and sets
`+"`speculapro_worker_partitions_covered_until_seconds`"+` to the end (Unix seconds) of the last month covered: alert when
it comes within a month of `+"`time()`"+`. A failed run is retried with backoff for up to `+"`timeout`"+`, then logged
(`+"`level=ERROR msg=\"worker: creating partitions failed\"`"+`) and counted in `+"`speculapro_worker_partition_failures_total`"+`;
the next tick tries again. The message is dropped either way.`).
		Fields(pgsystem.URLFields()...).
		Fields(
			service.NewIntField(ppFieldMonthsAhead).
				Description("Months after the current one to keep created.").
				Default(dbmigrate.PartitionMonthsAhead),
			service.NewDurationField(ppFieldTimeout).
				Description("How long one run keeps retrying a failing database.").
				Default("1m").
				Advanced(),
			pgsystem.StartupTimeoutField(),
		).
		Example("Hourly", "", `
input:
  generate:
    interval: 1h
    mapping: root = {}
pipeline:
  processors:
    - pg_partitions:
        months_ahead: 3
`)
}

func init() {
	service.MustRegisterProcessor("pg_partitions", pgPartitionsSpec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.Processor, error) {
			return newPgPartitions(conf, mgr)
		})
}

type pgPartitions struct {
	pool    *pgsystem.Pool
	ahead   int
	timeout time.Duration
	log     *service.Logger
	until   *service.MetricGauge
	made    *service.MetricCounter
	fails   *service.MetricCounter
}

func newPgPartitions(conf *service.ParsedConfig, mgr *service.Resources) (*pgPartitions, error) {
	p := &pgPartitions{log: mgr.Logger()}
	var err error
	if p.ahead, err = conf.FieldInt(ppFieldMonthsAhead); err != nil {
		return nil, err
	}
	if p.ahead < 0 || p.ahead > 100 {
		return nil, fmt.Errorf("pg_partitions: %s must be 0 to 100, got %d", ppFieldMonthsAhead, p.ahead)
	}
	if p.timeout, err = conf.FieldDuration(ppFieldTimeout); err != nil {
		return nil, err
	}
	m := mgr.Metrics()
	p.until = m.NewGauge(outbox.MetricPartitionsUntil)
	p.made = m.NewCounter(outbox.MetricPartitionsMade)
	p.fails = m.NewCounter(outbox.MetricPartitionsFail)
	if p.pool, err = pgsystem.OpenFromParsed(conf, "pg_partitions", 2); err != nil {
		return nil, err
	}
	return p, nil
}

// Process runs one check and drops the tick.
// The first runs the start-up role check (a processor has no Connect): a
// wrong role stops the process with the documented line.
func (p *pgPartitions) Process(ctx context.Context, _ *service.Message) (service.MessageBatch, error) {
	if err := p.pool.CheckOnce(ctx); err != nil {
		return nil, err
	}
	p.ensure(ctx, time.Now())
	return nil, nil
}

func (p *pgPartitions) ensure(ctx context.Context, now time.Time) {
	rctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	var created []string
	err := retry.Do(rctx, retry.Policy{Initial: 500 * time.Millisecond, Max: 10 * time.Second, Jitter: outbox.BackoffJitter},
		func(ctx context.Context, _ int) error {
			var err error
			created, err = dbmigrate.EnsurePartitionsAhead(ctx, p.pool.Pool, now, p.ahead)
			return err
		})
	if err != nil {
		p.fails.Incr(1)
		p.log.With("err", err.Error(), "months_ahead", p.ahead).Error("worker: creating partitions failed")
		return
	}
	for _, name := range created {
		p.made.Incr(1)
		p.log.With("partition", name).Info("worker: created partition")
	}
	u := now.UTC()
	end := time.Date(u.Year(), u.Month()+time.Month(p.ahead)+1, 1, 0, 0, 0, 0, time.UTC)
	p.until.Set(end.Unix())
}

// Close closes the pool.
func (p *pgPartitions) Close(context.Context) error {
	p.pool.Close()
	return nil
}
