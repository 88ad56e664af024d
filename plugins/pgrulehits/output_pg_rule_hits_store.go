package pgrulehits

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/pgclass"
	"github.com/speculapro/speculapro/internal/pgwrite"
)

// hitsStats counts what one write created.
type hitsStats struct {
	hits, shadowHits, alerts, deliveries, notifications, casesOpened int64
}

func (s *hitsStats) add(o hitsStats) {
	s.hits += o.hits
	s.shadowHits += o.shadowHits
	s.alerts += o.alerts
	s.deliveries += o.deliveries
	s.notifications += o.notifications
	s.casesOpened += o.casesOpened
}

type hitsResult struct {
	stats    hitsStats
	rejected []error // one per hit the database refused
}

// store makes one attempt at rows in one transaction and, when a row's data
// made it fail, once more in one transaction that isolates the bad rows by
// bisecting under savepoints and stores the rest.
func (o *pgRuleHits) store(ctx context.Context, rows []hitRow, progress partitionProgress, evals evaluationRows) (hitsResult, error) {
	actx, cancel := context.WithTimeout(ctx, o.attemptTimeout)
	defer cancel()
	var res hitsResult
	err := o.inTx(actx, func(tx pgx.Tx) error {
		var err error
		if res.stats, err = writeHits(actx, tx, rows, !o.withoutCases); err != nil {
			return err
		}
		return writeEvaluationsAndProgress(actx, tx, evals, progress)
	})
	if err == nil || !pgclass.IsRowFault(err) {
		return res, err
	}
	ictx, icancel := context.WithTimeout(ctx, pgwrite.IsolateTimeoutFactor*o.attemptTimeout)
	defer icancel()
	err = o.inTx(ictx, func(tx pgx.Tx) error {
		res = hitsResult{}
		if err := isolateHits(ictx, tx, rows, !o.withoutCases, &res); err != nil {
			return err
		}
		return writeEvaluationsAndProgress(ictx, tx, evals, progress)
	})
	if err != nil {
		return hitsResult{}, err
	}
	return res, nil
}

// isolateHits writes rows under a savepoint; when a row's data fails it, it
// rolls back to the savepoint and tries each half, down to single rows, which
// are rejected. Any other failure ends the attempt.
func isolateHits(ctx context.Context, tx pgx.Tx, rows []hitRow, cases bool, res *hitsResult) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("creating a savepoint: %w", err)
	}
	stats, err := writeHits(ctx, sp, rows, cases)
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
	if err := isolateHits(ctx, tx, rows[:mid], cases, res); err != nil {
		return err
	}
	return isolateHits(ctx, tx, rows[mid:], cases, res)
}

// The batch's statements. Rows arrive in key order; the joins with rules
// drop a hit whose rule was deleted after it fired (nothing to point at)
// instead of failing the batch on the foreign key, and take severity from
// the rule, so the CHECK constraints hold by construction.
const (
	insertRuleHits = `
WITH new_hits AS (
INSERT INTO speculapro.rule_hits
       (workspace_id, rule_id, rule_version, event_id, event_occurred_at, customer_id, account_id, score, details, shadow)
SELECT i.ws, i.rule, i.version, i.ev, i.occurred_at, NULLIF(i.cust, '')::uuid, NULLIF(i.acc, '')::uuid,
       NULLIF(i.score, '')::numeric, i.details::jsonb, i.shadow
  FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::uuid[], $5::timestamptz[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bool[])
       WITH ORDINALITY AS i(ws, rule, version, ev, occurred_at, cust, acc, score, details, shadow, n)
  JOIN speculapro.rules r ON r.id = i.rule AND r.workspace_id = i.ws
 ORDER BY i.n
    ON CONFLICT (workspace_id, rule_id, event_id) DO NOTHING
RETURNING shadow
)
SELECT count(*) FILTER (WHERE NOT shadow), count(*) FILTER (WHERE shadow) FROM new_hits`

	// One statement for the alerts, their cases and their outbox rows. Each
	// alert not stored yet is inserted under its dedupe key into the case
	// casesOfAlerts opened or joined for its group, which stays locked until
	// the commit. The outbox and the case steps read only new_alerts, the
	// alerts this statement inserted, so an alert that already existed (a
	// replay) queues nothing. An alert another process stored after this
	// statement began looked new to fresh and conflicts on its insert, but
	// its group's case was opened or joined for it already: the last column
	// counts such alerts, and writeHits fails the transaction when there is
	// one (see errAlertsStoredMeanwhile).
	insertAlertsAndOutbox = `
WITH ` + batchHits + `, ` + alertingHits + `, ` + casesOfAlerts + `, new_alerts AS (
    INSERT INTO speculapro.alerts
           (id, workspace_id, dedupe_key, rule_id, rule_hit_id, customer_id, account_id, event_id, severity, title,
            details, case_id)
    SELECT f.alert_id, f.workspace_id, f.dedupe_key, f.rule_id, f.hit_id, f.customer_id, f.account_id, f.event_id,
           f.severity, f.title, f.details, c.id
      FROM fresh f
     CROSS JOIN LATERAL (SELECT ((SELECT ids FROM case_of) ->> (f.workspace_id::text || '/' || f.group_key))::uuid AS id) c
     WHERE c.id IS NOT NULL
     ORDER BY f.n
        ON CONFLICT (workspace_id, dedupe_key) DO NOTHING
    RETURNING id, workspace_id, rule_id, event_id, customer_id, account_id, severity, title, details, case_id, created_at
), ` + alertOutbox + `, ` + caseSteps + `
SELECT (SELECT count(*) FROM new_alerts), (SELECT count(*) FROM deliveries) + (SELECT count(*) FROM case_deliveries),
       (SELECT count(*) FROM notes), (SELECT count(*) FROM steps WHERE kind = 'opened'),
       (SELECT count(DISTINCT alert_id) FROM fresh) - (SELECT count(*) FROM new_alerts)`

	// alertOutbox (CTEs after new_alerts): each new alert's payload, its
	// webhook deliveries and its notifications.
	alertOutbox = `payloads AS (
    SELECT p.*, jsonb_build_object('type', '` + eventAlertCreated + `', 'id', p.id, 'workspace_id', p.workspace_id,
                                   'created_at', p.created_at, 'alert', p.alert) AS payload
      FROM (SELECT a.id, a.workspace_id, a.severity, a.case_id, a.created_at,
                   jsonb_build_object('id', a.id, 'rule_id', a.rule_id, 'event_id', a.event_id,
                                      'customer_id', a.customer_id, 'account_id', a.account_id,
                                      'severity', a.severity, 'title', a.title, 'details', a.details,
                                      'case_id', a.case_id) AS alert
              FROM new_alerts a) p
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
)`

	// insertAlertsWithoutCases is the alert write with no case: only the
	// package's benchmark runs it (pgRuleHits.withoutCases), as the baseline
	// that the write with cases is measured against in the same run.
	insertAlertsWithoutCases = `
WITH ` + batchHits + `, new_alerts AS (
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
    RETURNING id, workspace_id, rule_id, event_id, customer_id, account_id, severity, title, details, case_id, created_at
), ` + alertOutbox + `
SELECT (SELECT count(*) FROM new_alerts), (SELECT count(*) FROM deliveries), (SELECT count(*) FROM notes), 0`
)

