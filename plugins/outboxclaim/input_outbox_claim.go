package outboxclaim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/outbox"
	"github.com/speculapro/speculapro/internal/pgclass"
	"github.com/speculapro/speculapro/internal/pgsystem"
	"github.com/speculapro/speculapro/internal/procmem"
	"github.com/speculapro/speculapro/internal/retry"
)

const (
	ocFieldOutboxes      = "outboxes"
	ocFieldBatchSize     = "batch_size"
	ocFieldPollInterval  = "poll_interval"
	ocFieldLease         = "lease"
	ocFieldStatsInterval = "stats_interval"
	ocFieldEndpointLimit = "endpoint_concurrency"
	ocFieldTenantLimit   = "workspace_concurrency"
)

func outboxClaimSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("Claims due rows of the PostgreSQL outbox (webhook_deliveries, notifications) with `FOR UPDATE SKIP LOCKED` and a lease, and emits one message per row for `outbox_send`.").
		Description(`
Each claim is one short statement (its own transaction): it picks up to `+"`batch_size`"+` pending rows whose
`+"`next_attempt_at`"+` has come, skipping rows another worker has locked, and in the same statement moves their
`+"`next_attempt_at`"+` one `+"`lease`"+` ahead, counts the attempt and sets `+"`claimed_by`"+` to this process
(`+"`<host>/<pid>`"+`). So several workers share the queue without sending a row twice at once, and the rows of a
worker that was killed come due again when the lease runs out: delivery is at least once, and the only duplicates
are the rows a dead worker had in flight. Webhook deliveries of a disabled (or suspended) endpoint stay pending and
are not claimed until it is enabled again. The outboxes are claimed in turn, so a backlog in one does not starve
the other; when nothing is due the input waits `+"`poll_interval`"+`.

Webhook deliveries are claimed fairly: each enabled endpoint has at most `+"`endpoint_concurrency`"+` deliveries in
flight (claimed, lease running, outcome not yet recorded), counted across every worker, and a claim takes each
endpoint's oldest due deliveries up to that limit and fills the batch round-robin, one delivery per workspace and
then per endpoint in turn. So an endpoint that hangs holds at most `+"`endpoint_concurrency`"+` deliveries while
the others' go out, and its backlog never fills a batch. A workspace's endpoints together have at most
`+"`workspace_concurrency`"+` in flight, so a tenant that registers many hanging endpoints cannot take every sender.

The message body is the row's payload (the event's JSON, sent as is); its metadata: `+"`outbox`"+` (webhook or
notification), `+"`outbox_id`"+`, `+"`workspace_id`"+`, `+"`attempt`"+`, `+"`event_type`"+`, and for webhooks
`+"`event_id`"+` and `+"`endpoint_id`"+`, for notifications `+"`channel`"+` and `+"`recipient`"+`. A batch that the
output fails to record (nack) is handed back at once (its lease cleared).

Every `+"`stats_interval`"+` it sets the gauges `+"`speculapro_worker_queue_depth{outbox}`"+` (pending rows; webhook
rows of enabled endpoints only), `+"`speculapro_worker_oldest_pending_seconds{outbox}`"+` (age of the oldest pending
row: the keep-up signal) and `+"`speculapro_worker_endpoints_suspended`"+`.`).
		Fields(pgsystem.URLFields()...).
		Fields(
			service.NewStringListField(ocFieldOutboxes).
				Description("Which outboxes to claim from: `webhook` (webhook_deliveries), `notification` (notifications).").
				Default([]string{outbox.Webhook, outbox.Notification}),
			service.NewIntField(ocFieldBatchSize).
				Description("Most rows claimed at once, sent as one batch.").
				Default(100),
			service.NewDurationField(ocFieldPollInterval).
				Description("Wait before looking again when nothing is due.").
				Default("500ms"),
			service.NewDurationField(ocFieldLease).
				Description("How long a claimed row is held: it must outlast a batch's sending (the output's `timeout`) and recording.").
				Default("2m"),
			service.NewIntField(ocFieldEndpointLimit).
				Description("Most deliveries of one webhook endpoint in flight at once, across all workers: what one slow or hanging endpoint can hold.").
				Default(4),
			service.NewIntField(ocFieldTenantLimit).
				Description("Most deliveries of one workspace's endpoints together in flight at once: what one tenant's slow or hanging endpoints can hold (two workers claiming at the same moment may each fill it).").
				Default(16),
			service.NewDurationField(ocFieldStatsInterval).
				Description("How often the queue gauges are measured.").
				Default("5s").
				Advanced(),
			pgsystem.StartupTimeoutField(),
		).
		Example("Both outboxes", "", `
input:
  outbox_claim:
    lease: 2m
`)
}

