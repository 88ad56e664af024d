package postgres

import (
	"context"
	"errors"
	"fmt"
	"github.com/speculapro/speculapro/internal/applog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/config"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/eventmsg"
	"github.com/speculapro/speculapro/internal/pgclass"
	"github.com/speculapro/speculapro/internal/retry"
)

const (
	pcuFieldURL            = "url"
	pcuFieldTable          = "table"
	pcuFieldDeadLetter     = "dead_letter"
	pcuFieldInitialBackoff = "initial_backoff"
	pcuFieldMaxBackoff     = "max_backoff"
	pcuFieldAttemptTimeout = "attempt_timeout"
	pcuFieldStartupTimeout = "startup_timeout"
)

// Metadata set on every dead letter, besides the record's own headers (which
// the dead-letter output writes back as headers).
const (
	metaSourceOffset = "source-offset" // topic/partition/offset
	metaErrorCode    = "error-code"    // SQLSTATE of a row the database refused
	metaErrorMessage = "error-message" // why the record was parked, without its values
)

// The spec's log lines.
const (
	logBatchRetry       = "persist: batch failed, retrying"
	logUndecodable      = "persist: sent undecodable records to dead-letter topic"
	logRejected         = "persist: sent records the database refused to dead-letter topic"
	retryJitter         = 0.2
	rollbackTimeout     = 5 * time.Second
	startupCheckBackoff = 500 * time.Millisecond
)

func pgCopyUpsertSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("The persister's write: files each batch of transactions or account events into PostgreSQL in one database transaction, idempotently, and parks what it cannot store on a dead-letter output.").
		Description(`
Per batch, in ONE database transaction:

1. the rows `+"`COPY`"+`'d (binary) straight into the table. A batch with a row already stored (a replay) fails that
   COPY on the primary key and is written again in a new transaction: `+"`COPY`"+` into a per-connection staging
   table, then `+"`INSERT … SELECT … ON CONFLICT (id, occurred_at) DO NOTHING`"+`, so a row already stored is skipped;
2. placeholder customers and accounts for those the batch names that are not stored yet (`+"`placeholder = true`"+`,
   `+"`ON CONFLICT DO NOTHING`"+`; the real record, when it arrives, replaces the placeholder);
3. for transactions, counterparties found or created by their de-duplication fingerprint (once per batch), linked
   to a monitored account whose number has the same keyed fingerprint.

The parties come last, each set in key order, because a row another writer has just created is waited for until
that writer commits: taken last, such locks are held for a round trip, not for the whole batch.

Every key is computed from the event (deterministic IDs), and records repeated within a batch are written once, so
a batch delivered again creates no duplicate of anything. The output reports a batch done, and the input commits
its offsets, only after the transaction has committed.

### Failures

A batch that fails (PostgreSQL down, disk full, a grant or a partition missing, a deadlock) is tried again, the
same batch, with exponential backoff and jitter from `+"`initial_backoff`"+` up to `+"`max_backoff`"+`; every retry
logs `+"`level=ERROR msg=\"persist: batch failed, retrying\" rows=… err=… backoff=…`"+`. It never skips ahead: its
partitions wait until the problem is fixed, while Kafka keeps the data.

A row the database can never accept (SQLSTATE class 22, data exception, or 23, integrity violation, except a
missing partition) is isolated by bisecting the batch within the same transaction and sent to `+"`dead_letter`"+`
with metadata `+"`error-code`"+` (the SQLSTATE) and `+"`error-message`"+`; the rest of the batch is stored.

A record that cannot be read (flagged by `+"`event_decode`"+`, or failing to decode here: not JSON, unknown version,
no id or workspace_id, wrong kind) is sent to `+"`dead_letter`"+` and logged as
`+"`level=WARN msg=\"persist: sent undecodable records to dead-letter topic\" count=…`"+`.

Every dead letter keeps its content and metadata (so, with `+"`kafka_franz`"+`, its key and headers) and gets
`+"`source-offset`"+` (`+"`topic/partition/offset`"+` from the `+"`kafka_franz`"+` input's metadata).

### Start-up check

The constructor checks, before the stream starts, that the database role is a superuser or has BYPASSRLS, and
fails with `+"`persist/stream/worker roles: database role cannot bypass row-level security (set SP_DB_SYSTEM_URL to the speculapro_system role)`"+`
otherwise.

### Metrics

`+"`speculapro_persist_batches_total`, `_rows_stored_total`, `_rows_skipped_total` (already stored, or repeated in the batch), `_placeholders_created_total{entity}`, `_counterparties_created_total`, `_dead_letters_total{reason}`, `_retries_total` (one per backoff that followed a failed attempt), `_faults_total` (batches that failed at least once; a cancellation at shutdown is none), and `speculapro_persist_stage_duration_ns{stage}`"+`
(per-batch work of one stage, not wall-clock), all with the label `+"`table`"+`.`).
		Fields(
			service.NewStringField(pcuFieldURL).
				Description("PostgreSQL URL of a role that bypasses row-level security (speculapro_system). Empty means `SP_DB_SYSTEM_URL`, falling back to `SP_DB_URL`.").
				Secret().
				Default(""),
			service.NewStringEnumField(pcuFieldTable, tableTransactions, tableAccountEvents).
				Description("What the batches carry and where they go: `transactions` (kind transaction) or `account_events` (kind account_event)."),
			service.NewOutputField(pcuFieldDeadLetter).
				Description("Where unreadable records and rows the database refused go, typically a `kafka_franz` output to the topic's `.dlq` twin with `key: ${! @kafka_key }` and `metadata: {include_patterns: [ '.*' ]}`."),
			service.NewOutputMaxInFlightField().
				Description("Concurrent writers: batches written at once, each in its own database transaction and connection. The `kafka_franz` input never hands out a partition's next records before its earlier ones are acked, so writers never reorder a partition.").
				Default(4),
			service.NewDurationField(pcuFieldInitialBackoff).
				Description("Backoff before the first retry of a failed batch; it doubles per retry.").
				Default("100ms").
				Advanced(),
			service.NewDurationField(pcuFieldMaxBackoff).
				Description("Longest backoff between two attempts at a failed batch.").
				Default("30s").
				Advanced(),
			service.NewDurationField(pcuFieldAttemptTimeout).
				Description("Longest one attempt at a batch may take (for example, waiting on a lock) before it counts as failed and is retried.").
				Default("60s").
				Advanced(),
			service.NewDurationField(pcuFieldStartupTimeout).
				Description("How long the start-up role check waits for PostgreSQL to answer before the process gives up starting.").
				Default("30s").
				Advanced(),
		).
		Example("Transactions", "", `
output:
  pg_copy_upsert:
    table: transactions
    max_in_flight: ${SP_PERSIST_WORKERS:4}
    dead_letter:
      kafka_franz:
        topic: ${SP_KAFKA_TOPIC_PREFIX:sp.}txn.ingested.dlq
        key: ${! @kafka_key }
        metadata:
          include_patterns: [ '.*' ]
`)
}

func init() {
	service.MustRegisterBatchOutput("pg_copy_upsert", pgCopyUpsertSpec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
			maxInFlight, err := conf.FieldMaxInFlight()
			if err != nil {
				return nil, service.BatchPolicy{}, 0, err
			}
			out, err := newPgCopyUpsertFromConfig(conf, mgr, maxInFlight)
			if err != nil {
				return nil, service.BatchPolicy{}, 0, err
			}
			return out, service.BatchPolicy{}, maxInFlight, nil
		})
}

// deadLetterSink is where parked records go; an *service.OwnedOutput in
// production.
type deadLetterSink interface {
	WriteBatch(ctx context.Context, b service.MessageBatch) error
}

