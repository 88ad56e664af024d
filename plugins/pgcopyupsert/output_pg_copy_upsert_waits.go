package pgcopyupsert

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/applog"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/ownership"
	"github.com/speculapro/speculapro/internal/pgclass"
	"github.com/speculapro/speculapro/internal/pgretry"
	"github.com/speculapro/speculapro/internal/retry"
)

// What a failed batch does, by what failed (pgretry.Classify decides):
//   - a row's fault: isolated and dead-lettered (output_pg_copy_upsert_isolate.go);
//   - a missing partition: the rows of the Kafka partitions it concerns wait,
//     handed back to the input; the other partitions' rows are stored;
//   - a lost connection: the output reports itself not connected, so
//     readiness shows the outage, and the engine writes the batch again once
//     Connect reaches PostgreSQL;
//   - anything else (permission, disk full, a deadlock, an attempt timed
//     out): the same batch again here, with backoff, until it stores or its
//     records' contexts end (shutdown, partitions revoked).

// stopped is what WriteBatch returns when a step gave up with err: a lease's
// end (shutdown: nothing logged, no fault; revoked: one WARN line) or err.
func (o *pgCopyUpsert) stopped(ctx context.Context, err error, rows int) error {
	cause := ownership.Cause(ctx)
	switch {
	case errors.Is(cause, ownership.ErrRevoked):
		applog.With(o.log, "rows", rows).Warn(logRevoked)
		return cause
	case cause != nil:
		return cause
	}
	return err
}

// kafkaPartition names the Kafka partition a record came from, "" for a
// record of another input.
type kafkaPartition string

func partitionOf(msg *service.Message) kafkaPartition {
	topic, _ := msg.MetaGet("kafka_topic")
	partition, _ := msg.MetaGet("kafka_partition")
	if topic == "" && partition == "" {
		return ""
	}
	return kafkaPartition(topic + "/" + partition)
}

// partitionGroup is the rows of one Kafka partition of a batch.
type partitionGroup struct {
	part    kafkaPartition
	rows    []int // indexes into the batch's rows
	learned isolation
	done    bool
	waitErr error // the missing partition it waits for, once met
}

// waitingPartitions are the Kafka partitions of a batch whose rows wait.
type waitingPartitions struct {
	parts map[kafkaPartition]bool
	err   error // one of the failures, the headline
	rows  int
	wait  time.Duration
}

// storeAroundWaits stores the batch one Kafka partition at a time, each in
// its own transaction, so the partitions whose rows wait for a month's
// partition hold only themselves back. Partitions stored stay stored when a
// later one fails with something to retry.
func (o *pgCopyUpsert) storeAroundWaits(ctx context.Context, batch service.MessageBatch, rows []*event.Envelope, rowIndex []int, fault *pgretry.Batch) (storeResult, *waitingPartitions, error) {
	var groups []*partitionGroup
	byPart := map[kafkaPartition]*partitionGroup{}
	for i := range rows {
		p := partitionOf(batch[rowIndex[i]])
		g := byPart[p]
		if g == nil {
			g = &partitionGroup{part: p}
			byPart[p] = g
			groups = append(groups, g)
		}
		g.rows = append(g.rows, i)
	}
	var res storeResult
	err := fault.Do(ctx, len(rows), func(ctx context.Context) error {
		for _, g := range groups {
			if g.done || g.waitErr != nil {
				continue
			}
			sub := make([]*event.Envelope, len(g.rows))
			for j, i := range g.rows {
				sub[j] = rows[i]
			}
			r, err := o.store(ctx, sub, &g.learned)
			switch {
			case err == nil:
				g.done = true
				res.stats.add(r.stats)
				for _, rj := range r.rejected {
					res.rejected = append(res.rejected, rejectedRow{row: g.rows[rj.row], err: rj.err})
				}
			case pgclass.IsMissingPartition(err):
				g.waitErr = err
			default:
				return err
			}
		}
		return nil
	})
	if err != nil {
		return storeResult{}, nil, err
	}
	w := &waitingPartitions{parts: map[kafkaPartition]bool{}}
	for _, g := range groups {
		if g.waitErr != nil {
			w.parts[g.part] = true
			w.rows += len(g.rows)
			w.err = g.waitErr
		} else {
			o.waits.reset(g.part)
		}
	}
	// The wait grows with each consecutive wait of the partitions, as a
	// retry's backoff does.
	attempts := 0
	for p := range w.parts {
		attempts = max(attempts, o.waits.add(p))
	}
	w.wait = o.policy.Backoff(attempts)
	if attempts > 1 {
		// These records were handed back before: the fault was counted
		// when they first waited; this is one more retry of it.
		fault.Faulted()
	}
	fault.Retrying(w.rows, w.err, w.wait)
	return res, w, nil
}

// without drops the dead letters of waiting partitions: their records are
// delivered again, and dead-lettered then.
func (w *waitingPartitions) without(batch service.MessageBatch, dead []deadLetter) []deadLetter {
	var out []deadLetter
	for _, d := range dead {
		if !w.parts[partitionOf(batch[d.index])] {
			out = append(out, d)
		}
	}
	return out
}

// batchError hands the waiting partitions' records back to the input: every
// message of those partitions failed, the rest succeeded, and the headline
// says how long to wait.
func (w *waitingPartitions) batchError(batch service.MessageBatch) error {
	bErr := service.NewBatchError(batch, &retry.AfterError{Err: fmt.Errorf("%w: %w", pgretry.ErrMustWait, w.err), Wait: w.wait})
	for i, msg := range batch {
		if w.parts[partitionOf(msg)] {
			bErr.Failed(i, w.err)
		}
	}
	return bErr
}

// partitionWaits counts, per Kafka partition, the consecutive batches whose
// rows waited, so a partition that keeps waiting backs off as a retried
// batch does.
type partitionWaits struct {
	mu sync.Mutex
	n  map[kafkaPartition]int
}

func newPartitionWaits() *partitionWaits {
	return &partitionWaits{n: map[kafkaPartition]int{}}
}

// add counts one more wait of p and returns how many in a row.
func (w *partitionWaits) add(p kafkaPartition) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n[p]++
	return w.n[p]
}

// settled forgets the waits of the batch's partitions: it stored.
func (w *partitionWaits) settled(batch service.MessageBatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.n) == 0 {
		return
	}
	for _, msg := range batch {
		delete(w.n, partitionOf(msg))
	}
}

func (w *partitionWaits) reset(p kafkaPartition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.n, p)
}