func init() {
	service.MustRegisterBatchInput("outbox_claim", outboxClaimSpec().Field(procmem.Field()),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchInput, error) {
			if err := procmem.FromParsed(conf); err != nil {
				return nil, err
			}
			return newOutboxClaim(conf, mgr)
		})
}

type outboxClaim struct {
	pool          *pgsystem.Pool
	outboxes      []string
	batchSize     int
	poll          time.Duration
	lease         time.Duration
	statsInterval time.Duration
	endpointLimit int
	tenantLimit   int
	log           *service.Logger

	next     int // the outbox to claim from first, in turn
	failures int // claims failed in a row

	depth     *service.MetricGauge
	oldest    *service.MetricGauge
	suspended *service.MetricGauge

	statsOnce sync.Once
	statsCtx  context.Context    // ended by Close: the gauges' queries stop with it
	stopStats context.CancelFunc // ends statsCtx
	stopped   chan struct{}      // closed when statsLoop has returned
}

func newOutboxClaim(conf *service.ParsedConfig, mgr *service.Resources) (*outboxClaim, error) {
	in := &outboxClaim{log: mgr.Logger(), stopped: make(chan struct{})}
	in.statsCtx, in.stopStats = context.WithCancel(context.Background())
	var err error
	if in.outboxes, err = conf.FieldStringList(ocFieldOutboxes); err != nil {
		return nil, err
	}
	if len(in.outboxes) == 0 {
		return nil, fmt.Errorf("outbox_claim: %s is empty", ocFieldOutboxes)
	}
	for _, o := range in.outboxes {
		if o != outbox.Webhook && o != outbox.Notification {
			return nil, fmt.Errorf("outbox_claim: %s: unknown outbox %q (want %s or %s)", ocFieldOutboxes, o, outbox.Webhook, outbox.Notification)
		}
	}
	if in.batchSize, err = conf.FieldInt(ocFieldBatchSize); err != nil {
		return nil, err
	}
	if in.batchSize < 1 || in.batchSize > 10000 {
		return nil, fmt.Errorf("outbox_claim: %s must be 1 to 10000, got %d", ocFieldBatchSize, in.batchSize)
	}
	if in.poll, err = conf.FieldDuration(ocFieldPollInterval); err != nil {
		return nil, err
	}
	if in.lease, err = conf.FieldDuration(ocFieldLease); err != nil {
		return nil, err
	}
	if in.lease < time.Second {
		return nil, fmt.Errorf("outbox_claim: %s must be at least 1s, got %s", ocFieldLease, in.lease)
	}
	if in.statsInterval, err = conf.FieldDuration(ocFieldStatsInterval); err != nil {
		return nil, err
	}
	if in.endpointLimit, err = conf.FieldInt(ocFieldEndpointLimit); err != nil {
		return nil, err
	}
	if in.endpointLimit < 1 || in.endpointLimit > 1000 {
		return nil, fmt.Errorf("outbox_claim: %s must be 1 to 1000, got %d", ocFieldEndpointLimit, in.endpointLimit)
	}
	if in.tenantLimit, err = conf.FieldInt(ocFieldTenantLimit); err != nil {
		return nil, err
	}
	if in.tenantLimit < in.endpointLimit || in.tenantLimit > 100000 {
		return nil, fmt.Errorf("outbox_claim: %s must be %s (%d) to 100000, got %d", ocFieldTenantLimit, ocFieldEndpointLimit, in.endpointLimit, in.tenantLimit)
	}
	m := mgr.Metrics()
	in.depth = m.NewGauge(outbox.MetricQueueDepth, "outbox")
	in.oldest = m.NewGauge(outbox.MetricOldestPending, "outbox")
	in.suspended = m.NewGauge(outbox.MetricSuspended)
	if in.pool, err = pgsystem.OpenFromParsed(conf, "outbox_claim", 3); err != nil {
		return nil, err
	}
	return in, nil
}

