package outbox

// The worker's metric names. Label outbox is webhook (webhook_deliveries)
// or notification (notifications).
const (
	// deliveries by outcome: delivered, retry (pending again after a
	// backoff), failed (no attempt left, or refused for good), released
	// (handed back unsent: its endpoint was disabled meanwhile).
	MetricDeliveries      = "speculapro_worker_deliveries_total"
	MetricAttemptDuration = "speculapro_worker_attempt_duration_ns"
	MetricQueueDepth      = "speculapro_worker_queue_depth"
	MetricOldestPending   = "speculapro_worker_oldest_pending_seconds"
	MetricSuspended       = "speculapro_worker_endpoints_suspended"
	MetricSuspensions     = "speculapro_worker_endpoint_suspensions_total"
	MetricRecordRetries   = "speculapro_worker_record_retries_total"
	MetricPartitionsUntil = "speculapro_worker_partitions_covered_until_seconds"
	MetricPartitionsMade  = "speculapro_worker_partitions_created_total"
	MetricPartitionsFail  = "speculapro_worker_partition_failures_total"
)

// Outbox names as the metrics and the messages' metadata carry them.
const (
	Webhook      = "webhook"
	Notification = "notification"
)

// Outcomes of one attempt.
const (
	OutcomeDelivered = "delivered"
	OutcomeRetry     = "retry"
	OutcomeFailed    = "failed"
	OutcomeReleased  = "released"
)