// pgCopyUpsert is the pg_copy_upsert output.
type pgCopyUpsert struct {
	table          string
	kind           event.Kind
	write          func(ctx context.Context, tx pgx.Tx, rows []*event.Envelope, mode writeMode) (writeStats, error)
	pool           *pgxpool.Pool
	deadLetter     deadLetterSink
	owned          *service.OwnedOutput // deadLetter when built from config; primed and closed here
	primed         bool                 // owned was started, so Close must stop it
	initialBackoff time.Duration
	maxBackoff     time.Duration
	attemptTimeout time.Duration
	log            *service.Logger
	m              *persistMetrics
}

// pcuOptions are the settings of a pgCopyUpsert.
type pcuOptions struct {
	url            string
	table          string
	maxConns       int
	initialBackoff time.Duration
	maxBackoff     time.Duration
	attemptTimeout time.Duration
	startupTimeout time.Duration
}

func newPgCopyUpsertFromConfig(conf *service.ParsedConfig, mgr *service.Resources, maxInFlight int) (*pgCopyUpsert, error) {
	var o pcuOptions
	var err error
	if o.url, err = conf.FieldString(pcuFieldURL); err != nil {
		return nil, err
	}
	if o.url == "" {
		o.url = config.SystemDBURL()
	}
	if o.table, err = conf.FieldString(pcuFieldTable); err != nil {
		return nil, err
	}
	if o.initialBackoff, err = conf.FieldDuration(pcuFieldInitialBackoff); err != nil {
		return nil, err
	}
	if o.maxBackoff, err = conf.FieldDuration(pcuFieldMaxBackoff); err != nil {
		return nil, err
	}
	if o.attemptTimeout, err = conf.FieldDuration(pcuFieldAttemptTimeout); err != nil {
		return nil, err
	}
	if o.startupTimeout, err = conf.FieldDuration(pcuFieldStartupTimeout); err != nil {
		return nil, err
	}
	o.maxConns = maxInFlight
	// The role check runs first, so a refused start builds no dead-letter
	// output (which could only be closed once started).
	out, err := newPgCopyUpsert(context.Background(), o, nil, mgr)
	if err != nil {
		return nil, err
	}
	if out.owned, err = conf.FieldOutput(pcuFieldDeadLetter); err != nil {
		out.pool.Close()
		return nil, err
	}
	out.deadLetter = out.owned
	return out, nil
}

