package pgcopyupsert

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/pgclass"
	"github.com/speculapro/speculapro/internal/pgwrite"
)

// rejectedRow is a row the database refused, by its index in the rows
// written.
type rejectedRow struct {
	row int
	err error
}

// deadLetter is the dead letter of a refused row; rowIndex maps rows to the
// batch.
func (r rejectedRow) deadLetter(rowIndex []int) deadLetter {
	code, msg := pgclass.Code(r.err)
	return deadLetter{index: rowIndex[r.row], code: code, message: msg}
}

type storeResult struct {
	stats    writeStats
	rejected []rejectedRow
}

var (
	// errUnknownWorkspace is what a row of a workspace that does not exist
	// is dead-lettered with: the foreign-key violation (23503) the database
	// raises for it, found with one query rather than by bisecting.
	errUnknownWorkspace = &pgconn.PgError{
		Severity: "ERROR", Code: pgerrcode.ForeignKeyViolation,
		Message: "workspace_id is not present in table \"workspaces\"",
	}
	// errStoredBefore marks a direct write (COPY straight into the table)
	// that met a row already stored: the batch is a replay, to be written
	// again staged, skipping what is stored. Never a row's fault.
	errStoredBefore = errors.New("a row of the batch is already stored")
)

// isolation is what isolating the refused rows of one set of rows has
// learned, kept from one attempt to the next: an attempt that runs out of
// time (or meets any failure that is not a row's) is rolled back, but which
// rows the database refused, which stored together and which chunks are
// still to try stays true, so the next attempt carries on instead of
// starting over. Every chunk write either settles its rows (stored, or one
// refused row) or splits the chunk in two, for good, so isolating n rows
// takes at most 2n−1 chunk writes in all (n and a little when most rows are
// bad, because failing chunks are then split into single rows), plus, per
// attempt, one write of the rows known to store and the one write an
// expired attempt cut short.
type isolation struct {
	active   bool          // a row fault was met: attempts go straight to isolating
	refused  map[int]error // row → the database's error
	stores   []int         // rows known to store together
	untested [][]int       // chunks still to try, in order
	writes   int           // chunk writes so far, for tests
	bad      int           // rows refused by a write (not by their workspace)
}

// start begins isolating rows idx (the rows of known workspaces).
func (l *isolation) start(idx []int) {
	l.active = true
	if l.refused == nil {
		l.refused = map[int]error{}
	}
	if len(idx) > 0 {
		l.untested = [][]int{idx}
	}
}

// store makes one attempt at rows: the whole batch in one transaction, and,
// when a row's data made it fail, in one transaction that isolates the bad
// rows by bisecting under savepoints and stores the rest. A missing
// partition, a lost connection and every failure that is not a row's are
// returned for the caller to classify.
func (o *pgCopyUpsert) store(ctx context.Context, rows []*event.Envelope, learned *isolation) (storeResult, error) {
	var res storeResult
	if !learned.active {
		actx, cancel := context.WithTimeout(ctx, o.attemptTimeout)
		defer cancel()
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
		if err != nil && actx.Err() != nil && ctx.Err() == nil {
			// pgx closes a connection whose statement outlived its
			// context: what failed is the attempt's time, not the server.
			return res, fmt.Errorf("writing %d rows took longer than %s (attempt_timeout): %w", len(rows), o.attemptTimeout, context.DeadlineExceeded)
		}
		if err == nil || !pgclass.IsRowFault(err) {
			return res, err
		}
	}

	// Isolating costs up to two writes per row when many rows are bad, so
	// it gets a longer budget than one attempt.
	ictx, icancel := context.WithTimeout(ctx, pgwrite.IsolateTimeoutFactor*o.attemptTimeout)
	defer icancel()
	res = storeResult{}
	err := o.inTx(ictx, func(tx pgx.Tx) error {
		if !learned.active {
			// The likeliest way for a whole batch to be bad is a workspace
			// that does not exist: reject those rows with one query instead
			// of bisecting down to every one of them.
			idx, err := o.unknownWorkspaces(ictx, tx, rows, learned)
			if err != nil {
				return err
			}
			learned.start(idx)
		}
		return o.isolate(ictx, tx, rows, learned, &res)
	})
	if err != nil {
		if ictx.Err() != nil && ctx.Err() == nil {
			return storeResult{}, fmt.Errorf("isolating the rows the database refuses took longer than %s (%d refused, %d stored, %d chunks to try; the next attempt carries on): %w",
				pgwrite.IsolateTimeoutFactor*o.attemptTimeout, len(learned.refused), len(learned.stores), len(learned.untested), context.DeadlineExceeded)
		}
		return storeResult{}, err
	}
	for row, rerr := range learned.refused {
		res.rejected = append(res.rejected, rejectedRow{row: row, err: rerr})
	}
	return res, nil
}

