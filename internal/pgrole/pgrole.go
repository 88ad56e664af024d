package pgrole

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Errors a caller may classify with errors.Is.
var (
	// ErrCannotBypassRLS is returned as is (unwrapped) by RequireBypassRLS, so
	// a caller printing "error: " + err.Error() prints the documented line,
	// word for word (operators search their logs for it).
	ErrCannotBypassRLS = errors.New("persist/stream/worker roles: database role cannot bypass row-level security (set SP_DB_SYSTEM_URL to the speculapro_system role)")
)

// Querier is what RequireBypassRLS needs; *pgx.Conn, *pgxpool.Pool and
// pgx.Tx all satisfy it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// RequireBypassRLS returns nil when the connection's current role is a
// superuser or has BYPASSRLS, ErrCannotBypassRLS when it has neither, and a
// wrapped error when the database cannot be asked.
func RequireBypassRLS(ctx context.Context, db Querier) error {
	var ok bool
	err := db.QueryRow(ctx, "SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user").Scan(&ok)
	if err != nil {
		return fmt.Errorf("checking whether the database role can bypass row-level security: %w", err)
	}
	if !ok {
		return ErrCannotBypassRLS
	}
	return nil
}
