package pgcopyupsert

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/eventmsg"
	"github.com/speculapro/speculapro/internal/ownership"
	"github.com/speculapro/speculapro/internal/pgretry"
	"github.com/speculapro/speculapro/internal/pgsystem"
	"github.com/speculapro/speculapro/internal/pgwrite"
)

// The output's files: this one is the component (spec, construction,
// Connect, WriteBatch, Close); output_pg_copy_upsert_isolate.go stores a
// batch and isolates the rows the database refuses;
// output_pg_copy_upsert_waits.go decides what waits, and for how long, when
// a batch fails; output_pg_copy_upsert_dead_letters.go parks what cannot be
// stored; store.go holds the SQL.

const (
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

// The documented log lines (docs/persister.md): operators search for them
// word for word.
const (
	logBatchRetry  = "persist: batch failed, retrying"
	logUndecodable = "persist: sent undecodable records to dead-letter topic"
	logRejected    = "persist: sent records the database refused to dead-letter topic"
	logRevoked     = "persist: stopped retrying a batch whose partitions were revoked"
)

// long: the component's config spec, one field after another as its documentation page lists them
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
   to a monitored account whose number has the same keyed fingerprint: when stored if that account exists, else
   when the account is written (a trigger on `+"`accounts`"+`); a counterparty this process knows to be up to date
   (seen less than a day before, its identifier fingerprint stored) is left out of the batch's statements.

The parties come last, each set in key order, because a row another writer has just created is waited for until
that writer commits: taken last, such locks are held for a round trip, not for the whole batch.

Every key is computed from the event (deterministic IDs), and records repeated within a batch are written once, so
a batch delivered again creates no duplicate of anything. The output reports a batch done, and the input commits
its offsets, only after the transaction has committed.

### Failures

A batch that fails (disk full, a grant missing, a deadlock) is tried again, the same batch, with exponential
backoff and jitter from `+"`initial_backoff`"+` up to `+"`max_backoff`"+`; every retry logs
`+"`level=ERROR msg=\"persist: batch failed, retrying\" rows=… err=… backoff=…`"+`. It never skips ahead: its
partitions wait until the problem is fixed, while Kafka keeps the data. When the connection to PostgreSQL is lost
the output reports itself not connected (readiness and `+"`output_connection_up`"+` show it) and the engine
writes the batch again once `+"`Connect`"+` reaches PostgreSQL.

A record that must wait for a month's partition blocks only its own Kafka partition: the batch's other
partitions' rows are stored, and the waiting partition's records are handed back to the `+"`kafka_franz`"+` input,
which delivers them again after the backoff (the retry line is logged with it).

A row the database can never accept (SQLSTATE class 22, data exception; 23, integrity violation, except a
missing partition; 54, program limit such as an index row too large; P0, raised by a trigger) is isolated by
bisecting the batch within one transaction and sent to `+"`dead_letter`"+` with metadata `+"`error-code`"+` (the SQLSTATE)
and `+"`error-message`"+`; the rest of the batch is stored. Isolating is bounded: at most 2n−1 writes for n rows
in all, whatever the number of attempts, because what an attempt learned (rows refused, rows that store) is
kept for the next one when an attempt runs out of time.

A record that cannot be read (flagged by `+"`event_decode`"+`, or failing to decode here: not JSON, unknown version,
no id or workspace_id, a field outside its limits, wrong kind) is sent to `+"`dead_letter`"+` and logged as
`+"`level=WARN msg=\"persist: sent undecodable records to dead-letter topic\" count=…`"+`.

Every dead letter keeps its content and metadata (so, with `+"`kafka_franz`"+`, its key and headers) and gets
`+"`source-offset`"+` (`+"`topic/partition/offset`"+` from the `+"`kafka_franz`"+` input's metadata).

A batch whose records' contexts end stops at once: at shutdown (no fault is counted, nothing is logged as an
error) and when the `+"`kafka_franz`"+` input gave the records' partition up after its `+"`revoke_wait`"+` (the writer
is free again; the partition's new owner reads the records again).

### Start-up check

`+"`Connect`"+` checks that the database role is a superuser or has BYPASSRLS (the constructor does no I/O), waiting
up to `+"`startup_timeout`"+` for PostgreSQL to answer, and stops the process with
`+"`error: persist/stream/worker roles: database role cannot bypass row-level security (set SP_DB_SYSTEM_URL to the speculapro_system role)`"+`
otherwise, before anything is stored or committed.

### Metrics

`+"`speculapro_persist_batches_total`, `_rows_stored_total`, `_rows_skipped_total` (already stored, or repeated in the batch), `_placeholders_created_total{entity}`, `_counterparties_created_total`, `_dead_letters_total{reason}`, `_retries_total` (one per backoff that followed a failed attempt), `_faults_total` (batches that failed at least once; a cancellation at shutdown is none), and `speculapro_persist_stage_duration_seconds{stage}`"+`
(per-batch work of one stage, not wall-clock), all with the label `+"`table`"+`.`).
		Fields(pgsystem.URLFields()...).
		Fields(
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
				Description("Longest one attempt at a batch may take (for example, waiting on a lock) before it counts as failed and is retried. Isolating the rows the database refuses gets five times this per attempt.").
				Default("60s").
				Advanced(),
			service.NewDurationField(pcuFieldStartupTimeout).
				Description("How long one `Connect` waits for PostgreSQL to answer the role check before it fails (the engine then connects again).").
				Default("30s").
				Advanced(),
		).
		Example("Transactions", "", `
output:
  pg_copy_upsert:
    url: ${SP_DB_SYSTEM_URL:}
    fallback_url: ${SP_DB_URL:postgres://speculapro_app:speculapro_app@127.0.0.1:5432/speculapro?sslmode=disable}
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
	poolOpts       pgsystem.Options
	pool           *pgxpool.Pool // built by the constructor, connected and checked by Connect
	deadLetter     deadLetterSink
	owned          *service.OwnedOutput // deadLetter when built from config; primed and closed here
	primed         bool                 // owned was started, so Close must stop it
	checked        bool                 // the role check passed once
	connMu         sync.Mutex           // serialises Connect and Close
	policy         *pgretry.Policy
	attemptTimeout time.Duration
	log            *service.Logger
	m              *persistMetrics
	waits          *partitionWaits
	known          *knownParties // customers and accounts seen committed (store_parties.go)
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
	if o.url, err = pgsystem.URLFromParsed(conf); err != nil {
		return nil, err
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
	out, err := newPgCopyUpsert(o, nil, mgr)
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

// newPgCopyUpsert checks the settings and builds the pool without
// connecting: no I/O happens while the engine builds the stream. Connect
// reaches PostgreSQL and runs the role check.
func newPgCopyUpsert(o pcuOptions, dl deadLetterSink, mgr *service.Resources) (*pgCopyUpsert, error) {
	if o.maxBackoff < o.initialBackoff {
		return nil, fmt.Errorf("pg_copy_upsert: %s (%s) must not be shorter than %s (%s)",
			pcuFieldMaxBackoff, o.maxBackoff, pcuFieldInitialBackoff, o.initialBackoff)
	}
	out := &pgCopyUpsert{
		table:          o.table,
		deadLetter:     dl,
		attemptTimeout: o.attemptTimeout,
		log:            mgr.Logger(),
		m:              newPersistMetrics(mgr.Metrics()),
		waits:          newPartitionWaits(),
	}
	out.policy = &pgretry.Policy{
		Initial: o.initialBackoff, Max: o.maxBackoff,
		Retries: out.m.retries, Faults: out.m.faults, Label: o.table,
		Log: out.log, RetryLine: logBatchRetry,
		WaitForPartitions: true, AttemptTimeout: o.attemptTimeout,
	}
	out.known = newKnownParties(knownPartiesMax)
	switch o.table {
	case tableTransactions:
		out.kind = event.KindTransaction
		out.write = func(ctx context.Context, tx pgx.Tx, rows []*event.Envelope, mode writeMode) (writeStats, error) {
			return writeTransactions(ctx, tx, rows, mode, out.known)
		}
	case tableAccountEvents:
		out.kind = event.KindAccountEvent
		out.write = func(ctx context.Context, tx pgx.Tx, rows []*event.Envelope, mode writeMode) (writeStats, error) {
			return writeAccountEvents(ctx, tx, rows, mode, out.known)
		}
	default:
		return nil, fmt.Errorf("pg_copy_upsert: unknown %s %q", pcuFieldTable, o.table)
	}
	out.poolOpts = pgsystem.Options{
		Component: "pg_copy_upsert",
		URL:       o.url,
		// One connection per writer, and one for the start-up check and a
		// writer's retry while a broken connection is replaced.
		MaxConns: max(o.maxConns, 1) + 1,
		AfterConnect: func(ctx context.Context, c *pgx.Conn) error {
			if _, err := c.Exec(ctx, createStaging); err != nil {
				return fmt.Errorf("creating the staging tables: %w", err)
			}
			return nil
		},
		StartupTimeout: o.startupTimeout,
	}
	var err error
	if out.pool, err = pgsystem.New(out.poolOpts); err != nil {
		return nil, err
	}
	return out, nil
}

// Connect reaches PostgreSQL: the first time with the start-up role check
// (a role that cannot bypass row-level security stops the process with the
// documented line), after a lost connection by pinging until it answers
// (reconnect: the output's own backoff, logged), so the engine reports
// the output connected only while PostgreSQL answers. It also starts the
// dead-letter output.
func (o *pgCopyUpsert) Connect(ctx context.Context) error {
	o.connMu.Lock()
	defer o.connMu.Unlock()
	if !o.checked {
		if err := pgsystem.CheckOrRefuse(ctx, o.pool, o.poolOpts); err != nil {
			return err
		}
		o.checked = true
	} else if err := o.policy.Reconnect(ctx, "pg_copy_upsert", o.pool.Ping); err != nil {
		return err
	}
	if o.owned != nil && !o.primed {
		if err := o.owned.Prime(); err != nil {
			return fmt.Errorf("pg_copy_upsert: starting the dead-letter output: %w", err)
		}
		o.primed = true
	}
	return nil
}

// WriteBatch stores the batch and parks what cannot be stored. It returns
// nil once the database transaction has committed and every dead letter has
// been taken by the dead-letter output. Otherwise it returns:
//   - service.ErrNotConnected when the connection to PostgreSQL was lost (the
//     engine connects again and writes the batch again);
//   - a *service.BatchError naming the records that wait for a missing
//     partition, with a retry.AfterError saying how long, when the others
//     were stored;
//   - the cause when the records' contexts ended (ownership.ErrShutdown,
//     ownership.ErrRevoked) or ctx's error.
//
// Every other failure is retried here.
func (o *pgCopyUpsert) WriteBatch(ctx context.Context, batch service.MessageBatch) error {
	ctx, release := ownership.Watch(ctx, batch)
	defer release()

	// Records no event_decode step read (the persist pipelines have none)
	// are decoded here, into one slice a batch, sharing the records' bytes:
	// they outlive nothing but this write. A pipeline step cost the engine
	// a sort group, a tracing span and two contexts per record.
	envs, decoded, undecodable := o.decodeBatch(batch)
	defer decoded.release()
	rows, rowIndex, dead, duplicates := o.prepare(batch, envs, undecodable)

	fault := o.policy.Batch()
	var res storeResult
	var waiting *waitingPartitions
	if len(rows) > 0 {
		start := time.Now()
		var learned isolation // kept from one attempt to the next
		err := fault.Do(ctx, len(rows), func(ctx context.Context) error {
			r, err := o.store(ctx, rows, &learned)
			if err != nil {
				return err
			}
			res = r
			return nil
		})
		if errors.Is(err, pgretry.ErrMustWait) {
			// Some partitions' rows wait for a month's partition: store the
			// others, hand the waiting ones back.
			res, waiting, err = o.storeAroundWaits(ctx, batch, rows, rowIndex, fault)
		}
		if err != nil {
			return o.stopped(ctx, err, len(rows))
		}
		o.m.stage.Timing(time.Since(start).Nanoseconds(), o.table, "write")
		if waiting == nil && len(res.rejected) == 0 {
			// Committed: its placeholders exist now.
			o.known.add(res.stats.named)
			o.known.addCounterparties(res.stats.counterparties)
		}
		for _, rj := range res.rejected {
			dead = append(dead, rj.deadLetter(rowIndex))
		}
	}
	if waiting != nil {
		// The waiting partitions' records are delivered again as they are:
		// none of them is dead-lettered or counted now.
		dead = waiting.without(batch, dead)
	} else {
		o.waits.settled(batch)
	}
	if err := o.sendDeadLetters(ctx, batch, dead, fault); err != nil {
		return o.stopped(ctx, err, len(dead))
	}

	o.m.batches.Incr(1, o.table)
	o.m.stored.Incr(res.stats.stored, o.table)
	o.m.skipped.Incr(res.stats.skipped+duplicates, o.table)
	o.m.placeholders.Incr(res.stats.customerPlaceholders, o.table, "customer")
	o.m.placeholders.Incr(res.stats.accountPlaceholders, o.table, "account")
	o.m.counterparties.Incr(res.stats.counterpartiesCreated, o.table)
	if waiting != nil {
		return waiting.batchError(batch)
	}
	return nil
}

// prepare picks the rows to store from the batch's envelopes (envs, as
// decodeBatch gave them): rowIndex maps each row to its message; a message
// flagged with an error or undecodable is a dead letter; a record repeated
// within the batch is counted in duplicates and written once.
func (o *pgCopyUpsert) prepare(batch service.MessageBatch, envs []*event.Envelope, undecodable []error) (rows []*event.Envelope, rowIndex []int, dead []deadLetter, duplicates int64) {
	start := time.Now()
	rows, rowIndex, dead, duplicates = rowsToStore(batch, envs, undecodable)
	o.m.stage.Timing(time.Since(start).Nanoseconds(), o.table, "prepare")
	return rows, rowIndex, dead, duplicates
}

// rowsToStore picks the batch's rows to store, once each, with their
// messages' indices (rowIndex), and the dead letters of the messages
// flagged with an error or undecodable; duplicates counts the copies of a
// record repeated within the batch.
func rowsToStore(batch service.MessageBatch, envs []*event.Envelope, undecodable []error) (rows []*event.Envelope, rowIndex []int, dead []deadLetter, duplicates int64) {
	// Sized for the batch: grown from nothing they were copied a dozen
	// times over per batch.
	rows = make([]*event.Envelope, 0, len(batch))
	rowIndex = make([]int, 0, len(batch))
	seen := newSeenIDs(len(batch))
	defer releaseSeenIDs(seen)
	for i, msg := range batch {
		if err := msg.GetError(); err != nil {
			dead = append(dead, deadLetter{index: i, message: err.Error()})
			continue
		}
		env := envs[i]
		if env == nil {
			dead = append(dead, deadLetter{index: i, message: undecodable[i].Error()})
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
	return rows, rowIndex, dead, duplicates
}

// decodeBatch returns each message's envelope: the one event_decode
// attached, or decoded here into decoded's envelopes (timed as the decode
// stage; release them once the batch is written); nil for a message flagged
// with an error, and for one that cannot be decoded, whose reason is then in
// undecodable (nil while every record decodes).
func (o *pgCopyUpsert) decodeBatch(batch service.MessageBatch) (envs []*event.Envelope, decoded *envelopes, undecodable []error) {
	start := time.Now()
	envs = make([]*event.Envelope, len(batch))
	for i, msg := range batch {
		if msg.GetError() != nil {
			continue
		}
		if env, ok := eventmsg.Attached(msg); ok {
			envs[i] = env
			continue
		}
		if decoded == nil {
			decoded = newEnvelopes(len(batch))
		}
		if err := eventmsg.DecodeSharedInto(&decoded.e[i], &decoded.cps[i], msg, o.kind); err != nil {
			if undecodable == nil {
				undecodable = make([]error, len(batch))
			}
			undecodable[i] = err
			continue
		}
		envs[i] = &decoded.e[i]
	}
	if decoded != nil {
		o.m.stage.Timing(time.Since(start).Nanoseconds(), o.table, "decode")
	}
	return envs, decoded, undecodable
}

// seenIDsKept keeps the sets of IDs a batch's records are de-duplicated
// with for the next batches, as decodedBufs keeps envelopes: one was made
// per batch, about 150 KB for 5,000 records.
var seenIDsKept = make(chan map[event.UUID]struct{}, 5)

func newSeenIDs(n int) map[event.UUID]struct{} {
	select {
	case m := <-seenIDsKept:
		return m
	default:
		return make(map[event.UUID]struct{}, n)
	}
}

// releaseSeenIDs empties m and keeps it, unless a rare huge batch grew it.
func releaseSeenIDs(m map[event.UUID]struct{}) {
	if len(m) > 1<<16 {
		return
	}
	clear(m)
	select {
	case seenIDsKept <- m:
	default:
	}
}

// envelopes is one batch's decoded envelopes and their counterparties
// (cps[i] is e[i]'s, when it has one).
type envelopes struct {
	e   []event.Envelope
	cps []event.Counterparty
}

// decodedBufs keeps the envelope slices of a few batches for the next ones,
// as copyBufs keeps COPY buffers: a 5,000-record batch's envelopes are
// about 1.7 MB: made afresh, they would be a tenth of the bytes the
// persister allocates per row.
var decodedBufs = make(chan *envelopes, 5)

// newEnvelopes returns n zeroed envelopes.
func newEnvelopes(n int) *envelopes {
	var d *envelopes
	select {
	case d = <-decodedBufs:
	default:
		d = &envelopes{}
	}
	if cap(d.e) < n {
		d.e = make([]event.Envelope, n)
		d.cps = make([]event.Counterparty, n)
	}
	d.e, d.cps = d.e[:n], d.cps[:n]
	return d
}

// release zeroes the envelopes (they point into the records' bytes, which
// must not be kept alive, nor read once the records are reused) and keeps
// them for another batch; nil does nothing.
func (d *envelopes) release() {
	if d == nil {
		return
	}
	clear(d.e)
	clear(d.cps)
	select {
	case decodedBufs <- d:
	default:
	}
}

// Close closes the pool and the dead-letter output.
func (o *pgCopyUpsert) Close(ctx context.Context) error {
	o.connMu.Lock()
	defer o.connMu.Unlock()
	o.pool.Close()
	// An output that was never started has nothing running to wait for,
	// and waiting on it would never end.
	if o.owned != nil && o.primed {
		return o.owned.Close(ctx)
	}
	return nil
}

// inTx runs fn in a transaction of the output's pool and commits it.
func (o *pgCopyUpsert) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgwrite.InTx(ctx, o.pool, fn)
}
