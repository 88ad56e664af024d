package pgclass

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgerrcode"

	"github.com/jackc/pgx/v5/pgconn"
)

// Class is what a caller should do about a failure.
type Class int

const (
	// Retryable failures are fixed by time or an operator: retry the same
	// work with backoff, never skip it. Anything not recognised as a row's
	// fault is retryable, because skipping loses data and waiting does not.
	Retryable Class = iota
	// RowFault failures are caused by a row the database can never accept:
	// isolate the row and park it with the database's error.
	RowFault
)

// String names the class for logs and tests.
func (c Class) String() string {
	if c == RowFault {
		return "row fault"
	}
	return "retryable"
}

// SQLSTATE classes this package distinguishes, named by pgerrcode's
// general code of each class.
var (
	classConnection           = class(pgerrcode.ConnectionException)
	classDataException        = class(pgerrcode.DataException)
	classIntegrityViolation   = class(pgerrcode.IntegrityConstraintViolation)
	classTransactionRollback  = class(pgerrcode.TransactionRollback)
	classResources            = class(pgerrcode.InsufficientResources)
	classProgramLimit         = class(pgerrcode.ProgramLimitExceeded)
	classOperatorIntervention = class(pgerrcode.OperatorIntervention)
	classPLpgSQL              = class(pgerrcode.PLpgSQLError)
)

// Classify says whether err, typically wrapped, is retryable or one row's
// fault.
//
// A row's fault is every SQLSTATE the values of one row cause, so that
// writing the row alone fails the same way and the rest of its batch does
// not: data exceptions (class 22: a value out of range, a NUL in text,
// invalid JSON for jsonb), integrity violations (class 23: a check, foreign
// key or unique constraint), program limits (class 54: 54000, an index row
// larger than a B-tree page allows, or a value nested too deep), and errors
// raised by a trigger or function on the row (class P0, PL/pgSQL).
//
// Everything else waits: connection (08), transaction rollback such as a
// deadlock or serialization failure (40), resources (53: disk full, too
// many connections), operator intervention (57: shutdown, a cancelled
// statement), permission (42501), every error that does not come from the
// server at all (a refused connection, a timeout), and a missing partition.
// A missing partition is raised as a check violation (23514) but is the
// operator's (or the worker's) to fix; it is told apart by the error's
// structured fields, never its text, which PostgreSQL translates into the
// session's lc_messages.
func Classify(err error) Class {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return Retryable
	}
	if IsMissingPartition(err) {
		return Retryable
	}
	switch class(pgErr.Code) {
	case classDataException, classIntegrityViolation, classProgramLimit, classPLpgSQL:
		return RowFault
	}
	return Retryable
}

// IsRowFault is Classify(err) == RowFault.
func IsRowFault(err error) bool { return Classify(err) == RowFault }

// IsMissingPartition reports a row whose month has no partition (and the
// table no default partition): SQLSTATE 23514 naming the table (the
// partitioned parent) but no constraint. Every constraint's own check
// violation names its constraint; routing a row to a partition has none to
// name. The message is never read: it is in the server's lc_messages.
func IsMissingPartition(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.CheckViolation &&
		pgErr.ConstraintName == "" && pgErr.TableName != ""
}

// Reason names the kind of failure for logs and metrics: connection,
// transaction conflict, resources, operator intervention, permission,
// missing partition, data, integrity, limit, trigger, or other.
func Reason(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return "other"
	}
	if IsMissingPartition(err) {
		return "missing partition"
	}
	if pgErr.Code == pgerrcode.InsufficientPrivilege {
		return "permission"
	}
	switch class(pgErr.Code) {
	case classConnection:
		return "connection"
	case classTransactionRollback:
		return "transaction conflict"
	case classResources:
		return "resources"
	case classOperatorIntervention:
		return "operator intervention"
	case classDataException:
		return "data"
	case classIntegrityViolation:
		return "integrity"
	case classProgramLimit:
		return "limit"
	case classPLpgSQL:
		return "trigger"
	}
	return "other"
}

// Code returns the SQLSTATE and the server's message of err, or two empty
// strings when err did not come from the server. The message never contains
// row values (PostgreSQL puts those in Detail, which is left out on purpose).
func Code(err error) (code, message string) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return "", ""
	}
	return pgErr.Code, pgErr.Message
}

func class(code string) string {
	if len(code) < 2 {
		return ""
	}
	return code[:2]
}

// IsConnectionLost reports a failure to reach PostgreSQL, or a connection
// lost on the way: a connect error, a network error or a connection closed
// mid-statement, SQLSTATE class 08, or the server shutting down or not
// accepting connections (57P01, 57P02, 57P03). A statement cancelled by the
// caller's deadline is not one.
func IsConnectionLost(err error) bool {
	if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow:
			return true
		}
		return class(pgErr.Code) == classConnection
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err)
}
