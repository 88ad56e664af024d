package outboxsend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/outbox"
	"github.com/speculapro/speculapro/internal/retry"
)

// recordLoop records outcomes as they come: each transaction takes every
// outcome that ended while the previous one was being recorded (up to
// recordGroupMax), so a lone delivery is recorded at once and a busy worker
// still records in groups.
func (o *outboxSend) recordLoop() {
	defer close(o.recorded)
	for j := range o.outcomes {
		group := []*job{j}
	more:
		for len(group) < recordGroupMax {
			select {
			case j, ok := <-o.outcomes:
				if !ok {
					break more
				}
				group = append(group, j)
			default:
				break more
			}
		}
		if err := o.record(o.recCtx, group); err != nil {
			// Only a shutdown that could not wait ends record: the rows come
			// back when their leases run out.
			o.log.Warnf("worker: %v", err)
			continue
		}
		outbox.SignalSlotsFreed()
		for _, j := range group {
			o.deliveries.Incr(1, j.outbox, j.eventType, j.outcome)
			if j.outcome == outbox.OutcomeFailed && j.recorded {
				o.log.With("outbox", j.outbox, "id", j.id.String(), "attempts", j.attempt, "status", j.status, "err", j.errText).
					Warn("worker: delivery failed for good")
			}
		}
	}
}

// The outcome statements: one per outbox and batch, fenced by the claim.
const (
	recordWebhooks = `
UPDATE speculapro.webhook_deliveries d
   SET status = CASE u.outcome WHEN 'delivered' THEN 'delivered' WHEN 'failed' THEN 'failed' ELSE 'pending' END,
       attempts = CASE WHEN u.outcome = 'released' THEN d.attempts - 1 ELSE d.attempts END,
       next_attempt_at = now() + make_interval(secs => u.delay),
       last_error = CASE WHEN u.outcome = 'released' THEN d.last_error ELSE NULLIF(u.err, '') END,
       response_status = CASE WHEN u.outcome = 'released' THEN d.response_status ELSE NULLIF(u.code, 0) END,
       delivered_at = CASE WHEN u.outcome = 'delivered' THEN now() END,
       claimed_by = NULL
  FROM unnest($1::uuid[], $2::int[], $3::text[], $4::float8[], $5::text[], $6::int[]) AS u(id, attempt, outcome, delay, err, code)
 WHERE d.id = u.id AND d.status = 'pending' AND d.claimed_by = $7 AND d.attempts = u.attempt
RETURNING d.id`

	recordNotifications = `
UPDATE speculapro.notifications n
   SET status = CASE u.outcome WHEN 'delivered' THEN 'sent' WHEN 'failed' THEN 'failed' ELSE 'pending' END,
       attempts = CASE WHEN u.outcome = 'released' THEN n.attempts - 1 ELSE n.attempts END,
       next_attempt_at = now() + make_interval(secs => u.delay),
       last_error = CASE WHEN u.outcome = 'released' THEN n.last_error ELSE NULLIF(u.err, '') END,
       sent_at = CASE WHEN u.outcome = 'delivered' THEN now() END,
       claimed_by = NULL
  FROM unnest($1::uuid[], $2::int[], $3::text[], $4::float8[], $5::text[], $6::int[]) AS u(id, attempt, outcome, delay, err, code)
 WHERE n.id = u.id AND n.status = 'pending' AND n.claimed_by = $7 AND n.attempts = u.attempt
RETURNING n.id`

	// Deliveries failed in a row per endpoint, and since when every attempt
	// has failed; a delivered one resets both. Endpoints with nothing to
	// change are not touched (not locked: the claim skips locked endpoints).
	countFailures = `
UPDATE speculapro.webhook_endpoints e
   SET consecutive_failures = CASE WHEN u.delivered > 0 THEN u.failed ELSE e.consecutive_failures + u.failed END,
       failing_since = CASE WHEN u.delivered > 0 THEN NULL WHEN u.attempts_failed > 0 THEN coalesce(e.failing_since, now()) ELSE e.failing_since END
  FROM unnest($1::uuid[], $2::int[], $3::int[], $4::int[]) AS u(id, delivered, failed, attempts_failed)
 WHERE e.id = u.id AND (u.failed > 0 OR u.attempts_failed > 0 OR e.consecutive_failures <> 0 OR e.failing_since IS NOT NULL)
RETURNING e.id, e.consecutive_failures, extract(epoch FROM now() - coalesce(e.failing_since, now()))::float8`

	disableEndpoint = `
UPDATE speculapro.webhook_endpoints SET enabled = false, disabled_reason = $2, updated_at = now()
 WHERE id = $1 AND enabled
RETURNING workspace_id`
)

