// Package pgclass owns how SpeculaPro reads a PostgreSQL failure: by SQLSTATE
// and the error's structured fields, never its (translated) text, whether it
// is something an operator or time can fix (the database is down, out of disk
// or connections, shutting down, a grant or a partition is missing, two
// transactions collided), so the same work must be retried and never skipped,
// or the fault of one row the database can never accept (classes 22, 23, 54
// and P0), which must be isolated and parked so it cannot block everything
// behind it.
package pgclass
