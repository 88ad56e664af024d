// Package pgwritetest gives the tests of the PostgreSQL outputs
// (pg_copy_upsert, pg_rule_hits) what they share: transaction records
// numbered n, in batches with the metadata the kafka_franz input sets, a
// workspace and queries on a test database, the check that a write retries
// until an operator fixes the database, the check that Connect refuses a
// role bound by row-level security, and the checks of the cases the stream
// opens for its alerts.
package pgwritetest
