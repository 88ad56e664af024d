package pgrulehits

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/applog"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/eventmsg"
	"github.com/speculapro/speculapro/internal/pgclass"
	"github.com/speculapro/speculapro/internal/pgretry"
	"github.com/speculapro/speculapro/internal/pgsystem"
	"github.com/speculapro/speculapro/internal/rules"
)

// The output's files: this one is the component (spec, construction,
// Connect, WriteBatch, Close); output_pg_rule_hits_hits.go reads the hits
// rule_eval left on each message; output_pg_rule_hits_store.go writes them,
// their alerts and outbox rows in one transaction, with the case parts of
// its statement in output_pg_rule_hits_cases.go. How a failed batch is
// retried is internal/pgretry's.

const (
	prhFieldKind           = "kind"
	prhFieldInitialBackoff = "initial_backoff"
	prhFieldMaxBackoff     = "max_backoff"
	prhFieldAttemptTimeout = "attempt_timeout"
	prhFieldStartupTimeout = "startup_timeout"
)

// The metadata rule_eval leaves on each message: {"hits": [{rule, rule_id,
// version, score, severity, action, alert, reads}]}.
const metaRuleEval = "rule_eval"

// The stream's log lines, worded like the persister's.
const (
	logStreamBatchRetry  = "stream: batch failed, retrying"
	logStreamUndecodable = "stream: skipped undecodable records"
	logStreamRejected    = "stream: skipped rule hits the database refused"
)

// eventAlertCreated is the outbox event type of a new alert, as webhook
// endpoints and notification subscriptions name it in event_types.
const eventAlertCreated = "alert.created"