// Connect runs the start-up role check (a wrong role stops the process
// before anything is claimed), or after a lost connection a ping, and
// starts the queue gauges.
func (in *outboxClaim) Connect(ctx context.Context) error {
	if err := in.pool.Connect(ctx); err != nil {
		return err
	}
	in.statsOnce.Do(func() { go in.statsLoop() })
	return nil
}

// The claims. One statement each: the SELECT … FOR UPDATE SKIP LOCKED and
// the UPDATE that takes the lease commit together, so a row is locked only
// for the statement, and held afterwards by its lease alone.
const (
	// Webhooks, fairly. ready locks the endpoints being claimed for (SKIP
	// LOCKED: one claimer per endpoint at a time, so two workers cannot both
	// fill the same endpoint's free slots); free is the endpoint's limit less
	// its deliveries in flight (lease running, claimed_by set until the
	// outcome is recorded), tenant the same for its workspace; picked is each
	// endpoint's oldest due deliveries up to free, numbered per endpoint
	// (turn); due takes the batch one turn at a time, interleaving workspaces
	// first and then their endpoints, each workspace up to its tenant slots.
	claimWebhooks = `
WITH ready AS (
    SELECT e.id, e.workspace_id
      FROM speculapro.webhook_endpoints e
     WHERE e.enabled AND EXISTS (
           SELECT 1 FROM speculapro.webhook_deliveries d
            WHERE d.endpoint_id = e.id AND d.status = 'pending' AND d.next_attempt_at <= now())
       FOR NO KEY UPDATE OF e SKIP LOCKED
), tenant AS (
    SELECT w.workspace_id, $5::int - (
           SELECT count(*)::int FROM speculapro.webhook_deliveries f
            WHERE f.workspace_id = w.workspace_id AND f.status = 'pending' AND f.claimed_by IS NOT NULL
              AND f.next_attempt_at > now()) AS n
      FROM (SELECT DISTINCT workspace_id FROM ready) w
), picked AS (
    SELECT r.workspace_id, d.id, d.next_attempt_at,
           row_number() OVER (PARTITION BY r.id ORDER BY d.next_attempt_at, d.id) AS turn
      FROM ready r
     CROSS JOIN LATERAL (
           SELECT $4::int - count(*)::int AS n
             FROM speculapro.webhook_deliveries f
            WHERE f.workspace_id = r.workspace_id AND f.endpoint_id = r.id AND f.status = 'pending' AND f.claimed_by IS NOT NULL
              AND f.next_attempt_at > now()) free
     CROSS JOIN LATERAL (
           SELECT d.id, d.next_attempt_at
             FROM speculapro.webhook_deliveries d
            WHERE d.endpoint_id = r.id AND d.status = 'pending' AND d.next_attempt_at <= now()
            ORDER BY d.next_attempt_at
            LIMIT greatest(free.n, 0)
              FOR UPDATE OF d SKIP LOCKED) d
), due AS (
    SELECT p.id
      FROM (SELECT id, workspace_id, next_attempt_at,
                   row_number() OVER (PARTITION BY workspace_id ORDER BY turn, next_attempt_at, id) AS ws_turn
              FROM picked) p
      JOIN tenant t ON t.workspace_id = p.workspace_id
     WHERE p.ws_turn <= t.n
     ORDER BY p.ws_turn, p.next_attempt_at, p.id
     LIMIT $1
)
UPDATE speculapro.webhook_deliveries d
   SET next_attempt_at = now() + make_interval(secs => $2), attempts = d.attempts + 1, claimed_by = $3
  FROM due
 WHERE d.id = due.id
RETURNING d.id, d.workspace_id, d.attempts, d.event_type, d.event_id, d.endpoint_id, d.payload::text`

	claimNotifications = `
WITH due AS (
    SELECT n.id
      FROM speculapro.notifications n
     WHERE n.status = 'pending' AND n.next_attempt_at <= now()
     ORDER BY n.next_attempt_at
     LIMIT $1
       FOR UPDATE SKIP LOCKED
)
UPDATE speculapro.notifications n
   SET next_attempt_at = now() + make_interval(secs => $2), attempts = n.attempts + 1, claimed_by = $3
  FROM due
 WHERE n.id = due.id
RETURNING n.id, n.workspace_id, n.attempts, n.kind, n.channel, n.recipient, n.payload::text`
)