// record stores every outcome in one transaction, retried through the
// retry policy while the database fails, until it succeeds or the worker
// stops: giving up would only send again what was delivered. A row whose
// lease ran out meanwhile and was claimed again is fenced out, harmlessly.
func (o *outboxSend) record(ctx context.Context, jobs []*job) error {
	var (
		suspended []suspension
		gone      []event.UUID
	)
	err := retry.Do(ctx, retry.Policy{
		Initial: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: outbox.BackoffJitter,
		OnRetry: func(attempt int, err error, backoff time.Duration) {
			o.recRetries.Incr(1)
			o.log.With("err", err.Error(), "backoff", backoff.String()).Warn("worker: recording outcomes failed, retrying")
		},
	}, func(ctx context.Context, _ int) error {
		suspended, gone = nil, nil
		for _, j := range jobs {
			j.recorded = false
		}
		return pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
			for _, queue := range []string{outbox.Webhook, outbox.Notification} {
				if err := o.recordOutbox(ctx, tx, queue, jobs); err != nil {
					return err
				}
			}
			var err error
			suspended, gone, err = o.endpointHealth(ctx, tx, jobs)
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("recording the outcomes of %d outbox rows: %w", len(jobs), err)
	}
	for _, s := range suspended {
		o.suspensions.Incr(1)
		o.log.With("endpoint", s.id.String(), "reason", s.reason).Warn("worker: endpoint suspended")
	}
	for _, id := range gone {
		o.log.With("endpoint", id.String()).Warn("worker: endpoint disabled: it answered 410 Gone")
	}
	return nil
}

func (o *outboxSend) recordOutbox(ctx context.Context, tx pgx.Tx, queue string, jobs []*job) error {
	var (
		ids      []event.UUID
		attempts []int32
		outcomes []string
		delays   []float64
		errs     []string
		codes    []int32
		byID     = map[event.UUID]*job{}
	)
	for _, j := range jobs {
		if j.outbox != queue {
			continue
		}
		ids, attempts, outcomes = append(ids, j.id), append(attempts, j.attempt), append(outcomes, j.outcome)
		delays, errs, codes = append(delays, j.delay.Seconds()), append(errs, j.errText), append(codes, int32(j.status))
		byID[j.id] = j
	}
	if len(ids) == 0 {
		return nil
	}
	query := recordWebhooks
	if queue == outbox.Notification {
		query = recordNotifications
	}
	rows, err := tx.Query(ctx, query, ids, attempts, outcomes, delays, errs, codes, outbox.WorkerID())
	if err != nil {
		return fmt.Errorf("recording %d %s outcomes: %w", len(ids), queue, err)
	}
	var id event.UUID
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		if j := byID[id]; j != nil {
			j.recorded = true
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recording %d %s outcomes: %w", len(ids), queue, err)
	}
	return nil
}

// suspension is an endpoint suspended by a recording and why.
type suspension struct {
	id     event.UUID
	reason string
}

// suspendReason says why an endpoint with inARow deliveries failed in a
// row, failing every attempt for failingFor, is suspended, or "" when it is
// not.
func (o *outboxSend) suspendReason(inARow int, failingFor time.Duration) string {
	switch {
	case o.suspendAfter > 0 && inARow >= o.suspendAfter:
		return fmt.Sprintf("suspended: %d deliveries failed in a row", o.suspendAfter)
	case o.suspendTime > 0 && failingFor >= o.suspendTime:
		return fmt.Sprintf("suspended: every attempt failed for %s", o.suspendTime)
	}
	return ""
}

// endpointTally is one endpoint's recorded outcomes in a recording.
type endpointTally struct{ delivered, failed, attemptsFailed int32 }

// tallyEndpoints counts the recorded webhook outcomes per endpoint, and
// names the endpoints that answered 410 Gone.
func tallyEndpoints(jobs []*job) (per map[event.UUID]*endpointTally, goneSet map[event.UUID]bool) {
	per = map[event.UUID]*endpointTally{}
	goneSet = map[event.UUID]bool{}
	for _, j := range jobs {
		if j.outbox != outbox.Webhook || !j.recorded {
			continue
		}
		t := per[j.endpoint]
		if t == nil {
			t = &endpointTally{}
			per[j.endpoint] = t
		}
		switch j.outcome {
		case outbox.OutcomeDelivered:
			t.delivered++
		case outbox.OutcomeFailed:
			t.failed++
			t.attemptsFailed++
		case outbox.OutcomeRetry:
			t.attemptsFailed++
		}
		if j.gone {
			goneSet[j.endpoint] = true
		}
	}
	return per, goneSet
}

// endpointHealth counts the failures in a row of the recorded outcomes'
// endpoints and disables those that answered 410 or reached suspend_after
// or suspend_after_failing. It returns the endpoints this recording
// disabled.
func (o *outboxSend) endpointHealth(ctx context.Context, tx pgx.Tx, jobs []*job) (suspended []suspension, gone []event.UUID, err error) {
	per, goneSet := tallyEndpoints(jobs)
	if len(per) == 0 {
		return nil, nil, nil
	}
	ids := make([]event.UUID, 0, len(per))
	for id := range per {
		ids = append(ids, id)
	}
	// One lock order for every worker.
	slices.SortFunc(ids, func(a, b event.UUID) int { return strings.Compare(a.String(), b.String()) })
	delivered, failed, attemptsFailed := make([]int32, len(ids)), make([]int32, len(ids)), make([]int32, len(ids))
	for i, id := range ids {
		delivered[i], failed[i], attemptsFailed[i] = per[id].delivered, per[id].failed, per[id].attemptsFailed
	}
	rows, err := tx.Query(ctx, countFailures, ids, delivered, failed, attemptsFailed)
	if err != nil {
		return nil, nil, fmt.Errorf("counting endpoint failures: %w", err)
	}
	var (
		id         event.UUID
		inARow     int32
		failingFor float64
		over       []suspension
	)
	if _, err = pgx.ForEachRow(rows, []any{&id, &inARow, &failingFor}, func() error {
		if goneSet[id] {
			return nil
		}
		if reason := o.suspendReason(int(inARow), time.Duration(failingFor*float64(time.Second))); reason != "" {
			over = append(over, suspension{id, reason})
		}
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("counting endpoint failures: %w", err)
	}
	disable := func(id event.UUID, reason string) (bool, error) {
		var ws event.UUID
		err := tx.QueryRow(ctx, disableEndpoint, id, reason).Scan(&ws)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil // already disabled
		}
		if err != nil {
			return false, fmt.Errorf("disabling endpoint %s: %w", id, err)
		}
		return true, nil
	}
	for _, id := range ids {
		if !goneSet[id] {
			continue
		}
		ok, err := disable(id, "gone: the endpoint answered 410 Gone")
		if err != nil {
			return nil, nil, err
		}
		if ok {
			gone = append(gone, id)
		}
	}
	for _, s := range over {
		ok, err := disable(s.id, s.reason)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			suspended = append(suspended, s)
		}
	}
	return suspended, gone, nil
}
