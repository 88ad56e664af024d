package dbmigrate

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/event"
)

// The partition window EnsurePartitions keeps: from last month to three
// months ahead. Rows outside it fail with `no partition of relation
// "transactions" found` until the window moves (there is no DEFAULT partition;
// see migrations/00004_transactions.sql). The numbers are defined with the
// other limits of an event in internal/event (limits.go), whose decoder
// dead-letters an occurred_at no partition will hold.
const (
	PartitionMonthsBehind = event.PartitionMonthsBehind
	PartitionMonthsAhead  = event.PartitionMonthsAhead
)

// Querier is what EnsurePartitions needs; *pgx.Conn, *pgxpool.Pool and pgx.Tx
// all satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// PartitionWindow returns the first month (UTC) of the window around now and
// how many months it spans.
func PartitionWindow(now time.Time) (first time.Time, months int) {
	return partitionWindow(now, PartitionMonthsAhead)
}

func partitionWindow(now time.Time, ahead int) (first time.Time, months int) {
	u := now.UTC()
	first = time.Date(u.Year(), u.Month()-PartitionMonthsBehind, 1, 0, 0, 0, 0, time.UTC)
	return first, PartitionMonthsBehind + 1 + ahead
}

// EnsurePartitions makes sure the monthly partitions of transactions and
// account_events exist from last month to three months after now's month,
// and returns the names of those it created (none when all exist). It calls
// speculapro.ensure_partitions, a SECURITY DEFINER function, so it works as
// speculapro_owner or speculapro_system; concurrent callers are safe.
func EnsurePartitions(ctx context.Context, db Querier, now time.Time) ([]string, error) {
	return EnsurePartitionsAhead(ctx, db, now, PartitionMonthsAhead)
}

// EnsurePartitionsAhead is EnsurePartitions with ahead months after now's
// month instead of three (the worker's SP_WORKER_PARTITIONS_AHEAD); ahead
// must be 0 to 100.
func EnsurePartitionsAhead(ctx context.Context, db Querier, now time.Time, ahead int) ([]string, error) {
	if ahead < 0 || ahead > 100 {
		return nil, fmt.Errorf("creating partitions: %d months ahead is outside 0 to 100", ahead)
	}
	first, months := partitionWindow(now, ahead)
	rows, err := db.Query(ctx, "SELECT speculapro.ensure_partitions($1::date, $2)", first.Format(time.DateOnly), months)
	if err != nil {
		return nil, fmt.Errorf("creating partitions for %d months from %s: %w", months, first.Format("2006-01"), err)
	}
	created, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("creating partitions for %d months from %s: %w", months, first.Format("2006-01"), err)
	}
	return created, nil
}