// writeHits writes rows, their alerts, the alerts' cases and the outbox rows
// of both with two statements. A shadow hit is stored, marked, and goes no
// further: it opens no alert and no case.
func writeHits(ctx context.Context, tx pgx.Tx, rows []hitRow, cases bool) (hitsStats, error) {
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
		shadow             = make([]bool, n)
		aWS, aRules, aEvs  []event.UUID
	)
	for i, r := range rows {
		ws[i], rules[i], evs[i], versions[i], occurred[i] = r.workspace, r.rule, r.eventID, r.version, r.occurredAt
		custs[i], accs[i], score[i], details[i], shadow[i] = r.customer, r.account, r.score, r.details, r.shadow
		if r.alert && !r.shadow {
			aWS, aRules, aEvs = append(aWS, r.workspace), append(aRules, r.rule), append(aEvs, r.eventID)
		}
	}
	if err := tx.QueryRow(ctx, insertRuleHits, ws, rules, versions, evs, occurred, custs, accs, score, details, shadow).Scan(&s.hits, &s.shadowHits); err != nil {
		return s, fmt.Errorf("inserting %d rule hits: %w", n, err)
	}
	if len(aWS) == 0 {
		return s, nil
	}
	if !cases {
		if err := tx.QueryRow(ctx, insertAlertsWithoutCases, aWS, aRules, aEvs).Scan(&s.alerts, &s.deliveries, &s.notifications, &s.casesOpened); err != nil {
			return s, fmt.Errorf("inserting alerts without cases and outbox rows for %d hits: %w", len(aWS), err)
		}
		return s, nil
	}
	var meanwhile int64
	if err := tx.QueryRow(ctx, insertAlertsAndOutbox, aWS, aRules, aEvs).Scan(&s.alerts, &s.deliveries, &s.notifications, &s.casesOpened, &meanwhile); err != nil {
		return s, fmt.Errorf("inserting alerts, their cases and outbox rows for %d hits: %w", len(aWS), err)
	}
	if meanwhile > 0 {
		return s, fmt.Errorf("%w: %d of %d", errAlertsStoredMeanwhile, meanwhile, len(aWS))
	}
	return s, nil
}

// errAlertsStoredMeanwhile fails a transaction whose alert statement opened
// or joined a case for an alert that another process (a rebalance hands a
// record to two) stored after the statement began: committed, it would
// leave a case opened with no alert (when the group's case was closed
// meanwhile, there was none to join) or a case changed with no case event.
// The transaction is rolled back and written again (inTx): the new
// statement sees the other process's alert and leaves its case alone.
var errAlertsStoredMeanwhile = errors.New("alerts stored by another process while this batch's were written")

// meanwhileAttempts is how many times in all inTx writes a batch while
// another process keeps storing its alerts first. Each time it does, that
// process has committed them, so the next attempt is only raced by alerts
// stored later still; past this, the batch goes back to the retry policy.
const meanwhileAttempts = 4

// inTx runs fn in a transaction, again while it fails with
// errAlertsStoredMeanwhile (at most meanwhileAttempts times in all).
func (o *pgRuleHits) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := pgwrite.InTx(ctx, o.pool.Pool, fn)
		if !errors.Is(err, errAlertsStoredMeanwhile) || attempt == meanwhileAttempts {
			return err
		}
	}
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