// newPgCopyUpsert opens the pool and runs the start-up role check
// (openSystemPool), so a persister with the wrong role fails while the engine
// builds the stream, before its input has handed out anything.
func newPgCopyUpsert(ctx context.Context, o pcuOptions, dl deadLetterSink, mgr *service.Resources) (*pgCopyUpsert, error) {
	if o.maxBackoff < o.initialBackoff {
		return nil, fmt.Errorf("pg_copy_upsert: %s (%s) must not be shorter than %s (%s)",
			pcuFieldMaxBackoff, o.maxBackoff, pcuFieldInitialBackoff, o.initialBackoff)
	}
	out := &pgCopyUpsert{
		table:          o.table,
		deadLetter:     dl,
		initialBackoff: o.initialBackoff,
		maxBackoff:     o.maxBackoff,
		attemptTimeout: o.attemptTimeout,
		log:            mgr.Logger(),
		m:              newPersistMetrics(mgr.Metrics()),
	}
	switch o.table {
	case tableTransactions:
		out.kind, out.write = event.KindTransaction, writeTransactions
	case tableAccountEvents:
		out.kind, out.write = event.KindAccountEvent, writeAccountEvents
	default:
		return nil, fmt.Errorf("pg_copy_upsert: unknown %s %q", pcuFieldTable, o.table)
	}

	var err error
	out.pool, err = openSystemPool(ctx, systemPoolOptions{
		component: "pg_copy_upsert",
		url:       o.url,
		maxConns:  o.maxConns,
		afterConnect: func(ctx context.Context, c *pgx.Conn) error {
			if _, err := c.Exec(ctx, createStaging); err != nil {
				return fmt.Errorf("creating the staging tables: %w", err)
			}
			return nil
		},
		startupTimeout: o.startupTimeout,
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Connect prepares the dead-letter output; the pool connects on demand and
// replaces broken connections itself.
func (o *pgCopyUpsert) Connect(context.Context) error {
	if o.owned != nil {
		if o.primed {
			return nil
		}
		if err := o.owned.Prime(); err != nil {
			return fmt.Errorf("pg_copy_upsert: starting the dead-letter output: %w", err)
		}
		o.primed = true
	}
	return nil
}

// deadLetter is one record to park.
type deadLetter struct {
	index   int    // in the batch
	code    string // SQLSTATE, for rows the database refused
	message string
}

// WriteBatch stores the batch and parks what cannot be stored. It returns
// nil only once the database transaction has committed and every dead letter
// has been taken by the dead-letter output; it returns only the context's
// error otherwise (shutdown), because every other failure is retried.
func (o *pgCopyUpsert) WriteBatch(ctx context.Context, batch service.MessageBatch) error {
	start := time.Now()
	var (
		rows       []*event.Envelope
		rowIndex   []int
		dead       []deadLetter
		duplicates int64
	)
	seen := make(map[event.UUID]struct{}, len(batch))
	for i, msg := range batch {
		if err := msg.GetError(); err != nil {
			dead = append(dead, deadLetter{index: i, message: err.Error()})
			continue
		}
		env, err := eventmsg.Of(msg, o.kind)
		if err != nil {
			dead = append(dead, deadLetter{index: i, message: err.Error()})
			continue
		}
		// A record repeated within the batch (a producer's retry) is
		// written once; the copy is acked with the batch.
		if _, ok := seen[env.ID]; ok {
			duplicates++
			continue
		}
		seen[env.ID] = struct{}{}
		rows = append(rows, env)
		rowIndex = append(rowIndex, i)
	}
	undecodable := len(dead)
	o.m.stage.Timing(time.Since(start).Nanoseconds(), o.table, "prepare")

	faulted := false // the batch's fault is counted once, whichever step fails
	var res storeResult
	if len(rows) > 0 {
		start = time.Now()
		err := retry.Do(ctx, o.policy(len(rows), &faulted), func(ctx context.Context, _ int) error {
			r, err := o.store(ctx, rows)
			if err != nil {
				return err
			}
			res = r
			return nil
		})
		if err != nil {
			return err
		}
		o.m.stage.Timing(time.Since(start).Nanoseconds(), o.table, "write")
		for _, rj := range res.rejected {
			code, msg := pgclass.Code(rj.err)
			dead = append(dead, deadLetter{index: rowIndex[rj.row], code: code, message: msg})
		}
	}

	if len(dead) > 0 {
		start = time.Now()
		letters := make(service.MessageBatch, len(dead))
		for j, d := range dead {
			letters[j] = deadLetterMessage(batch[d.index], d)
		}
		err := retry.Do(ctx, o.policy(len(letters), &faulted), func(ctx context.Context, _ int) error {
			if err := o.deadLetter.WriteBatch(ctx, letters); err != nil {
				return fmt.Errorf("sending %d dead letters: %w", len(letters), err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		o.m.stage.Timing(time.Since(start).Nanoseconds(), o.table, "dead_letter")
		if undecodable > 0 {
			o.m.deadLetters.Incr(int64(undecodable), o.table, "undecodable")
			applog.With(o.log, "count", undecodable).Warn(logUndecodable)
		}
		if rejected := len(dead) - undecodable; rejected > 0 {
			var codes []string
			for _, d := range dead[undecodable:] {
				if !slices.Contains(codes, d.code) {
					codes = append(codes, d.code)
				}
			}
			slices.Sort(codes)
			o.m.deadLetters.Incr(int64(rejected), o.table, "rejected")
			applog.With(o.log, "count", rejected, "codes", strings.Join(codes, ",")).Warn(logRejected)
		}
	}

	o.m.batches.Incr(1, o.table)
	o.m.stored.Incr(res.stats.stored, o.table)
	o.m.skipped.Incr(res.stats.skipped+duplicates, o.table)
	o.m.placeholders.Incr(res.stats.customerPlaceholders, o.table, "customer")
	o.m.placeholders.Incr(res.stats.accountPlaceholders, o.table, "account")
	o.m.counterparties.Incr(res.stats.counterpartiesCreated, o.table)
	return nil
}

// policy is the retry policy of one batch: no attempt limit (a failure an
// operator can fix must not skip data), the batch's fault counted once, a
// retry per backoff that follows.
func (o *pgCopyUpsert) policy(rows int, faulted *bool) retry.Policy {
	return retry.Policy{
		Initial: o.initialBackoff,
		Max:     o.maxBackoff,
		Jitter:  retryJitter,
		OnRetry: func(_ int, err error, backoff time.Duration) {
			if !*faulted {
				*faulted = true
				o.m.faults.Incr(1, o.table)
			}
			o.m.retries.Incr(1, o.table)
			applog.With(o.log, "rows", rows, "err", err.Error(), "backoff", backoff.Round(time.Millisecond).String()).Error(logBatchRetry)
		},
	}
}

// rejectedRow is a row the database refused, by its index in the rows
// written.
type rejectedRow struct {
	row int
	err error
}

type storeResult struct {
	stats    writeStats
	rejected []rejectedRow
}

// store makes one attempt at rows: the whole batch in one transaction, and,
// when a row's data made it fail, once more in one transaction that isolates
// the bad rows by bisecting under savepoints and stores the rest.
func (o *pgCopyUpsert) store(ctx context.Context, rows []*event.Envelope) (storeResult, error) {
	actx, cancel := context.WithTimeout(ctx, o.attemptTimeout)
	defer cancel()
	var res storeResult
	err := o.inTx(actx, func(tx pgx.Tx) error {
		var err error
		res.stats, err = o.write(actx, tx, rows, writeDirect)
		return err
	})
	if errors.Is(err, errStoredBefore) {
		// A replay: write the batch again, skipping what is stored.
		res = storeResult{}
		err = o.inTx(actx, func(tx pgx.Tx) error {
			var err error
			res.stats, err = o.write(actx, tx, rows, writeStaged)
			return err
		})
	}
	if err == nil || !pgclass.IsRowFault(err) {
		return res, err
	}

	// Isolating costs up to two writes per row when many rows are bad, so
	// it gets a longer budget than one attempt.
	ictx, icancel := context.WithTimeout(ctx, isolateTimeoutFactor*o.attemptTimeout)
	defer icancel()
	res = storeResult{}
	err = o.inTx(ictx, func(tx pgx.Tx) error {
		// The likeliest way for a whole batch to be bad is a workspace that
		// does not exist: reject those rows with one query instead of
		// bisecting down to every one of them.
		idx, err := o.rejectUnknownWorkspaces(ictx, tx, rows, &res)
		if err != nil || len(idx) == 0 {
			return err
		}
		return o.isolate(ictx, tx, rows, idx, &res)
	})
	if err != nil {
		return storeResult{}, err
	}
	return res, nil
}

// isolateTimeoutFactor times attempt_timeout bounds one isolating attempt.
const isolateTimeoutFactor = 5

var (
	// errUnknownWorkspace is what a row of a workspace that does not exist
	// is dead-lettered with: the foreign-key violation (23503) the database
	// raises for it, found with one query rather than by bisecting.
	errUnknownWorkspace = &pgconn.PgError{
		Severity: "ERROR", Code: "23503",
		Message: "workspace_id is not present in table \"workspaces\"",
	}
	// errStoredBefore marks a direct write (COPY straight into the table)
	// that met a row already stored: the batch is a replay, to be written
	// again staged, skipping what is stored. Never a row's fault.
	errStoredBefore = errors.New("a row of the batch is already stored")
)

// rejectUnknownWorkspaces rejects the rows whose workspace does not exist and
// returns the indexes of the others.
func (o *pgCopyUpsert) rejectUnknownWorkspaces(ctx context.Context, tx pgx.Tx, rows []*event.Envelope, res *storeResult) ([]int, error) {
	seen := map[event.UUID]bool{}
	var wss []event.UUID
	for _, e := range rows {
		if !seen[e.WorkspaceID] {
			seen[e.WorkspaceID] = true
			wss = append(wss, e.WorkspaceID)
		}
	}
	r, err := tx.Query(ctx, "SELECT id FROM speculapro.workspaces WHERE id = ANY($1::uuid[])", wss)
	if err != nil {
		return nil, fmt.Errorf("looking up %d workspaces: %w", len(wss), err)
	}
	known := map[event.UUID]bool{}
	var id event.UUID
	if _, err := pgx.ForEachRow(r, []any{&id}, func() error { known[id] = true; return nil }); err != nil {
		return nil, fmt.Errorf("looking up %d workspaces: %w", len(wss), err)
	}
	idx := make([]int, 0, len(rows))
	for i, e := range rows {
		if known[e.WorkspaceID] {
			idx = append(idx, i)
		} else {
			res.rejected = append(res.rejected, rejectedRow{row: i, err: errUnknownWorkspace})
		}
	}
	return idx, nil
}

// isolate writes rows[idx] under a savepoint; when a row's data fails it,
// it rolls back to the savepoint and tries each half, down to single rows,
// which are rejected. Any other failure ends the attempt.
func (o *pgCopyUpsert) isolate(ctx context.Context, tx pgx.Tx, rows []*event.Envelope, idx []int, res *storeResult) error {
	sub := make([]*event.Envelope, len(idx))
	for i, j := range idx {
		sub[i] = rows[j]
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("creating a savepoint: %w", err)
	}
	stats, err := o.write(ctx, sp, sub, writeStagedReuse)
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
	if len(idx) == 1 {
		res.rejected = append(res.rejected, rejectedRow{row: idx[0], err: err})
		return nil
	}
	mid := len(idx) / 2
	if err := o.isolate(ctx, tx, rows, idx[:mid], res); err != nil {
		return err
	}
	return o.isolate(ctx, tx, rows, idx[mid:], res)
}

// inTx runs fn in a transaction of the output's pool and commits it.
func (o *pgCopyUpsert) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return inTx(ctx, o.pool, fn)
}

// deadLetterMessage is a copy of msg, content and metadata untouched, with
// where it came from and why it was parked.
func deadLetterMessage(msg *service.Message, d deadLetter) *service.Message {
	m := msg.Copy()
	m.SetError(nil)
	topic, _ := m.MetaGet("kafka_topic")
	partition, _ := m.MetaGet("kafka_partition")
	offset, _ := m.MetaGet("kafka_offset")
	if topic != "" || partition != "" || offset != "" {
		m.MetaSetMut(metaSourceOffset, topic+"/"+partition+"/"+offset)
	}
	if d.code != "" {
		m.MetaSetMut(metaErrorCode, d.code)
	}
	m.MetaSetMut(metaErrorMessage, strings.TrimSpace(d.message))
	return m
}

// Close closes the pool and the dead-letter output.
func (o *pgCopyUpsert) Close(ctx context.Context) error {
	o.pool.Close()
	// An output that was never started has nothing running to wait for,
	// and waiting on it would never end.
	if o.owned != nil && o.primed {
		return o.owned.Close(ctx)
	}
	return nil
}
