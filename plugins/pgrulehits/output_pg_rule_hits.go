package pgrulehits

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/applog"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/eventmsg"
	"github.com/speculapro/speculapro/internal/pgclass"
	"github.com/speculapro/speculapro/internal/pgsystem"
	"github.com/speculapro/speculapro/internal/pgwrite"
	"github.com/speculapro/speculapro/internal/retry"
)

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

func pgRuleHitsSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("The stream evaluator's write: stores what `rule_eval` found on each event (rule hits), raises an alert per hit that asks for one, and queues each new alert's webhook deliveries and notifications, all in one database transaction per batch, exactly once.").
		Description(`
Reads each message's event envelope (from `+"`event_decode`"+`) and the hits `+"`rule_eval`"+` put in its metadata
(`+"`@rule_eval.hits`"+`). Per batch, in ONE database transaction, with one statement per table set (arrays, not
one statement per hit):

1. a `+"`rule_hits`"+` row per rule and event (`+"`UNIQUE (workspace_id, rule_id, event_id)`"+`, `+"`ON CONFLICT DO NOTHING`"+`),
   recording the rule's version, score and the feature values the rule read (`+"`details.reads`"+`);
2. for each hit whose rule has `+"`alert: true`"+`, an alert with `+"`dedupe_key`"+` `+"`<rule_id>:<event_id>`"+`
   (`+"`ON CONFLICT DO NOTHING`"+`), its severity and title (the rule's description, else its name) from the rule;
3. for each alert this transaction created, and only those: a `+"`webhook_deliveries`"+` row (`+"`event_type`"+`
   `+"`alert.created`"+`, `+"`event_id`"+` the alert's id) for every enabled webhook endpoint of the workspace whose
   `+"`event_types`"+` is empty or contains `+"`alert.created`"+`, and a `+"`notifications`"+` row (dedupe key
   `+"`alert.created:<alert_id>:<subscription_id>`"+`) for every enabled notification subscription whose
   `+"`event_types`"+` allow it and whose `+"`min_severity`"+` the alert meets. The worker sends them.

4. for each topic partition of the batch, its highest offset in `+"`stream_progress`"+`: from then on every record up to
   it is known to be evaluated and stored, so `+"`rule_eval`"+` leaves such a record alone when it is read again inside the
   replay window (its running totals would be today's, not its own).

So a replayed event, a batch written again after a crash, or the same event written by two stream processes at
once (a rebalance) creates no second hit, alert, delivery or notification: the unique keys decide, and the outbox
rows follow only the alerts actually inserted. The output reports a batch done, and the input commits its offsets,
only after the transaction has committed. A batch without hits and without `+"`kafka_franz`"+` metadata touches no database.

### Failures

A batch that fails (PostgreSQL down, a lock timeout, a deadlock) is tried again, the same batch, with exponential
backoff and jitter from `+"`initial_backoff`"+` up to `+"`max_backoff`"+`; every retry logs
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

`+"`speculapro_stream_batches_total`, `_rule_hits_stored_total` (hits new to the table), `_alerts_created_total`, `_outbox_queued_total{outbox}` (webhook_deliveries, notifications), `_records_skipped_total{reason}` (undecodable, rejected), `_retries_total` (one per backoff that followed a failed attempt), `_faults_total` (batches that failed at least once; a cancellation at shutdown is none)"+`,
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
	initialBackoff time.Duration
	maxBackoff     time.Duration
	attemptTimeout time.Duration
	log            *service.Logger
	m              *streamMetrics
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
		table:          pgwrite.TableOf(o.kind),
		initialBackoff: o.initialBackoff,
		maxBackoff:     o.maxBackoff,
		attemptTimeout: o.attemptTimeout,
		log:            mgr.Logger(),
		m:              newStreamMetrics(mgr.Metrics()),
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

// Connect runs the start-up role check once (a role that cannot bypass
// row-level security stops the process with the documented line); after that
// the pool connects on demand and replaces broken connections itself.
func (o *pgRuleHits) Connect(ctx context.Context) error { return o.pool.CheckOnce(ctx) }

// hitRow is one rule_hits row to write.
type hitRow struct {
	workspace  event.UUID
	rule       event.UUID
	version    int32
	eventID    event.UUID
	occurredAt time.Time
	customer   string // UUID text, "" for none
	account    string
	score      string // decimal text, "" for none
	details    string // JSON object
	alert      bool
}

// WriteBatch stores the batch's hits, alerts and outbox rows. It returns nil
// only once the database transaction has committed; it returns only the
// context's error otherwise (shutdown), because every other failure is
// retried.
func (o *pgRuleHits) WriteBatch(ctx context.Context, batch service.MessageBatch) error {
	start := time.Now()
	var (
		rows                  []hitRow
		undecodable, rejected int
	)
	type hitKey struct{ ws, rule, ev event.UUID }
	seen := map[hitKey]struct{}{}
	progress := progressOf(batch)
	for _, msg := range batch {
		if msg.GetError() != nil {
			undecodable++
			continue
		}
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
	if len(rows) > 0 || len(progress.topics) > 0 {
		faulted := false // the batch's fault is counted once
		err := retry.Do(ctx, o.policy(len(rows), &faulted), func(ctx context.Context, _ int) error {
			r, err := o.store(ctx, rows, progress)
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
	o.m.batches.Incr(1, string(o.kind))
	o.m.hitsStored.Incr(res.stats.hits, string(o.kind))
	o.m.alerts.Incr(res.stats.alerts, string(o.kind))
	o.m.outbox.Incr(res.stats.deliveries, string(o.kind), "webhook_deliveries")
	o.m.outbox.Incr(res.stats.notifications, string(o.kind), "notifications")
	return nil
}

// policy is the retry policy of one batch: no attempt limit (a failure an
// operator can fix must not skip an alert), the batch's fault counted once,
// a retry per backoff that follows.
func (o *pgRuleHits) policy(rows int, faulted *bool) retry.Policy {
	return retry.Policy{
		Initial: o.initialBackoff,
		Max:     o.maxBackoff,
		Jitter:  pgwrite.RetryJitter,
		OnRetry: func(_ int, err error, backoff time.Duration) {
			if !*faulted {
				*faulted = true
				o.m.faults.Incr(1, string(o.kind))
			}
			o.m.retries.Incr(1, string(o.kind))
			applog.With(o.log, "rows", rows, "err", err.Error(), "backoff", backoff.Round(time.Millisecond).String()).Error(logStreamBatchRetry)
		},
	}
}

// hitsStats counts what one write created.
type hitsStats struct {
	hits, alerts, deliveries, notifications int64
}

func (s *hitsStats) add(o hitsStats) {
	s.hits += o.hits
	s.alerts += o.alerts
	s.deliveries += o.deliveries
	s.notifications += o.notifications
}

type hitsResult struct {
	stats    hitsStats
	rejected []error // one per hit the database refused
}

// store makes one attempt at rows in one transaction and, when a row's data
// made it fail, once more in one transaction that isolates the bad rows by
// bisecting under savepoints and stores the rest.
func (o *pgRuleHits) store(ctx context.Context, rows []hitRow, progress partitionProgress) (hitsResult, error) {
	actx, cancel := context.WithTimeout(ctx, o.attemptTimeout)
	defer cancel()
	var res hitsResult
	err := pgwrite.InTx(actx, o.pool.Pool, func(tx pgx.Tx) error {
		var err error
		if res.stats, err = writeHits(actx, tx, rows); err != nil {
			return err
		}
		return writeProgress(actx, tx, progress)
	})
	if err == nil || !pgclass.IsRowFault(err) {
		return res, err
	}
	ictx, icancel := context.WithTimeout(ctx, pgwrite.IsolateTimeoutFactor*o.attemptTimeout)
	defer icancel()
	res = hitsResult{}
	err = pgwrite.InTx(ictx, o.pool.Pool, func(tx pgx.Tx) error {
		if err := isolateHits(ictx, tx, rows, &res); err != nil {
			return err
		}
		return writeProgress(ictx, tx, progress)
	})
	if err != nil {
		return hitsResult{}, err
	}
	return res, nil
}

// isolateHits writes rows under a savepoint; when a row's data fails it, it
// rolls back to the savepoint and tries each half, down to single rows, which
// are rejected. Any other failure ends the attempt.
func isolateHits(ctx context.Context, tx pgx.Tx, rows []hitRow, res *hitsResult) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("creating a savepoint: %w", err)
	}
	stats, err := writeHits(ctx, sp, rows)
	if err == nil {
		if err := sp.Commit(ctx); err != nil {
			return fmt.Errorf("releasing a savepoint: %w", err)
		}
		res.stats.add(stats)
		return nil
	}
	if rbErr := sp.Rollback(ctx); rbErr != nil {
		return fmt.Errorf("rolling back to a savepoint after %w: %v", err, rbErr)
	}
	if !pgclass.IsRowFault(err) {
		return err
	}
	if len(rows) == 1 {
		res.rejected = append(res.rejected, err)
		return nil
	}
	mid := len(rows) / 2
	if err := isolateHits(ctx, tx, rows[:mid], res); err != nil {
		return err
	}
	return isolateHits(ctx, tx, rows[mid:], res)
}

// The batch's statements. Rows arrive in key order; the joins with rules
// drop a hit whose rule was deleted after it fired (nothing to point at)
// instead of failing the batch on the foreign key, and take severity from
// the rule, so the CHECK constraints hold by construction.
const (
	insertRuleHits = `
INSERT INTO speculapro.rule_hits
       (workspace_id, rule_id, rule_version, event_id, event_occurred_at, customer_id, account_id, score, details)
SELECT i.ws, i.rule, i.version, i.ev, i.occurred_at, NULLIF(i.cust, '')::uuid, NULLIF(i.acc, '')::uuid,
       NULLIF(i.score, '')::numeric, i.details::jsonb
  FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::uuid[], $5::timestamptz[], $6::text[], $7::text[], $8::text[], $9::text[])
       WITH ORDINALITY AS i(ws, rule, version, ev, occurred_at, cust, acc, score, details, n)
  JOIN speculapro.rules r ON r.id = i.rule AND r.workspace_id = i.ws
 ORDER BY i.n
    ON CONFLICT (workspace_id, rule_id, event_id) DO NOTHING`

	// One statement for the alerts and their outbox rows: the outbox CTEs
	// read only new_alerts, the alerts this statement inserted, so an alert
	// that already existed (a replay, the other process won) queues nothing.
	insertAlertsAndOutbox = `