// ReadBatch claims the next due rows, from each outbox in turn, waiting
// poll_interval while none is due. A lost connection returns
// service.ErrNotConnected, so the engine connects again; while PostgreSQL
// fails otherwise it backs off (the retry policy, up to claimBackoffMax).
// It logs the first failure and then one line per claimLogEvery failures,
// not one per poll.
func (in *outboxClaim) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	for {
		wait := in.poll
		for range in.outboxes {
			queue := in.outboxes[in.next%len(in.outboxes)]
			in.next++
			batch, ids, err := in.claim(ctx, queue)
			if err != nil {
				if ctx.Err() != nil {
					return nil, nil, ctx.Err()
				}
				in.failures++
				if in.failures%claimLogEvery == 1 {
					in.log.With("failures_in_a_row", in.failures, "err", err.Error()).Error("worker: claiming due rows failed, retrying")
				}
				if pgclass.IsConnectionLost(err) {
					// The engine connects again (Connect pings) with its
					// own backoff, and reads once PostgreSQL answers.
					return nil, nil, service.ErrNotConnected
				}
				wait = claimBackoff.Delay(in.failures)
				break
			}
			if in.failures > 0 {
				in.log.With("failures_in_a_row", in.failures).Info("worker: claiming due rows works again")
				in.failures = 0
			}
			if len(batch) > 0 {
				return batch, in.ackFunc(queue, ids), nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(wait):
		case <-outbox.SlotsFreed:
		}
	}
}

// The claim's backoff while PostgreSQL fails, and how often it is logged.
const claimLogEvery = 20

var claimBackoff = retry.Policy{Initial: 200 * time.Millisecond, Max: 5 * time.Second, Jitter: outbox.BackoffJitter}