// pgRuleHitsSpec is the component's page (docs/components is generated
// from it).
//
// long: the component's config spec, one field after another as its documentation page lists them
func pgRuleHitsSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("The stream evaluator's write: stores what `rule_eval` found on each event (rule hits), raises an alert per hit that asks for one, opens or joins the alert's case, and queues the webhook deliveries and notifications of each new alert and case step, all in one database transaction per batch, exactly once.").
		Description(`
Reads each message's event envelope (from `+"`event_decode`"+`) and the hits `+"`rule_eval`"+` put in its metadata
(`+"`@rule_eval.hits`"+`). Per batch, in ONE database transaction, with one statement per table set (arrays, not
one statement per hit):

1. a `+"`rule_hits`"+` row per rule and event (`+"`UNIQUE (workspace_id, rule_id, event_id)`"+`, `+"`ON CONFLICT DO NOTHING`"+`),
   recording the rule's version, score and the feature values the rule read (`+"`details.reads`"+`), and `+"`shadow`"+`
   true for a shadow rule's hit (`+"`mode: shadow`"+`): that hit is stored and goes no further;
2. for each hit of a live rule with `+"`alert: true`"+`, an alert with `+"`dedupe_key`"+` `+"`<rule_id>:<event_id>`"+`
   (`+"`ON CONFLICT DO NOTHING`"+`), its severity and title (the rule's description, else its name) from the rule;
   each alert not stored yet joins the open case of its group, or opens one (`+"`INSERT … ON CONFLICT`"+` on the one open
   case per group), the group chosen by the workspace's `+"`case_grouping`"+` (`+"`customer`"+`: the customer's case, the
   account's when the event names no customer; `+"`account`"+`; `+"`alert`"+`: a case per alert); the case's priority rises
   to the alert's severity when that is higher, and a `+"`case_events`"+` row (actor `+"`stream`"+`) records each step:
   `+"`opened`"+`, `+"`alert_attached`"+`;
3. for each alert this transaction created, and only those: a `+"`webhook_deliveries`"+` row (`+"`event_type`"+`
   `+"`alert.created`"+`, `+"`event_id`"+` the alert's id) for every enabled webhook endpoint of the workspace whose
   `+"`event_types`"+` is empty or contains `+"`alert.created`"+`, and a `+"`notifications`"+` row (dedupe key
   `+"`alert.created:<alert_id>:<subscription_id>`"+`) for every enabled notification subscription whose
   `+"`event_types`"+` allow it and whose `+"`min_severity`"+` the alert meets; for each case step, a `+"`webhook_deliveries`"+`
   row (`+"`event_type`"+` `+"`case.opened`"+` or `+"`case.alert_attached`"+`, `+"`event_id`"+` the case event's id) for every
   enabled endpoint subscribed to it. The worker sends them.

4. for each rule version the batch's events were evaluated against (`+"`@rule_eval.evaluated`"+`), the number of them
   added to the hour's row of `+"`rule_evaluations`"+`: the denominator of a rule's hit rate in `+"`speculapro rules stats`"+`,
   counted once because it commits with the hits (a replay `+"`rule_eval`"+` left alone carries none);
5. for each topic partition of the batch, its highest offset in `+"`stream_progress`"+`: from then on every record up to
   it is known to be evaluated and stored, so `+"`rule_eval`"+` leaves such a record alone when it is read again inside the
   replay window (its running totals would be today's, not its own).

So a replayed event, a batch written again after a crash, or the same event written by two stream processes at
once (a rebalance) creates no second hit, alert, case, case event, delivery or notification: the unique keys decide,
and the cases, case events and outbox rows follow only the alerts actually inserted. When another process stores one
of the batch's alerts after the batch's statement began (its case already opened or joined for it), the transaction
is rolled back and written again, and the new attempt leaves that alert's case alone: a case always holds an alert,
and changes only with a case event. The output reports a batch done, and the input commits its offsets,
only after the transaction has committed. A batch without hits and without `+"`kafka_franz`"+` metadata touches no database.

### Failures

A batch that fails (a lock timeout, a deadlock, a missing grant) is tried again, the same batch, with exponential
backoff and jitter from `+"`initial_backoff`"+` up to `+"`max_backoff`"+`. When PostgreSQL cannot be reached (down,
restarting, the connection lost) the output reports itself not connected instead: the engine calls Connect again,
which pings PostgreSQL, and writes the same batch once it answers. Every retry, and every loss of the connection, logs
`+"`level=ERROR msg=\"stream: batch failed, retrying\" rows=… err=… backoff=…`"+` (rows: the hits being written). A hit the
database refuses (SQLSTATE class 22 or 23) is isolated by bisecting within the transaction and skipped, counted in
`+"`speculapro_stream_records_skipped_total{reason=\"rejected\"}`"+` and logged as
`+"`level=WARN msg=\"stream: skipped rule hits the database refused\" count=… codes=…`"+`; the statements are written so
that this cannot normally happen (a hit whose rule was deleted meanwhile is simply not stored).

A record that cannot be read (flagged by `+"`event_decode`"+`, or not an envelope of `+"`kind`"+`) has no dead-letter
topic here, the persister owns those: it is counted in `+"`speculapro_stream_records_skipped_total{reason=\"undecodable\"}`"+`,
skipped, and logged as `+"`level=WARN msg=\"stream: skipped undecodable records\" count=…`"+`.

### Start-up check

Connect checks, before the output writes anything, that the database role is a superuser or has BYPASSRLS, and
fails with `+"`persist/stream/worker roles: database role cannot bypass row-level security (set SP_DB_SYSTEM_URL to the speculapro_system role)`"+`
otherwise.

### Metrics

`+"`speculapro_stream_batches_total`, `_rule_hits_stored_total{mode}` (hits new to the table; mode live or shadow), `_alerts_created_total`, `_cases_opened_total`, `_outbox_queued_total{outbox}` (webhook_deliveries, notifications; case steps' deliveries included), `_records_skipped_total{reason}` (undecodable, rejected), `_retries_total` (one per backoff that followed a failed attempt), `_faults_total` (batches that failed at least once; a cancellation at shutdown is none)"+`,
all with the label `+"`kind`"+`, and `+"`speculapro_stream_stage_duration_seconds{stage=\"write\"}`"+`.`).
		Fields(pgsystem.URLFields()...).
		Fields(
			service.NewStringEnumField(prhFieldKind, string(event.KindTransaction), string(event.KindAccountEvent)).
				Description("The kind of event the batches carry.").
				Default(string(event.KindTransaction)),
			service.NewOutputMaxInFlightField().
				Description("Batches written at once, each in its own database transaction and connection. The `kafka_franz` input never hands out a partition's next records before its earlier ones are acked, so writers never reorder a partition.").
				Default(4),
			service.NewDurationField(prhFieldInitialBackoff).
				Description("Backoff before the first retry of a failed batch; it doubles per retry.").
				Default("100ms").
				Advanced(),
			service.NewDurationField(prhFieldMaxBackoff).
				Description("Longest backoff between two attempts at a failed batch.").
				Default("30s").
				Advanced(),
			service.NewDurationField(prhFieldAttemptTimeout).
				Description("Longest one attempt at a batch may take (for example, waiting on a lock) before it counts as failed and is retried.").
				Default("60s").
				Advanced(),
			service.NewDurationField(prhFieldStartupTimeout).
				Description("How long the start-up role check waits for PostgreSQL to answer before the process gives up starting.").
				Default("30s").
				Advanced(),
		).
		Example("Transactions", "", `
output:
  pg_rule_hits:
    kind: transaction
`)
}

