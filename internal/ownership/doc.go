// Package ownership names why a record no longer needs this process: the context
// a kafka_franz record's message carries ends when the process shuts down
// (ErrShutdown) or the record's partition is revoked from it (ErrRevoked),
// and an output that keeps retrying a batch watches those contexts, so a
// shutdown cancels its backoff at once (and is no fault) and a revoked
// partition's batch frees its writer instead of retrying for a partition
// another process now owns.
package ownership
