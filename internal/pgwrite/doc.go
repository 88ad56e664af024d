// Package pgwrite holds what the two PostgreSQL outputs, pg_copy_upsert
// (persist) and pg_rule_hits (stream), share when writing a batch: the
// database transaction they write in (whose rollback outlives a cancelled
// batch context, so no connection goes back to the pool inside a failed
// transaction), the bound on an isolating attempt, and the shape of the
// metrics they record. Their retry and fault policy is internal/pgretry's.
package pgwrite