func init() {
	service.MustRegisterBatchOutput("pg_rule_hits", pgRuleHitsSpec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
			maxInFlight, err := conf.FieldMaxInFlight()
			if err != nil {
				return nil, service.BatchPolicy{}, 0, err
			}
			out, err := newPgRuleHitsFromConfig(conf, mgr, maxInFlight)
			if err != nil {
				return nil, service.BatchPolicy{}, 0, err
			}
			return out, service.BatchPolicy{}, maxInFlight, nil
		})
}

// pgRuleHits is the pg_rule_hits output.
type pgRuleHits struct {
	kind           event.Kind
	table          string // the stage timer's label, as event_decode sets it
	pool           *pgsystem.Pool
	policy         *pgretry.Policy
	attemptTimeout time.Duration
	log            *service.Logger
	m              *streamMetrics
	// withoutCases writes alerts outside any case: only the package's
	// benchmark sets it, to time the same write without cases in the same
	// run. No config field reaches it.
	withoutCases bool
}

// prhOptions are the settings of a pgRuleHits.
type prhOptions struct {
	url            string
	kind           event.Kind
	maxConns       int
	initialBackoff time.Duration
	maxBackoff     time.Duration
	attemptTimeout time.Duration
	startupTimeout time.Duration
}

func newPgRuleHitsFromConfig(conf *service.ParsedConfig, mgr *service.Resources, maxInFlight int) (*pgRuleHits, error) {
	var o prhOptions
	var err error
	if o.url, err = pgsystem.URLFromParsed(conf); err != nil {
		return nil, err
	}
	kind, err := conf.FieldString(prhFieldKind)
	if err != nil {
		return nil, err
	}
	o.kind = event.Kind(kind)
	if o.initialBackoff, err = conf.FieldDuration(prhFieldInitialBackoff); err != nil {
		return nil, err
	}
	if o.maxBackoff, err = conf.FieldDuration(prhFieldMaxBackoff); err != nil {
		return nil, err
	}
	if o.attemptTimeout, err = conf.FieldDuration(prhFieldAttemptTimeout); err != nil {
		return nil, err
	}
	if o.startupTimeout, err = conf.FieldDuration(prhFieldStartupTimeout); err != nil {
		return nil, err
	}
	o.maxConns = maxInFlight
	return newPgRuleHits(context.Background(), o, mgr)
}