func (in *outboxClaim) claim(ctx context.Context, queue string) (service.MessageBatch, []event.UUID, error) {
	query := claimWebhooks
	if queue == outbox.Notification {
		query = claimNotifications
	}
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := []any{in.batchSize, in.lease.Seconds(), outbox.WorkerID()}
	if queue == outbox.Webhook {
		args = append(args, in.endpointLimit, in.tenantLimit)
	}
	rows, err := in.pool.Query(qctx, query, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("claiming %s rows: %w", queue, err)
	}
	var batch service.MessageBatch
	var ids []event.UUID
	for rows.Next() {
		var (
			id, ws        event.UUID
			attempt       int32
			kind, payload string
			a, b          string // webhook: event id, endpoint id; notification: channel, recipient
			ea, eb        event.UUID
		)
		if queue == outbox.Webhook {
			err = rows.Scan(&id, &ws, &attempt, &kind, &ea, &eb, &payload)
			a, b = ea.String(), eb.String()
		} else {
			err = rows.Scan(&id, &ws, &attempt, &kind, &a, &b, &payload)
		}
		if err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("reading claimed %s rows: %w", queue, err)
		}
		msg := service.NewMessage([]byte(payload))
		msg.MetaSetMut(outbox.MetaOutbox, queue)
		msg.MetaSetMut(outbox.MetaID, id.String())
		msg.MetaSetMut(outbox.MetaWorkspace, ws.String())
		msg.MetaSetMut(outbox.MetaAttempt, int64(attempt))
		msg.MetaSetMut(outbox.MetaEventType, kind)
		if queue == outbox.Webhook {
			msg.MetaSetMut(outbox.MetaEventID, a)
			msg.MetaSetMut(outbox.MetaEndpoint, b)
		} else {
			msg.MetaSetMut(outbox.MetaChannel, a)
			msg.MetaSetMut(outbox.MetaRecipient, b)
		}
		batch = append(batch, msg)
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("claiming %s rows: %w", queue, err)
	}
	return batch, ids, nil
}

// ackFunc hands a batch the output could not record back at once instead
// of waiting out its lease; a recorded batch needs nothing more. Only rows
// still claimed by this worker are touched.
func (in *outboxClaim) ackFunc(queue string, ids []event.UUID) service.AckFunc {
	return func(ctx context.Context, err error) error {
		if err == nil {
			return nil
		}
		table := "webhook_deliveries"
		if queue == outbox.Notification {
			table = "notifications"
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, rerr := in.pool.Exec(rctx, `UPDATE speculapro.`+table+` SET next_attempt_at = now(), claimed_by = NULL
 WHERE id = ANY($1) AND status = 'pending' AND claimed_by = $2`, ids, outbox.WorkerID())
		if rerr != nil {
			in.log.Warnf("worker: handing back %d unrecorded %s rows failed (they come due when their lease runs out): %v", len(ids), queue, rerr)
		}
		return nil
	}
}

const queueStats = `
SELECT 'webhook', count(*), coalesce(extract(epoch FROM now() - min(d.created_at)), 0)::bigint
  FROM speculapro.webhook_deliveries d
  JOIN speculapro.webhook_endpoints e ON e.id = d.endpoint_id AND e.enabled
 WHERE d.status = 'pending'
UNION ALL
SELECT 'notification', count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)::bigint
  FROM speculapro.notifications WHERE status = 'pending'
UNION ALL
SELECT 'suspended', count(*), 0
  FROM speculapro.webhook_endpoints WHERE NOT enabled AND disabled_reason LIKE 'suspended%'`

func (in *outboxClaim) statsLoop() {
	defer close(in.stopped)
	t := time.NewTicker(in.statsInterval)
	defer t.Stop()
	for {
		in.measure(in.statsCtx)
		select {
		case <-in.statsCtx.Done():
			return
		case <-t.C:
		}
	}
}

func (in *outboxClaim) measure(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, err := in.pool.Query(ctx, queueStats)
	if err != nil {
		in.log.Debugf("worker: measuring the outbox queue failed: %v", err)
		return
	}
	var (
		what         string
		count, older int64
	)
	_, err = pgx.ForEachRow(rows, []any{&what, &count, &older}, func() error {
		if what == "suspended" {
			in.suspended.Set(count)
			return nil
		}
		in.depth.Set(count, what)
		in.oldest.Set(older, what)
		return nil
	})
	if err != nil {
		in.log.Debugf("worker: measuring the outbox queue failed: %v", err)
	}
}

// Close stops the gauges (a measurement in progress is cancelled) and
// closes the pool.
func (in *outboxClaim) Close(ctx context.Context) error {
	in.stopStats()
	// A loop never started has nothing to wait for.
	in.statsOnce.Do(func() { close(in.stopped) })
	select {
	case <-in.stopped:
	case <-ctx.Done():
	}
	in.pool.Close()
	return nil
}
