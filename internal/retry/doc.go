// Package retry owns the one way SpeculaPro retries an operation: exponential
// backoff with full jitter and a cap, a classifier that stops at the first
// permanent error, an onRetry hook that is called only when a backoff really
// follows (so a retry counter counts backoffs, not failures), and a context
// check right after every failed attempt, so that a shutdown landing during an
// attempt is reported as the context's error: never as a retry, a permanent
// error or retry exhaustion.
package retry