// newPgRuleHits builds the pool without I/O; Connect runs the start-up role
// check: the stream role is the one component of the stream that must
// bypass row-level security, so it refuses a wrong role before it writes
// anything.
func newPgRuleHits(_ context.Context, o prhOptions, mgr *service.Resources) (*pgRuleHits, error) {
	if o.maxBackoff < o.initialBackoff {
		return nil, fmt.Errorf("pg_rule_hits: %s (%s) must not be shorter than %s (%s)",
			prhFieldMaxBackoff, o.maxBackoff, prhFieldInitialBackoff, o.initialBackoff)
	}
	if o.kind != event.KindTransaction && o.kind != event.KindAccountEvent {
		return nil, fmt.Errorf("pg_rule_hits: %s must be %s or %s, got %q", prhFieldKind, event.KindTransaction, event.KindAccountEvent, o.kind)
	}
	out := &pgRuleHits{
		kind:           o.kind,
		table:          o.kind.Table(),
		attemptTimeout: o.attemptTimeout,
		log:            mgr.Logger(),
		m:              newStreamMetrics(mgr.Metrics()),
	}
	// rule_hits has no month partitions to wait for: every other fault is
	// retried here, a lost connection handed to the engine's reconnect.
	out.policy = &pgretry.Policy{
		Initial: o.initialBackoff, Max: o.maxBackoff,
		Retries: out.m.retries, Faults: out.m.faults, Label: string(o.kind),
		Log: out.log, RetryLine: logStreamBatchRetry,
	}
	var err error
	out.pool, err = pgsystem.Open(pgsystem.Options{
		Component: "pg_rule_hits",
		URL:       o.url,
		// One connection per writer, and one for the start-up check and a
		// writer's retry while a broken connection is replaced.
		MaxConns:       max(o.maxConns, 1) + 1,
		StartupTimeout: o.startupTimeout,
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Connect reaches PostgreSQL: the first time with the start-up role check (a
// role that cannot bypass row-level security stops the process with the
// documented line), after a lost connection by pinging until it answers
// (the policy's own backoff, each wait logged and counted as a retry), so
// the engine reports the output connected only while PostgreSQL answers.
func (o *pgRuleHits) Connect(ctx context.Context) error {
	if err := o.pool.CheckOnce(ctx); err != nil {
		return err
	}
	return o.policy.Reconnect(ctx, "pg_rule_hits", o.pool.Ping)
}

// WriteBatch stores the batch's hits, alerts and outbox rows. It returns nil
// only once the database transaction has committed; otherwise
// service.ErrNotConnected when the connection to PostgreSQL was lost (the
// engine connects again and writes the batch again) or the context's error
// (shutdown). Every other failure is retried here (pgretry).
func (o *pgRuleHits) WriteBatch(ctx context.Context, batch service.MessageBatch) error {
	start := time.Now()
	var (
		rows                  []hitRow
		undecodable, rejected int
	)
	type hitKey struct{ ws, rule, ev event.UUID }
	seen := map[hitKey]struct{}{}
	progress, evals := progressOf(batch), evaluations{}
	for _, msg := range batch {
		if msg.GetError() != nil {
			undecodable++
			continue
		}
		evals.add(msg)
		env, err := eventmsg.Of(msg, o.kind)
		if err != nil {
			undecodable++
			continue
		}
		hs, bad := hitsOf(msg, env)
		rejected += bad
		for _, h := range hs {
			// The same event twice in a batch (a producer's retry) is
			// written once.
			k := hitKey{h.workspace, h.rule, h.eventID}
			if _, ok := seen[k]; ok {
				continue
			}
			seen[k] = struct{}{}
			rows = append(rows, h)
		}
	}
	// Key order: two processes writing overlapping batches (a rebalance)
	// then take their row locks in the same order and cannot deadlock.
	slices.SortFunc(rows, func(a, b hitRow) int {
		return cmp.Or(slices.Compare(a.workspace[:], b.workspace[:]), slices.Compare(a.rule[:], b.rule[:]),
			slices.Compare(a.eventID[:], b.eventID[:]))
	})

	var res hitsResult
	evalRows := evals.rows()
	if len(rows) > 0 || len(progress.topics) > 0 || len(evalRows.ws) > 0 {
		err := o.policy.Batch().Do(ctx, len(rows), func(ctx context.Context) error {
			r, err := o.store(ctx, rows, progress, evalRows)
			if err != nil {
				return err
			}
			res = r
			return nil
		})
		if err != nil {
			return err
		}
	}
	o.m.stage.Timing(time.Since(start).Nanoseconds(), o.table, "write")

	if undecodable > 0 {
		o.m.skipped.Incr(int64(undecodable), string(o.kind), "undecodable")
		applog.With(o.log, "count", undecodable).Warn(logStreamUndecodable)
	}
	if rejected += len(res.rejected); rejected > 0 {
		o.m.skipped.Incr(int64(rejected), string(o.kind), "rejected")
		var codes []string
		for _, err := range res.rejected {
			if code, _ := pgclass.Code(err); !slices.Contains(codes, code) {
				codes = append(codes, code)
			}
		}
		slices.Sort(codes)
		applog.With(o.log, "count", rejected, "codes", strings.Join(codes, ",")).Warn(logStreamRejected)
	}
	o.countStored(res.stats)
	return nil
}

// countStored counts what a committed batch created.
func (o *pgRuleHits) countStored(s hitsStats) {
	kind := string(o.kind)
	o.m.batches.Incr(1, kind)
	o.m.hitsStored.Incr(s.hits, kind, rules.ModeLive)
	o.m.hitsStored.Incr(s.shadowHits, kind, rules.ModeShadow)
	o.m.alerts.Incr(s.alerts, kind)
	o.m.cases.Incr(s.casesOpened, kind)
	o.m.outbox.Incr(s.deliveries, kind, "webhook_deliveries")
	o.m.outbox.Incr(s.notifications, kind, "notifications")
}

// Close closes the pool.
func (o *pgRuleHits) Close(context.Context) error {
	o.pool.Close()
	return nil
}
