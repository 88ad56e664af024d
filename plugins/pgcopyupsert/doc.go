// Package pgcopyupsert owns the persister's `pg_copy_upsert` output and its
// store: it files a batch of transactions or account events into PostgreSQL
// in one database transaction (COPY straight into the table, or for a
// replay into a staging table and INSERT … ON CONFLICT DO NOTHING;
// placeholder customers and accounts, counterparties by fingerprint),
// retries what an operator can fix with capped backoff, isolates the rows
// the database can never accept, and sends those and the unreadable records
// to a dead-letter output. It opens its pool of speculapro_system
// connections as pg_rule_hits does and refuses a role that cannot bypass
// row-level security.
package pgcopyupsert
