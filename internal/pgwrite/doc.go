// Package pgwrite holds what the two PostgreSQL outputs, pg_copy_upsert
// (persist) and pg_rule_hits (stream), share when writing a batch: the
// database transaction they write in (whose rollback outlives a cancelled
// batch context, so no connection goes back to the pool inside a failed
// transaction), the retry jitter, the bound on an isolating attempt, the
// table an event kind is written to, and the shape of the metrics they
// record.
package pgwrite
