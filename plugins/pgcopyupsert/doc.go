// Package postgres owns the PostgreSQL writes of the persist and stream
// roles. The persister's `pg_copy_upsert` output files a batch of
// transactions or account events into PostgreSQL in one database transaction
// (COPY straight into the table, or for a replay into a staging table and
// INSERT … ON CONFLICT DO NOTHING; placeholder customers and accounts,
// counterparties by fingerprint), retries what an operator can fix with
// capped backoff, isolates the rows the database can never accept, and sends
// those and the unreadable records to a dead-letter output. The stream
// evaluator's `pg_rule_hits` output writes what `rule_eval` found (rule hits,
// the alerts they raise and those alerts' webhook deliveries and
// notifications) once per batch, idempotently. Both open their pool of
// speculapro_system connections the same way and refuse a role that cannot
// bypass row-level security.
package postgres
