// Package pgretry owns the retry and fault policy of a batch written to
// PostgreSQL, the one both of the database's outputs (the persister's and
// the stream's) follow: what a failed attempt's SQLSTATE says to do (try the
// same batch again here with backoff, hand rows back to wait for a month's
// partition, or report the connection lost so the engine reconnects), the
// backoff between attempts (internal/retry), and how failures are counted:
// a retry only when a backoff follows, a batch's fault once whichever step
// fails, a shutdown never.
package pgretry
