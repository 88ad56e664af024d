// Package kafkafranz owns SpeculaPro's two Kafka components, which share one
// config name (and this package): the kafka_franz input (a franz-go consumer group that keeps per-partition order
// and commits only what was acked) and the kafka_franz output (a franz-go
// producer with keys, headers from metadata, acks=all, the idempotent producer,
// the Java client's partitioning and a delivery timeout). Both connect through
// internal/kafkaconf, so TLS, SASL and the SP_KAFKA_* settings behave the same
// in every pipeline.
package kafkafranz
