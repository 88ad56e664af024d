// Package kafkaconf owns how SpeculaPro connects to Kafka: seed brokers, TLS
// and SASL, read from SP_KAFKA_* settings or from a plugin's YAML fields, and
// turned into franz-go client options. Every plugin and command connects
// through it so that security rules (TLS 1.2 minimum, no PLAIN without TLS)
// hold everywhere.
package kafkaconf
