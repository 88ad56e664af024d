package pgretry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/applog"
	"github.com/speculapro/speculapro/internal/pgclass"
	"github.com/speculapro/speculapro/internal/retry"
)

// ErrMustWait marks a batch that met a missing partition: its rows wait,
// handed back to the input, until the partition exists.
var ErrMustWait = errors.New("rows wait for a partition")

const (
	// Jitter is the share of each backoff that is randomised, so writers
	// that failed together do not come back together.
	Jitter = 0.2
)

// Verdict is what a failed attempt asks for.
type Verdict int

const (
	// Retry: try the same batch again here after a backoff; time or an
	// operator fixes it (permission, disk full, a deadlock, a timeout).
	Retry Verdict = iota
	// Reconnect: PostgreSQL cannot be reached; report the output not
	// connected, so readiness shows the outage and the engine writes the
	// batch again once Connect reaches the database.
	Reconnect
	// Wait: a row's month has no partition; the rows of the Kafka
	// partitions it concerns wait (only an output that can hand rows back
	// asks for this verdict, see Policy.WaitForPartitions).
	Wait
)

// Classify says what a failed attempt's error asks for. A row's fault
// (pgclass.IsRowFault) never reaches here: the outputs isolate such rows
// inside the attempt.
func Classify(err error) Verdict {
	switch {
	case pgclass.IsConnectionLost(err):
		return Reconnect
	case pgclass.IsMissingPartition(err):
		return Wait
	}
	return Retry
}

// Counter is what the policy uses of an engine counter.
type Counter interface {
	Incr(count int64, labelValues ...string)
}

// Policy is one output's retry and fault policy.
type Policy struct {
	// Initial is the backoff before the first retry; it doubles per retry
	// up to Max.
	Initial, Max time.Duration
	// Retries counts one per backoff that follows a failed attempt, Faults
	// one per batch that failed at least once; both take Label.
	Retries, Faults Counter
	Label           string
	// Log and RetryLine: the documented ERROR line of every retry, with
	// rows, err and backoff.
	Log       *service.Logger
	RetryLine string
	// WaitForPartitions makes a missing partition end Batch.Do with
	// ErrMustWait; otherwise it is retried here like any other fault.
	WaitForPartitions bool
	// AttemptTimeout bounds each ping of Reconnect (0: the context's).
	AttemptTimeout time.Duration

	lost reconnection
}

// Backoff is the nominal backoff after the given failed attempt (counting
// from 1), before jitter.
func (p *Policy) Backoff(attempt int) time.Duration { return p.retry(nil, 0, nil).Backoff(attempt) }

// Batch starts the policy for one batch.
func (p *Policy) Batch() *Batch { return &Batch{p: p} }

// Batch is the policy applied to one batch: its fault is counted once,
// whichever of its steps fails.
type Batch struct {
	p       *Policy
	faulted bool
}

// Faulted notes that the batch's fault was counted already (its records
// were handed back before and this is one more retry of the same fault).
func (b *Batch) Faulted() { b.faulted = true }

// Retrying counts a retry, and the batch's fault the first time, and logs
// the retry line. Call it only when a backoff of the given length follows.
func (b *Batch) Retrying(rows int, err error, backoff time.Duration) {
	b.fault()
	b.p.Retries.Incr(1, b.p.Label)
	applog.With(b.p.Log, "rows", rows, "err", err.Error(), "backoff", backoff.Round(time.Millisecond).String()).Error(b.p.RetryLine)
}

// fault counts the batch's fault the first time.
func (b *Batch) fault() {
	if !b.faulted {
		b.faulted = true
		b.p.Faults.Incr(1, b.p.Label)
	}
}

// Do runs attempt until it succeeds, retrying here with backoff what waiting
// fixes. It returns:
//   - nil once an attempt succeeded;
//   - ctx's error when ctx ends (a shutdown: nothing counted or logged);
//   - service.ErrNotConnected wrapping the database's error when the
//     connection was lost, after counting the batch's fault; the retries
//     are the waits Reconnect makes before the engine writes it again;
//   - ErrMustWait wrapping the database's error for a missing partition when
//     the policy waits for partitions (counted by whoever hands rows back);
//   - attempt's error when it is not the database's (a lease's end).
func (b *Batch) Do(ctx context.Context, rows int, attempt func(ctx context.Context) error) error {
	permanent := func(err error) bool { return b.verdict(err) != Retry }
	err := retry.Do(ctx, b.p.retry(permanent, rows, b), func(ctx context.Context, _ int) error { return attempt(ctx) })
	if err == nil || ctx.Err() != nil {
		return err
	}
	switch b.verdict(err) {
	case Wait:
		return fmt.Errorf("%w: %w", ErrMustWait, err)
	case Reconnect:
		b.fault()
		b.p.lost.lose(b, rows)
		return fmt.Errorf("%w: %w", service.ErrNotConnected, err)
	}
	return err
}

// Keep runs attempt until it succeeds or ctx ends, retrying every failure
// with the policy's backoff: for a step whose failures are not the
// database's (handing dead letters to another output).
func (b *Batch) Keep(ctx context.Context, rows int, attempt func(ctx context.Context) error) error {
	return retry.Do(ctx, b.p.retry(nil, rows, b), func(ctx context.Context, _ int) error { return attempt(ctx) })
}

func (b *Batch) verdict(err error) Verdict {
	v := Classify(err)
	if v == Wait && !b.p.WaitForPartitions {
		return Retry
	}
	return v
}

// retry is the internal/retry policy of one batch.
func (p *Policy) retry(permanent func(error) bool, rows int, b *Batch) retry.Policy {
	rp := retry.Policy{Initial: p.Initial, Max: p.Max, Jitter: Jitter, Permanent: permanent}
	if b != nil {
		rp.OnRetry = func(_ int, err error, backoff time.Duration) { b.Retrying(rows, err, backoff) }
	}
	return rp
}
