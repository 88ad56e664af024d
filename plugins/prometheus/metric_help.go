package prometheus

import "strings"

// metricHelp is the HELP text of every metric the roles export: what the
// metric means and in which unit, so a dashboard author reading /metrics
// does not need the source. A metric missing here gets a generic text that
// says so (TestEveryMetricHasHelp in tests/ fails on it for the pipelines
// it runs). Add a line with every new metric.
var metricHelp = map[string]string{
	// The engine's own (Redpanda Connect's names; timers are in seconds as
	// histograms, use_histogram_timing, and in nanoseconds as summaries).
	"input_received":           "Messages the input read.",
	"input_latency_ns":         "Time from a message being read to its acknowledgement by the output (the engine's name: seconds as a histogram, nanoseconds as a summary).",
	"input_connection_up":      "Times the input connected; compare with input_connection_lost.",
	"input_connection_failed":  "Failed attempts of the input to connect (a missing topic counts here).",
	"input_connection_lost":    "Times the input lost its connection.",
	"output_sent":              "Messages the output wrote.",
	"output_batch_sent":        "Batches the output wrote.",
	"output_error":             "Writes the output failed (each is retried or handed back; none is dropped).",
	"output_latency_ns":        "Time one write of the output took (the engine's name: seconds as a histogram, nanoseconds as a summary).",
	"output_connection_up":     "Times the output connected; compare with output_connection_lost.",
	"output_connection_failed": "Failed attempts of the output to connect (PostgreSQL unreachable counts here).",
	"output_connection_lost":   "Times the output lost its connection (for pg_copy_upsert: PostgreSQL went away during a write).",
	"processor_received":       "Messages a processor received.",
	"processor_sent":           "Messages a processor passed on.",
	"processor_batch_received": "Batches a processor received.",
	"processor_batch_sent":     "Batches a processor passed on.",
	"processor_error":          "Messages a processor flagged with an error (event_decode: undecodable records).",
	"processor_latency_ns":     "Time a processor took per batch (the engine's name: seconds as a histogram, nanoseconds as a summary).",
	"buffer_received":          "Messages written to the buffer.",
	"buffer_sent":              "Messages read from the buffer.",
	"buffer_latency_ns":        "Time messages spent in the buffer.",
	"batch_created":            "Batches the batching policy created, by mechanism.",

	// Kafka.
	"speculapro_kafka_consumer_lag": "Records of a partition written to Kafka and not yet processed by this process's consumer group: the signal that a role keeps up. A partition owned by another process reads 0 here.",
	"kafka_franz_output_timed_out":  "Writes Kafka did not take within the kafka_franz output's timeout (nacked and retried).",

	// Persister.
	"speculapro_persist_batches_total":                "Batches the persister committed to PostgreSQL.",
	"speculapro_persist_rows_stored_total":            "Rows the persister inserted (transactions or account_events, by label table).",
	"speculapro_persist_rows_skipped_total":           "Rows the persister skipped because they were already stored (a replay) or repeated within a batch.",
	"speculapro_persist_placeholders_created_total":   "Placeholder customers or accounts (label entity) the persister created for records that arrived before them.",
	"speculapro_persist_counterparties_created_total": "New counterparties the persister created (de-duplicated by fingerprint).",
	"speculapro_persist_dead_letters_total":           "Records the persister parked on the dead-letter topic, by reason: undecodable (not a readable event, or a field outside its limits) or rejected (the database refused the row).",
	"speculapro_persist_retries_total":                "Backoffs that followed a failed attempt at a batch (or a hand-back of records waiting for a partition).",
	"speculapro_persist_faults_total":                 "Batches that failed at least once, counted once each; a shutdown is not a fault.",
	"speculapro_persist_stage_duration_seconds":       "Seconds of work per batch in each stage of the persister (decode, prepare, write, dead_letter). Stages of different batches overlap, so they add up to more than wall-clock time; use consumer lag to judge keeping up.",

	// Stream evaluator.
	"speculapro_stream_stage_duration_seconds":     "Seconds of work per batch in each stage of the stream evaluator (decode, features, evaluate, write). Stages of different batches overlap.",
	"speculapro_stream_batches_total":              "Batches of rule hits the stream evaluator committed.",
	"speculapro_stream_rule_hits_stored_total":     "Rule hits the stream evaluator stored, by mode (live, or shadow: stored, never alerted).",
	"speculapro_stream_alerts_created_total":       "Alerts the stream evaluator created.",
	"speculapro_stream_cases_opened_total":         "Cases the stream evaluator opened for new alerts.",
	"speculapro_stream_outbox_queued_total":        "Webhook deliveries and notifications the stream evaluator queued, by outbox.",
	"speculapro_stream_records_skipped_total":      "Records the stream evaluator skipped, by reason: undecodable records, rejected hits.",
	"speculapro_stream_retries_total":              "Backoffs after a failed attempt to store a batch of rule hits.",
	"speculapro_stream_faults_total":               "Batches of rule hits that failed at least once; a shutdown is not a fault.",
	"speculapro_stream_events_evaluated_total":     "Events the rules were evaluated on.",
	"speculapro_stream_feature_cache_hits_total":   "Entities a batch of the stream took from the process's cache of running totals instead of reading them from Redis.",
	"speculapro_stream_feature_cache_misses_total": "Entities a batch of the stream read from Redis because the process's cache did not hold them; hits over hits plus misses says whether cache_bytes holds what the stream keeps coming back to.",
	"speculapro_stream_feature_conflicts_total":    "Entity writes of the running totals lost to another writer (the compare-and-set on the generation failed) and redone after reading the entity again.",
	"speculapro_stream_replays_skipped_total":      "Events skipped because the running totals already counted them (a replay inside SP_STREAM_REPLAY_TTL).",
	"speculapro_stream_rule_hits_total":            "Times a rule fired, by rule and mode (live or shadow).",
	"speculapro_stream_rule_evaluations_total":     "Events a rule was evaluated on, by rule and mode: the denominator of its hit rate.",
	"speculapro_stream_rule_errors_total":          "Times a rule could not be decided on an event (a missing field, a type error), by rule.",
	"speculapro_stream_rules_loaded":               "Rules loaded and evaluated, by kind.",
	"speculapro_stream_feature_update_seconds":     "Seconds one batch's running-totals update in Redis took.",
	"speculapro_stream_redis_roundtrip_seconds":    "Seconds one round trip to Redis took while updating running totals.",

	// Ingest API.
	"speculapro_ingest_items_total":      "Items the ingest API answered, by endpoint and outcome (accepted, duplicate, conflict, rejected, retry).",
	"speculapro_ingest_requests_total":   "Requests the ingest API answered, by endpoint and HTTP status code.",
	"speculapro_ingest_request_duration": "Time from a request's arrival to its answer, by endpoint (seconds as a histogram, nanoseconds as a summary).",
	"speculapro_ingest_overloaded_total": "Requests the ingest API refused with 503 because its in-flight body budget was full.",
	"speculapro_ingest_throttled_total":  "Requests the ingest API refused with 429 because their workspace's or API key's share of the in-flight body budget was full, by share.",

	// Case API.
	"speculapro_cases_closed_total":        "Cases closed through the case API, by disposition (true_positive, false_positive, inconclusive).",
	"speculapro_case_changes_total":        "Changes made through the case API (each one case event), by kind: assigned, commented, status_changed, closed, reopened.",
	"speculapro_case_api_requests_total":   "Case API requests answered, by route and HTTP status code.",
	"speculapro_case_api_latency_ns":       "Time to answer a case API request, from its arrival, by route.",
	"speculapro_case_events_dropped_total": "Case events the cases pipeline did not take in time, so not handed to its output (each is in the outbox regardless).",

	// Decision API.
	"speculapro_decision_latency_ns":             "Time to answer a decision, by outcome.",
	"speculapro_decision_outcomes_total":         "Decisions answered, by workspace and outcome.",
	"speculapro_decision_degraded_total":         "Decisions answered with the fallback because the running totals could not be read in time, by workspace and reason.",
	"speculapro_decision_requests_total":         "Decision requests answered, by HTTP status code.",
	"speculapro_decision_throttled_total":        "Decision requests refused with 429 because their workspace had its whole share of the requests worked on at once, by share.",
	"speculapro_decision_buffer_events":          "Decided transactions waiting in memory for Kafka.",
	"speculapro_decision_spool_events":           "Decided transactions parked in the Redis spool, waiting for Kafka (zero normally).",
	"speculapro_decision_events_spooled_total":   "Decided transactions parked in the Redis spool because Kafka did not take them in time.",
	"speculapro_decision_events_unspooled_total": "Parked decided transactions delivered to Kafka later.",
	"speculapro_decision_events_lost_total":      "Decided transactions lost (Kafka and Redis both failed, or an unreadable spool entry). Alert on any increase.",

	// Worker.
	"speculapro_worker_attempt_duration_ns":              "Time one webhook delivery attempt took.",
	"speculapro_worker_deliveries_total":                 "Webhook deliveries attempted, by result.",
	"speculapro_worker_endpoint_suspensions_total":       "Times a webhook endpoint was suspended after failing repeatedly.",
	"speculapro_worker_endpoints_suspended":              "Webhook endpoints suspended now.",
	"speculapro_worker_oldest_pending_seconds":           "Age in seconds of the oldest delivery still waiting.",
	"speculapro_worker_partition_failures_total":         "Failed attempts to create the monthly partitions ahead.",
	"speculapro_worker_partitions_covered_until_seconds": "Unix time up to which monthly partitions exist (the worker's horizon).",
	"speculapro_worker_partitions_created_total":         "Monthly partitions the worker created.",
	"speculapro_worker_queue_depth":                      "Deliveries waiting in the outbox.",
	"speculapro_worker_record_retries_total":             "Deliveries retried after a failed attempt.",
}

// helpOf is the HELP text of a metric.
func helpOf(name string) string {
	if h, ok := metricHelp[name]; ok {
		return h
	}
	if strings.HasPrefix(name, "speculapro_") {
		return missingHelpPrefix + name + " (add it to plugins/prometheus/metric_help.go)."
	}
	return missingHelpPrefix + name + "."
}

// missingHelpPrefix starts the HELP text of a metric without a description.
const missingHelpPrefix = "Undocumented metric "
