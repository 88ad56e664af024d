// Package pgrulehits owns the stream evaluator's `pg_rule_hits` output: it
// writes what `rule_eval` found (rule hits, the alerts they raise, the cases
// those alerts open or join with their case events, and the webhook
// deliveries and notifications of both) once per batch,
// idempotently, in one database transaction (internal/pgwrite). It opens
// its pool of speculapro_system connections as pg_copy_upsert does and
// refuses a role that cannot bypass row-level security.
package pgrulehits
