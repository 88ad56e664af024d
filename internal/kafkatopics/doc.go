// Package kafkatopics owns SpeculaPro's Kafka topics: their names (eight
// topics and a .dlq twin each, behind SP_KAFKA_TOPIC_PREFIX), how many
// partitions and replicas they are created with, and creating the missing ones
// without touching those that exist. `speculapro topics` and `speculapro dev`
// both go through Ensure so that every environment gets the same topics.
package kafkatopics
