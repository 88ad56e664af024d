package pgclass

import (
	"errors"
	"strings"

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

// SQLSTATE codes and classes this package distinguishes.
const (
	classConnection           = "08"
	classTransactionRollback  = "40"
	classResources            = "53"
	classOperatorIntervention = "57"
	classDataException        = "22"
	classIntegrityViolation   = "23"
	codeInsufficientPrivilege = "42501"
	codeCheckViolation        = "23514"
)

// Classify says whether err, typically wrapped, is retryable or a row's
// fault. A missing partition (`no partition of relation … found for row`)
// is raised as a check violation (23514) but is the operator's to fix, so it
// is retryable; so are connection (08), transaction rollback such as
// deadlock or serialization failure (40), resources (53), operator
// intervention (57) and permission (42501) failures, and every error that
// does not come from the server at all (a refused connection, a timeout).
func Classify(err error) Class {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return Retryable
	}
	if IsMissingPartition(err) {
		return Retryable
	}
	switch class(pgErr.Code) {
	case classDataException, classIntegrityViolation:
		return RowFault
	}
	return Retryable
}

// IsRowFault is Classify(err) == RowFault.
func IsRowFault(err error) bool { return Classify(err) == RowFault }

// IsMissingPartition reports a row whose month has no partition (and the
// table no default partition).
func IsMissingPartition(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == codeCheckViolation &&
		strings.HasPrefix(pgErr.Message, "no partition of relation")
}

// Reason names the kind of failure for logs and metrics: connection,
// transaction conflict, resources, operator intervention, permission,
// missing partition, data, integrity, or other.
func Reason(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return "other"
	}
	if IsMissingPartition(err) {
		return "missing partition"
	}
	if pgErr.Code == codeInsufficientPrivilege {
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
