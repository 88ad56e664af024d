// Package pgpartitions owns the `pg_partitions` processor: on each message
// it gets it creates the monthly partitions of transactions and
// account_events ahead (internal/dbmigrate's EnsurePartitionsAhead);
// pipelines/worker.yaml feeds it an hourly `generate` tick, the first at
// start. It connects as speculapro_system and refuses at start a role that
// cannot bypass row-level security.
package pgpartitions
