// Package outbox owns the worker role (pipelines/worker.yaml): it sends what
// the other roles queued in PostgreSQL in the same transaction as the change
// they announce (the transactional outbox of migrations 00006 and 00009), and
// keeps the monthly partitions ahead.
//
//   - `outbox_claim` (input) claims due webhook_deliveries and notifications
//     rows with SELECT … FOR UPDATE SKIP LOCKED in one short statement, which
//     also takes a lease on them (next_attempt_at moves one lease ahead, the
//     attempt is counted, claimed_by names the worker): several workers share
//     the queue without sending a row twice at once, and the rows of a worker
//     that died come due again when its lease runs out. It also measures the
//     queue (depth, age of the oldest pending row, suspended endpoints).
//   - `outbox_send` (output) sends a claimed batch, each row in parallel:
//     signed webhook POSTs, plain webhook and email (SMTP with STARTTLS)
//     notifications; then records every outcome in one transaction, fenced by
//     claimed_by and the attempt number (delivered; pending again after the
//     internal/retry policy's backoff; failed after the last attempt, for a
//     redirect or a refused address; an endpoint that answers 410 is
//     disabled, one whose deliveries keep failing is suspended).
//   - `pg_partitions` (processor) creates the monthly partitions of
//     transactions and account_events ahead (internal/dbmigrate's
//     EnsurePartitionsAhead) on each message it gets: worker.yaml feeds it an
//     hourly `generate` tick, the first at start.
//
// The split input/output is the engine's own shape for a queue consumer:
// the input decides what is due and holds it, the output does the I/O and
// acknowledges, and max_in_flight sets how many batches are sent at once.
// All three connect as speculapro_system (SP_DB_SYSTEM_URL) and refuse at
// start a role that cannot bypass row-level security, with the documented
// line.
package outbox
