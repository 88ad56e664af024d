// Package postgres owns the persister's PostgreSQL side: the `event_decode`
// processor, which decodes and validates each record's event envelope in the
// pipeline (where the engine parallelises it) and flags the records that
// cannot be read, and the `pg_copy_upsert` output, which files a batch of
// transactions or account events into PostgreSQL in one database transaction
// (COPY straight into the table, or for a replay into a staging table and
// INSERT … ON CONFLICT DO NOTHING; placeholder customers and accounts,
// counterparties by fingerprint), retries what an
// operator can fix with capped backoff, isolates the rows the database can
// never accept, and sends those and the unreadable records to a dead-letter
// output.
package postgres