WITH i AS (
    SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[]) WITH ORDINALITY AS i(ws, rule, ev, n)
), new_alerts AS (
    INSERT INTO speculapro.alerts
           (workspace_id, dedupe_key, rule_id, rule_hit_id, customer_id, account_id, event_id, severity, title, details)
    SELECT h.workspace_id, h.rule_id::text || ':' || h.event_id::text, h.rule_id, h.id, h.customer_id, h.account_id,
           h.event_id, r.severity, coalesce(nullif(r.description, ''), r.name),
           h.details || jsonb_build_object('rule_version', h.rule_version, 'score', h.score,
                                           'event_occurred_at', h.event_occurred_at)
      FROM i
      JOIN speculapro.rule_hits h ON h.workspace_id = i.ws AND h.rule_id = i.rule AND h.event_id = i.ev
      JOIN speculapro.rules r ON r.id = h.rule_id
     ORDER BY i.n
        ON CONFLICT (workspace_id, dedupe_key) DO NOTHING
    RETURNING id, workspace_id, rule_id, event_id, customer_id, account_id, severity, title, details, created_at
), payloads AS (
    SELECT a.id, a.workspace_id, a.severity,
           jsonb_build_object('type', '` + eventAlertCreated + `', 'id', a.id, 'workspace_id', a.workspace_id,
                              'created_at', a.created_at,
                              'alert', jsonb_build_object('id', a.id, 'rule_id', a.rule_id, 'event_id', a.event_id,
                                                          'customer_id', a.customer_id, 'account_id', a.account_id,
                                                          'severity', a.severity, 'title', a.title,
                                                          'details', a.details)) AS payload
      FROM new_alerts a
), deliveries AS (
    INSERT INTO speculapro.webhook_deliveries (workspace_id, endpoint_id, event_type, event_id, payload)
    SELECT p.workspace_id, e.id, '` + eventAlertCreated + `', p.id, p.payload
      FROM payloads p
      JOIN speculapro.webhook_endpoints e
        ON e.workspace_id = p.workspace_id AND e.enabled
       AND (cardinality(e.event_types) = 0 OR '` + eventAlertCreated + `' = ANY (e.event_types))
     ORDER BY p.id, e.id
        ON CONFLICT (endpoint_id, event_id) DO NOTHING
    RETURNING 1
), notes AS (
    INSERT INTO speculapro.notifications (workspace_id, dedupe_key, kind, channel, recipient, payload)
    SELECT p.workspace_id, '` + eventAlertCreated + `:' || p.id::text || ':' || s.id::text, '` + eventAlertCreated + `',
           s.channel, s.recipient, p.payload
      FROM payloads p
      JOIN speculapro.notification_subscriptions s
        ON s.workspace_id = p.workspace_id AND s.enabled
       AND (cardinality(s.event_types) = 0 OR '` + eventAlertCreated + `' = ANY (s.event_types))
       AND array_position(ARRAY['low', 'medium', 'high', 'critical'], p.severity)
        >= array_position(ARRAY['low', 'medium', 'high', 'critical'], s.min_severity)
     ORDER BY p.id, s.id
        ON CONFLICT (workspace_id, dedupe_key) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM new_alerts), (SELECT count(*) FROM deliveries), (SELECT count(*) FROM notes)`
)

// writeHits writes rows, their alerts and the alerts' outbox rows with two
// statements.
func writeHits(ctx context.Context, tx pgx.Tx, rows []hitRow) (hitsStats, error) {
	var s hitsStats
	n := len(rows)
	if n == 0 {
		return s, nil
	}
	var (
		ws, rules, evs     = make([]event.UUID, n), make([]event.UUID, n), make([]event.UUID, n)
		versions           = make([]int32, n)
		occurred           = make([]time.Time, n)
		custs, accs, score = make([]string, n), make([]string, n), make([]string, n)
		details            = make([]string, n)
		aWS, aRules, aEvs  []event.UUID
	)
	for i, r := range rows {
		ws[i], rules[i], evs[i], versions[i], occurred[i] = r.workspace, r.rule, r.eventID, r.version, r.occurredAt
		custs[i], accs[i], score[i], details[i] = r.customer, r.account, r.score, r.details
		if r.alert {
			aWS, aRules, aEvs = append(aWS, r.workspace), append(aRules, r.rule), append(aEvs, r.eventID)
		}
	}
	tag, err := tx.Exec(ctx, insertRuleHits, ws, rules, versions, evs, occurred, custs, accs, score, details)
	if err != nil {
		return s, fmt.Errorf("inserting %d rule hits: %w", n, err)
	}
	s.hits = tag.RowsAffected()
	if len(aWS) == 0 {
		return s, nil
	}
	if err := tx.QueryRow(ctx, insertAlertsAndOutbox, aWS, aRules, aEvs).Scan(&s.alerts, &s.deliveries, &s.notifications); err != nil {
		return s, fmt.Errorf("inserting alerts and outbox rows for %d hits: %w", len(aWS), err)
	}
	return s, nil
}

// upsertProgress raises each partition's stored offset, never lowers it
// (an older batch of a partition can commit after a newer one only across
// a rebalance, and its results are stored either way).
const upsertProgress = `
INSERT INTO speculapro.stream_progress AS p (topic, kafka_partition, stored_offset)
SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[])
    ON CONFLICT (topic, kafka_partition) DO UPDATE
   SET stored_offset = excluded.stored_offset, updated_at = now()
 WHERE excluded.stored_offset > p.stored_offset`

// partitionProgress is the highest offset of each topic partition in a
// batch, in key order (so two writers lock the rows in the same order).
type partitionProgress struct {
	topics     []string
	partitions []int32
	offsets    []int64
}

// progressOf reads the kafka_franz metadata of every message of the batch,
// readable or not: once the batch commits, all of them are done.
func progressOf(batch service.MessageBatch) partitionProgress {
	type tp struct {
		topic     string
		partition int32
	}
	high := map[tp]int64{}
	for _, msg := range batch {
		topic, _ := msg.MetaGet("kafka_topic")
		part, err1 := strconv.ParseInt(metaOr(msg, "kafka_partition"), 10, 32)
		off, err2 := strconv.ParseInt(metaOr(msg, "kafka_offset"), 10, 64)
		if topic == "" || err1 != nil || err2 != nil {
			continue
		}
		k := tp{topic, int32(part)}
		if o, ok := high[k]; !ok || off > o {
			high[k] = off
		}
	}
	keys := make([]tp, 0, len(high))
	for k := range high {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b tp) int { return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition)) })
	var p partitionProgress
	for _, k := range keys {
		p.topics, p.partitions, p.offsets = append(p.topics, k.topic), append(p.partitions, k.partition), append(p.offsets, high[k])
	}
	return p
}

func metaOr(msg *service.Message, key string) string {
	v, _ := msg.MetaGet(key)
	return v
}

// writeProgress records, with the batch's results, how far each partition
// is stored.
func writeProgress(ctx context.Context, tx pgx.Tx, p partitionProgress) error {
	if len(p.topics) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, upsertProgress, p.topics, p.partitions, p.offsets); err != nil {
		return fmt.Errorf("recording the progress of %d partitions: %w", len(p.topics), err)
	}
	return nil
}

// hitsOf reads the rows of msg's rule_eval hits; bad counts the hits that
// cannot be stored (malformed, which only a pipeline step between rule_eval
// and this output could cause).
func hitsOf(msg *service.Message, env *event.Envelope) (rows []hitRow, bad int) {
	v, ok := msg.MetaGetMut(metaRuleEval)
	if !ok {
		return nil, 0
	}
	meta, ok := v.(map[string]any)
	if !ok {
		return nil, 1
	}
	var list []any
	switch hs := meta["hits"].(type) {
	case nil:
		return nil, 0
	case []any:
		list = hs
	case []map[string]any:
		for _, h := range hs {
			list = append(list, h)
		}
	default:
		return nil, 1
	}
	if len(list) == 0 {
		// Nearly every event: spare it the parties' IDs.
		return nil, 0
	}
	var customer, account string
	if env.CustomerExternalID != "" {
		customer = event.CustomerID(env.WorkspaceID, env.CustomerExternalID).String()
	}
	if env.AccountExternalID != "" {
		account = event.AccountID(env.WorkspaceID, env.AccountExternalID).String()
	}
	for _, h := range list {
		row, err := hitRowOf(h, env)
		if err != nil {
			bad++
			continue
		}
		row.customer, row.account = customer, account
		rows = append(rows, row)
	}
	return rows, bad
}

var (
	errMalformedHit = errors.New("malformed rule hit")
	// scorePattern is what numeric(9,4), rules.score's and rule_hits.score's
	// type, accepts.
	scorePattern = regexp.MustCompile(`^-?[0-9]{1,5}(\.[0-9]{1,4})?$`)
)

// hitRowOf reads one hit as rule_eval wrote it.
func hitRowOf(v any, env *event.Envelope) (hitRow, error) {
	h, ok := v.(map[string]any)
	if !ok {
		return hitRow{}, errMalformedHit
	}
	row := hitRow{workspace: env.WorkspaceID, eventID: env.ID, occurredAt: env.OccurredAt}
	id, _ := h["rule_id"].(string)
	rule, err := event.ParseUUID(id)
	if err != nil || rule.IsZero() {
		return hitRow{}, errMalformedHit
	}
	row.rule = rule
	version, ok := intOf(h["version"])
	if !ok || version < 1 || version > math.MaxInt32 {
		return hitRow{}, errMalformedHit
	}
	row.version = int32(version)
	if row.score, ok = scoreOf(h["score"]); !ok {
		return hitRow{}, errMalformedHit
	}
	row.alert, _ = h["alert"].(bool)
	details := map[string]any{"rule": h["rule"], "action": h["action"], "severity": h["severity"], "reads": h["reads"]}
	b, err := json.Marshal(withoutNUL(details))
	if err != nil {
		// A value JSON cannot carry (NaN, a channel): keep the hit, not
		// what it read.
		details["reads"] = map[string]any{}
		if b, err = json.Marshal(withoutNUL(details)); err != nil {
			return hitRow{}, errMalformedHit
		}
	}
	row.details = string(b)
	return row, nil
}

func intOf(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint64:
		return int64(n), n <= math.MaxInt64
	case float64:
		return int64(n), n == math.Trunc(n)
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	case string:
		i, err := strconv.ParseInt(n, 10, 64)
		return i, err == nil
	}
	return 0, false
}

// scoreOf is a hit's score as numeric(9,4) text, "" for none.
func scoreOf(v any) (string, bool) {
	var s string
	switch n := v.(type) {
	case nil:
		return "", true
	case json.Number:
		s = n.String()
	case string:
		s = n
	case int64:
		s = strconv.FormatInt(n, 10)
	case int:
		s = strconv.Itoa(n)
	case float64:
		s = strconv.FormatFloat(n, 'f', -1, 64)
	default:
		return "", false
	}
	if s == "" {
		return "", true
	}
	// Trailing zeros of the fraction say nothing and may exceed its 4 digits.
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s, scorePattern.MatchString(s)
}

// withoutNUL replaces NUL in every string of v, keys included: jsonb refuses
// it (22P05), and a rule hit must not be lost over an event type's bytes.
func withoutNUL(v any) any {
	switch x := v.(type) {
	case string:
		return strings.ReplaceAll(x, "\x00", "\uFFFD")
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[strings.ReplaceAll(k, "\x00", "\uFFFD")] = withoutNUL(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = withoutNUL(e)
		}
		return s
	}
	return v
}

// Close closes the pool.
func (o *pgRuleHits) Close(context.Context) error {
	o.pool.Close()
	return nil
}
