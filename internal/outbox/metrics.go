package outbox

// The worker's metric names. Label outbox is webhook (webhook_deliveries)
// or notification (notifications).
const (
	// deliveries by outcome: delivered, retry (pending again after a
	// backoff), failed (no attempt left, or refused for good), released
	// (handed back unsent: its endpoint was disabled meanwhile).
	metricDeliveries      = "speculapro_worker_deliveries_total"
	metricAttemptDuration = "speculapro_worker_attempt_duration_ns"
	metricQueueDepth      = "speculapro_worker_queue_depth"
	metricOldestPending   = "speculapro_worker_oldest_pending_seconds"
	metricSuspended       = "speculapro_worker_endpoints_suspended"
	metricSuspensions     = "speculapro_worker_endpoint_suspensions_total"
	metricRecordRetries   = "speculapro_worker_record_retries_total"
	metricPartitionsUntil = "speculapro_worker_partitions_covered_until_seconds"
	metricPartitionsMade  = "speculapro_worker_partitions_created_total"
	metricPartitionsFail  = "speculapro_worker_partition_failures_total"
)

// Outbox names as the metrics and the messages' metadata carry them.
const (
	outboxWebhook      = "webhook"
	outboxNotification = "notification"
)

// Outcomes of one attempt.
const (
	outcomeDelivered = "delivered"
	outcomeRetry     = "retry"
	outcomeFailed    = "failed"
	outcomeReleased  = "released"
)