// unknownWorkspaces refuses the rows whose workspace does not exist (in
// learned) and returns the indexes of the others.
func (o *pgCopyUpsert) unknownWorkspaces(ctx context.Context, tx pgx.Tx, rows []*event.Envelope, learned *isolation) ([]int, error) {
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
	if learned.refused == nil {
		learned.refused = map[int]error{}
	}
	idx := make([]int, 0, len(rows))
	for i, e := range rows {
		if known[e.WorkspaceID] {
			idx = append(idx, i)
		} else {
			learned.refused[i] = errUnknownWorkspace
		}
	}
	return idx, nil
}

// isolate writes, in tx, the rows known to store and then each chunk still
// to try, each under a savepoint: a chunk that stores is kept, one that a
// row's data fails is rolled back and split in two (a single row is
// refused, and once most rows met are bad, a failing chunk is split into
// single rows instead). Any other failure ends the attempt, with what was
// learned kept.
func (o *pgCopyUpsert) isolate(ctx context.Context, tx pgx.Tx, rows []*event.Envelope, learned *isolation, res *storeResult) error {
	if len(learned.stores) > 0 {
		stats, err := o.writeChunk(ctx, tx, rows, learned.stores, learned)
		switch {
		case err == nil:
			res.stats.add(stats)
		case pgclass.IsRowFault(err):
			// Rows that stored together no longer do: try them again.
			learned.untested = append([][]int{learned.stores}, learned.untested...)
			learned.stores = nil
		default:
			return err
		}
	}
	for len(learned.untested) > 0 {
		chunk := learned.untested[0]
		stats, err := o.writeChunk(ctx, tx, rows, chunk, learned)
		switch {
		case err == nil:
			res.stats.add(stats)
			learned.stores = append(learned.stores, chunk...)
			learned.untested = learned.untested[1:]
		case !pgclass.IsRowFault(err):
			return err
		case len(chunk) == 1:
			learned.refused[chunk[0]] = err
			learned.bad++
			learned.untested = learned.untested[1:]
		case learned.bad > len(learned.stores):
			// Most rows met so far are bad: bisecting would cost two writes
			// per row, one write per row costs one.
			singles := make([][]int, 0, len(chunk)+len(learned.untested)-1)
			for _, i := range chunk {
				singles = append(singles, []int{i})
			}
			learned.untested = append(singles, learned.untested[1:]...)
		default:
			mid := len(chunk) / 2
			learned.untested = append([][]int{chunk[:mid:mid], chunk[mid:]}, learned.untested[1:]...)
		}
	}
	return nil
}

// writeChunk writes rows[idx] under a savepoint, released when they store
// and rolled back when they do not.
func (o *pgCopyUpsert) writeChunk(ctx context.Context, tx pgx.Tx, rows []*event.Envelope, idx []int, learned *isolation) (writeStats, error) {
	learned.writes++
	sub := make([]*event.Envelope, len(idx))
	for i, j := range idx {
		sub[i] = rows[j]
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return writeStats{}, fmt.Errorf("creating a savepoint: %w", err)
	}
	stats, err := o.write(ctx, sp, sub, writeStagedReuse)
	if err == nil {
		if err := sp.Commit(ctx); err != nil {
			return writeStats{}, fmt.Errorf("releasing a savepoint: %w", err)
		}
		return stats, nil
	}
	if rbErr := sp.Rollback(ctx); rbErr != nil {
		return writeStats{}, fmt.Errorf("rolling back to a savepoint after %w: %v", err, rbErr)
	}
	return writeStats{}, err
}
