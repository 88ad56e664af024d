// Package outboxclaim owns the worker's `outbox_claim` input: it claims due
// webhook_deliveries and notifications rows with SELECT … FOR UPDATE SKIP
// LOCKED in one short statement, which also takes a lease on them
// (next_attempt_at moves one lease ahead, the attempt is counted, claimed_by
// names the worker): several workers share the queue without sending a row
// twice at once, and the rows of a worker that died come due again when its
// lease runs out. It also measures the queue (depth, age of the oldest
// pending row, suspended endpoints). It connects as speculapro_system
// (SP_DB_SYSTEM_URL) and refuses at start a role that cannot bypass
// row-level security, with the documented line.
package outboxclaim
