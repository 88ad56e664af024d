// Package dbmigrate owns bringing a PostgreSQL database to SpeculaPro's schema:
// the one-time bootstrap (the three roles, the database, the schema and each
// role's search_path, done with a superuser URL), applying the embedded
// migrations of package migrations in order as speculapro_owner (each in its
// own transaction, recorded in speculapro.schema_migrations, under an advisory
// lock so concurrent runs cannot interleave), and keeping monthly partitions
// of transactions and account_events ahead of time (EnsurePartitions, run by
// `speculapro migrate` and by the worker).
package dbmigrate
