package backtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
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
// them): what the check before a replay multiplies the entities by. A busy
// entity's state is about 6 KB (BenchmarkRulesBacktest: 218 MiB for 35,000
// entities of 1,000,000 transactions in 48 hours), a quiet one's under 1 KB.
const BytesPerEntity = 8 << 10

// sortMemory is the work_mem of the replay's transaction.
const sortMemory = "256MB"

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
	// enabled rules (live and shadow) are evaluated beside them for
	// comparison.
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
	// Hit, when set, is told every hit (a rule of the files or of the
	// workspace, and the event it fired on).
	Hit func(r *RuleResult, ev *event.Envelope)
}

// Progress is how far a replay is.
type Progress struct {
	Done, Total int64 // events applied, and to apply
	Elapsed     time.Duration
}

// Run replays the history of o.Workspace from Warmup before o.From and
// reports what o.Rules and the workspace's enabled rules fire on in the
// period. It reads in one read-only transaction on conn bound to the
// workspace (row-level security), rolled back at the end, and writes
// nothing; a cancelled ctx stops it with ctx's error.
func Run(ctx context.Context, conn *pgx.Conn, o Options) (*Report, error) {
	if !o.From.Before(o.To) {
		return nil, ErrPeriod
	}
	start := time.Now()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("backtest: starting a read-only transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// The history is read sorted by received_at, which no index serves:
	// room to sort it in memory rather than on disk (this transaction's
	// only).
	if _, err := tx.Exec(ctx, `SELECT set_config('speculapro.workspace_id', $1, true), set_config('work_mem', $2, true)`,
		o.Workspace.String(), sortMemory); err != nil {
		return nil, fmt.Errorf("backtest: binding the session to workspace %s: %w", o.Workspace, err)
	}
	rep, wsRules, err := prepareReport(ctx, tx, o)
	if err != nil {
		return nil, fmt.Errorf("backtest: %w", err)
	}
	ev, err := newEvaluator(rep, o, wsRules)
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
	size, err := sizeOf(ctx, tx, o.Workspace, warm)
	if err != nil {
		return nil, fmt.Errorf("backtest: %w", err)
	}
	rep.Accounts = size.Accounts
	if need := EstimateBytes(size.Accounts, size.Customers, size.Counterparties); o.MaxMemory > 0 && need > o.MaxMemory {
		return nil, fmt.Errorf("backtest: %w: %d accounts, %d customers and %d counterparties need about %d MiB, %d MiB given",
			ErrTooLarge, size.Accounts, size.Customers, size.Counterparties, need>>20, o.MaxMemory>>20)
	}
	p, err := loadParties(ctx, tx, o.Workspace)
	if err != nil {
		return nil, fmt.Errorf("backtest: %w", err)
	}
	if err := replay(ctx, tx, o, ev, p, warm, last, size.Events); err != nil {
		return nil, fmt.Errorf("backtest: %w", err)
	}
	rep.finish()
	rep.Elapsed, rep.PeakRSS = time.Since(start), peakRSS()
	return rep, nil
}

// peakRSS is this process's peak resident memory (VmHWM), 0 where
// /proc/self/status does not say.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" && f[2] == "kB" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// EstimateBytes is the memory a replay over these entities needs.
func EstimateBytes(accounts, customers, counterparties int64) int64 {
	return (accounts + customers + counterparties) * BytesPerEntity
}

// replay streams the history (warm on, accepted up to last) through the
// totals in memory and evaluates the period's events: one goroutine reads
// and decodes the rows into batches while this one applies and evaluates
// the batch before.
func replay(parent context.Context, tx pgx.Tx, o Options, ev *evaluator, p *parties, warm, last time.Time, total int64) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	batches := make(chan []*row, 2)
	var readErr error
	var firstRow time.Duration
	done := make(chan struct{})
	go func() {
		// Owns rows and batches; ends when the history is read, or when
		// ctx ends (replay returning cancels it), closing batches.
		defer close(done)
		defer close(batches)
		readErr = readHistory(ctx, tx, o.Workspace, p, warm, last, batches, &firstRow)
	}()
	mem := features.NewMemory()
	start := time.Now()
	var n int64
	var err error
	for batch := range batches {
		if err = ev.batch(mem, batch); err != nil {
			break
		}
		n += int64(len(batch))
		if o.MaxMemory > 0 && mem.Bytes() > o.MaxMemory {
			err = fmt.Errorf("%w: the totals of %d entities take %d MiB, %d MiB given", ErrTooLarge, mem.Entities(), mem.Bytes()>>20, o.MaxMemory>>20)
			break
		}
		if o.Progress != nil {
			o.Progress(Progress{Done: n, Total: max(total, n), Elapsed: time.Since(start)})
		}
	}
	cancel()
	<-done
	if err == nil {
		err = readErr
	}
	if err == nil {
		err = parent.Err()
	}
	if err != nil {
		return err
	}
	rep := ev.rep
	rep.Replayed, rep.Entities, rep.StateBytes, rep.FirstRow = n, mem.Entities(), mem.Bytes(), firstRow
	return nil
}

// readHistory sends the history's rows, decoded, in batches of batchSize.
// firstRow is set to how long the first row took (PostgreSQL sorting the
// history).
func readHistory(ctx context.Context, tx pgx.Tx, ws event.UUID, p *parties, warm, last time.Time, out chan<- []*row, firstRow *time.Duration) error {
	start := time.Now()
	rows, err := tx.Query(ctx, historyQuery, ws, warm, last)
	if err != nil {
		return fmt.Errorf("reading the history: %w", err)
	}
	defer rows.Close()
	rd := newRowReader(p)
	batch := make([]*row, 0, batchSize)
	send := func() bool {
		select {
		case out <- batch:
			batch = make([]*row, 0, batchSize)
			return true
		case <-ctx.Done():
			return false
		}
	}
	for rows.Next() {
		if *firstRow == 0 {
			*firstRow = time.Since(start)
		}
		r, err := rd.scan(rows, ws)
		if err != nil {
			return err
		}
		if r == nil {
			continue
		}
		if batch = append(batch, r); len(batch) == batchSize && !send() {
			return ctx.Err()
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the history: %w", err)
	}
	if len(batch) > 0 && !send() {
		return ctx.Err()
	}
	return nil
}
