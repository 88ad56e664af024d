package backtest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/features"
	"github.com/speculapro/speculapro/internal/rules"
)

// Warmup is how far before the period the replay starts counting: the
// longest window (30 days, day-aligned: the head's UTC day and the 29
// before) and a day of margin, so every feature of the period's first event
// is what the stream computed.
const Warmup = 31 * 24 * time.Hour

// BytesPerEntity estimates the memory one entity's totals and bookkeeping
// take in a replay (features.Memory's states, decoded, and the map holding
// them): what the check before a replay multiplies the entities by.
const BytesPerEntity = 4 << 10

// batchSize is how many events are applied and evaluated at once.
const batchSize = 4096

// Sentinel errors.
var (
	// ErrTooLarge: the history's entities will not fit the memory given.
	ErrTooLarge = errors.New("the workspace's history does not fit the memory given")
	// ErrPeriod: --from is not before --to.
	ErrPeriod = errors.New("the period is empty: from must be before to")
)

// Options say what to backtest.
type Options struct {
	Workspace event.UUID
	// From and To bound the period (occurred_at in [From, To)).
	From, To time.Time
	// Rules are the rules under test (from rule files); the workspace's
	// live rules are evaluated beside them for comparison.
	Rules []rules.Rule
	// Explain is how many hits per rule to keep with the values that made
	// them fire.
	Explain int
	// MaxMemory bounds the replay's memory (bytes; 0: no bound): a history
	// estimated beyond it is refused before it starts (ErrTooLarge), and
	// a replay that grows beyond it stops.
	MaxMemory int64
	// Progress, when set, is told after every batch.
	Progress func(Progress)
	// Hit, when set, is told every hit (a rule of the files or a live
	// rule, and the event it fired on).
	Hit func(r *RuleResult, ev *event.Envelope)
}

// Progress is how far a replay is.
type Progress struct {
	Done, Total int64 // events applied, and to apply
	Elapsed     time.Duration
}

// Run replays the history of o.Workspace from Warmup before o.From and
// reports what o.Rules and the workspace's live rules fire on in the
// period. It reads in one read-only transaction on conn bound to the
// workspace (row-level security), rolled back at the end, and writes
// nothing; a cancelled ctx stops it with ctx's error.
func Run(ctx context.Context, conn *pgx.Conn, o Options) (*Report, error) {
	if !o.From.Before(o.To) {
		return nil, ErrPeriod
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("backtest: starting a read-only transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT set_config('speculapro.workspace_id', $1, true)`, o.Workspace.String()); err != nil {
		return nil, fmt.Errorf("backtest: binding the session to workspace %s: %w", o.Workspace, err)
	}
	rep, live, err := prepareReport(ctx, tx, o)
	if err != nil {
		return nil, fmt.Errorf("backtest: %w", err)
	}
	ev, err := newEvaluator(rep, o, live)
	if err != nil {
		return nil, fmt.Errorf("backtest: %w", err)
	}
	warm := o.From.UTC().Truncate(24 * time.Hour).Add(-Warmup)
	last, err := lastAccepted(ctx, tx, o.Workspace, o.From, o.To)
	if err != nil {
		return nil, fmt.Errorf("backtest: %w", err)
	}
	if last.IsZero() {
		return rep, nil // nothing happened in the period
	}
	size, err := sizeOf(ctx, tx, o.Workspace, warm, last)
	if err != nil {
		return nil, fmt.Errorf("backtest: %w", err)
	}
	rep.Accounts = size.Accounts
	if need := EstimateBytes(size.Accounts, size.Customers, size.Counterparties); o.MaxMemory > 0 && need > o.MaxMemory {
		return nil, fmt.Errorf("backtest: %w: %d accounts, %d customers and %d counterparties need about %d MiB, %d MiB given",
			ErrTooLarge, size.Accounts, size.Customers, size.Counterparties, need>>20, o.MaxMemory>>20)
	}
	if err := replay(ctx, tx, o, ev, warm, last, size.Events); err != nil {
		return nil, fmt.Errorf("backtest: %w", err)
	}
	rep.finish()
	return rep, nil
}

// EstimateBytes is the memory a replay over these entities needs.
func EstimateBytes(accounts, customers, counterparties int64) int64 {
	return (accounts + customers + counterparties) * BytesPerEntity
}

// replay streams the history (warm on, accepted up to last) through the
// totals in memory and evaluates the period's events.
func replay(ctx context.Context, tx pgx.Tx, o Options, ev *evaluator, warm, last time.Time, total int64) error {
	rows, err := tx.Query(ctx, historyQuery, o.Workspace, warm, last)
	if err != nil {
		return fmt.Errorf("reading the history: %w", err)
	}
	defer rows.Close()
	mem := features.NewMemory()
	start := time.Now()
	var done int64
	rd := newRowReader()
	batch := make([]*row, 0, batchSize)
	flush := func() error {
		if err := ev.batch(mem, batch); err != nil {
			return err
		}
		done += int64(len(batch))
		batch = batch[:0]
		if o.MaxMemory > 0 && mem.Bytes() > o.MaxMemory {
			return fmt.Errorf("%w: the totals of %d entities take %d MiB, %d MiB given", ErrTooLarge, mem.Entities(), mem.Bytes()>>20, o.MaxMemory>>20)
		}
		if o.Progress != nil {
			o.Progress(Progress{Done: done, Total: max(total, done), Elapsed: time.Since(start)})
		}
		return ctx.Err()
	}
	for rows.Next() {
		r, err := rd.scan(rows, o.Workspace)
		if err != nil {
			return err
		}
		if batch = append(batch, r); len(batch) == batchSize {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the history: %w", err)
	}
	if err := flush(); err != nil {
		return err
	}
	rep := ev.rep
	rep.Replayed, rep.Elapsed, rep.Entities, rep.StateBytes = done, time.Since(start), mem.Entities(), mem.Bytes()
	return nil
}
