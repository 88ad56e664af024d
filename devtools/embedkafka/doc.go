// Package embedkafka owns the Kafka-protocol broker that `speculapro dev` runs
// in-process when no SP_KAFKA_BROKERS is given: franz-go's kfake, single
// broker, persisted to a data folder so that stopping and starting dev loses
// nothing that was acknowledged. It is a development convenience only; tests
// of Kafka behaviour run against a real Apache Kafka broker.
package embedkafka
