// Package outbox owns what the worker role's two components (outbox_claim
// and outbox_send, pipelines/worker.yaml) agree on about the transactional
// outbox of migrations 00006 and 00009: the metadata every claimed row's
// message carries, the name claimed_by gives this process, the in-process
// wake-up a recorded outcome sends a waiting claim, the retry jitter, and
// the worker's metric names and outcomes (pg_partitions' included).
//
// The split input/output is the engine's own shape for a queue consumer:
// the input decides what is due and holds it, the output does the I/O and
// acknowledges, and max_in_flight sets how many batches are sent at once.
package outbox
