// Package redisspool holds the redis_spool output, which wraps the decision
// role's Kafka write with a large in-memory buffer and a Redis spool, so that
// a decided transaction is lost only when Kafka and Redis both fail; one
// replayer at a time drains the spool back to Kafka.
package redisspool
