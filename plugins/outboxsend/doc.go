// Package outboxsend owns the worker's `outbox_send` output: it sends a
// batch outbox_claim claimed, each row in parallel (signed webhook POSTs,
// plain webhook and email (SMTP with STARTTLS) notifications), then records
// every outcome in one transaction, fenced by claimed_by and the attempt
// number (delivered; pending again after the internal/retry policy's
// backoff; failed after the last attempt, for a redirect or a refused
// address; an endpoint that answers 410 is disabled, one whose deliveries
// keep failing is suspended). It connects as speculapro_system and refuses
// at start a role that cannot bypass row-level security.
package outboxsend
