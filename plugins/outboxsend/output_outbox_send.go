package outboxsend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/identity"
	"github.com/speculapro/speculapro/internal/outbox"
	"github.com/speculapro/speculapro/internal/pgclass"
	"github.com/speculapro/speculapro/internal/pgsystem"
	"github.com/speculapro/speculapro/internal/retry"
	"github.com/speculapro/speculapro/internal/webhook"
)

// The output's files: this one is the component (spec, construction,
// Connect, WriteBatch, Close); output_outbox_send_deliver.go sends each
// claimed row to its endpoint or mailbox and settles its outcome;
// output_outbox_send_record.go records the outcomes and suspends the
// endpoints that keep failing.

const (
	osFieldTimeout        = "timeout"
	osFieldMaxAttempts    = "max_attempts"
	osFieldInitialBackoff = "initial_backoff"
	osFieldMaxBackoff     = "max_backoff"
	osFieldSuspendAfter   = "suspend_after"
	osFieldSuspendFailing = "suspend_after_failing"
	osFieldAllowInsecure  = "allow_insecure"
	osFieldAllowPrivate   = "allow_private_networks"
	osFieldLegacyHeaders  = "legacy_headers"
	osFieldSMTPURL        = "smtp_url"
	osFieldParallel       = "parallel"
	osFieldEncryptionKey  = identity.FieldEncryptionKey
)

// maxErrorText bounds last_error.
const maxErrorText = 1000

var (
	// errPermanent marks a failure no retry can fix (a malformed recipient,
	// an unknown channel): the row is failed at once.
	errPermanent = errors.New("cannot be sent")
	// errOutputClosing refuses a batch that arrives while the output
	// closes: the input hands its rows back.
	errOutputClosing = errors.New("outbox_send is closing")
)

// long: the component's config spec, one field after another as its documentation page lists them
func outboxSendSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("Sends the outbox rows `outbox_claim` claimed (signed webhooks, webhook and email notifications) and records each outcome in PostgreSQL.").
		Description(`
Every row is sent on its own (at most `+"`parallel`"+` × `+"`max_in_flight`"+` at once per worker), each attempt bounded by
`+"`timeout`"+`, and its outcome is recorded as soon as it ends: a batch is not held back by its slowest row. Outcomes
that end together are recorded together, in one database transaction, and only for rows this worker still holds
(same `+"`claimed_by`"+` and attempt number: a row whose lease ran out and was taken over is left to its new holder).
How many deliveries of one endpoint are in flight at once is bounded by `+"`outbox_claim`"+`'s `+"`endpoint_concurrency`"+`.

### Webhooks

A POST of the event's JSON (the row's payload, byte for byte the signed body), signed as the Standard Webhooks
specification describes: `+"`webhook-id`"+` (the event's ID, the same on every attempt and for every endpoint),
`+"`webhook-timestamp`"+` (the attempt's Unix seconds) and `+"`webhook-signature`"+`, one `+"`v1,<base64>`"+` per secret valid
now, space-separated (the endpoint's current one and, during the grace period after a rotation, its previous one),
each HMAC-SHA256 over `+"`<id>.<timestamp>.<body>`"+` keyed with the base64-decoded part of the secret after `+"`whsec_`"+`.
Beside them `+"`Content-Type: application/json`"+`, `+"`X-SpeculaPro-Event`"+` (e.g. alert.created) and
`+"`X-SpeculaPro-Delivery`"+` (the delivery's ID), and with `+"`legacy_headers`"+` the previous scheme's `+"`Idempotency-Key`"+`
(the event's ID) and `+"`X-SpeculaPro-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>]`"+` (HMAC-SHA256 over
`+"`<t>.<body>`"+` keyed with the whole secret).
Redirects are not followed and fail the delivery; at most 512 bytes of an answer are kept (in `+"`last_error`"+`) and
64 KiB read. Only https:// URLs are sent to, and every connection's resolved address must be public: global unicast,
outside every IANA special-purpose block (an IPv6 address carrying an IPv4 one is judged by that one too).
`+"`allow_insecure`"+` adds http:// and loopback; `+"`allow_private_networks`"+` adds the ranges it lists.

### Notifications

Channel `+"`webhook`"+`: a plain POST of `+"`{\"text\": …}`"+` (what a chat incoming webhook expects) plus the kind, the
notification's ID and, for an alert, its ID and severity, to the recipient URL, under the same URL rules. Channel
`+"`email`"+`: a plain-text mail over SMTP (`+"`smtp_url`"+`) after STARTTLS (a server that does not offer it is refused),
saying what happened (severity, title, alert ID, time) and no customer or account identifier.

### Outcomes

A 2xx (an accepted mail) is delivered (`+"`sent`"+` for notifications). Any other answer or failure is tried again after
`+"`initial_backoff`"+` doubling per attempt up to `+"`max_backoff`"+`, 20 % jitter (internal/retry's policy), until
`+"`max_attempts`"+` attempts, then `+"`failed`"+` with the last error and status. A redirect, a refused address, a
malformed recipient fail at once. A 410 Gone fails the delivery and disables the endpoint; an endpoint with
`+"`suspend_after`"+` deliveries failed in a row, or whose every attempt has failed for `+"`suspend_after_failing`"+`, is
suspended (disabled, `+"`disabled_reason`"+` says why), logged as
`+"`level=WARN msg=\"worker: endpoint suspended\"`"+` and counted in `+"`speculapro_worker_endpoint_suspensions_total`"+`;
its pending deliveries wait until `+"`speculapro webhook enable`"+`.

### Metrics

`+"`speculapro_worker_deliveries_total{outbox,event_type,outcome}`"+` (delivered, retry, failed, released),
`+"`speculapro_worker_attempt_duration_ns{outbox}`"+`, `+"`speculapro_worker_endpoint_suspensions_total`"+`,
`+"`speculapro_worker_record_retries_total`"+`.`).
		Fields(pgsystem.URLFields()...).
		Fields(
			service.NewDurationField(osFieldTimeout).
				Description("Longest one attempt may take, connecting and the answer's head included.").
				Default("10s"),
			service.NewIntField(osFieldMaxAttempts).
				Description("Attempts per row before it is failed.").
				Default(12),
			service.NewDurationField(osFieldInitialBackoff).
				Description("Wait before a row's second attempt; it doubles per attempt.").
				Default("5m"),
			service.NewDurationField(osFieldMaxBackoff).
				Description("Longest wait between two attempts at a row.").
				Default("24h"),
			service.NewIntField(osFieldSuspendAfter).
				Description("Deliveries failed in a row (every attempt used) after which an endpoint is suspended; 0 never suspends on a count.").
				Default(20),
			service.NewDurationField(osFieldSuspendFailing).
				Description("How long an endpoint may fail every attempt (no 2xx since its first failure) before it is suspended; 0s never suspends on time.").
				Default("120h"),
			service.NewBoolField(osFieldAllowInsecure).
				Description("Allow http:// and loopback addresses: local stacks and tests only. Private, link-local and other special-purpose ranges stay refused (see `allow_private_networks`).").
				Default(false),
			service.NewStringField(osFieldAllowPrivate).
				Description("Comma-separated CIDR ranges of your own network that webhooks and notification webhooks may reach although they are not public (private-use, CGNAT, unique local and the like), e.g. `10.20.0.0/16,fd00:20::/48`. Only the ranges listed; never loopback (that is `allow_insecure`'s), unspecified, multicast or broadcast space.").
				Example("10.20.0.0/16").
				Default(""),
			service.NewBoolField(osFieldLegacyHeaders).
				Description("Also send the previous signing scheme's `Idempotency-Key` and `X-SpeculaPro-Signature`, for receivers not yet verifying `webhook-signature`. That signature does not cover the key such a receiver deduplicates on, so turn this off once every receiver verifies `webhook-signature`.").
				Default(true),
			service.NewStringField(osFieldSMTPURL).
				Description("Mail server for email notifications: `smtp://[user:pass@]host[:587]?from=alerts@example.com[&ca_file=/ca.pem]`. Empty: email notifications fail (and are retried) with that reason.").
				Secret().
				Default(""),
			service.NewStringField(osFieldEncryptionKey).
				Description("Key ring that decrypts the endpoints' signing secrets (`SP_ENCRYPTION_KEY`'s format; the key `speculapro webhook` encrypted them with).").
				Secret().
				Example("${SP_ENCRYPTION_KEY}"),
			service.NewIntField(osFieldParallel).
				Description("Rows sent at once per batch slot: one worker sends at most `parallel` × `max_in_flight` rows at once.").
				Default(100).
				Advanced(),
			service.NewOutputMaxInFlightField().
				Description("Batch slots: batches handed to the output at once (their rows are sent and recorded each on its own).").
				Default(4),
			pgsystem.StartupTimeoutField(),
		).
		Example("Defaults from the environment", "", `
output:
  outbox_send:
    timeout: ${SP_WEBHOOK_TIMEOUT:10s}
    max_attempts: ${SP_WEBHOOK_MAX_ATTEMPTS:12}
    suspend_after_failing: ${SP_WEBHOOK_SUSPEND_AFTER_FAILING:120h}
    encryption_key: ${SP_ENCRYPTION_KEY}
`)
}

func init() {
	service.MustRegisterBatchOutput("outbox_send", outboxSendSpec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
			maxInFlight, err := conf.FieldMaxInFlight()
			if err != nil {
				return nil, service.BatchPolicy{}, 0, err
			}
			out, err := newOutboxSend(conf, mgr, maxInFlight)
			if err != nil {
				return nil, service.BatchPolicy{}, 0, err
			}
			return out, service.BatchPolicy{}, maxInFlight, nil
		})
}

type outboxSend struct {
	pool          *pgsystem.Pool
	client        *http.Client
	timeout       time.Duration
	maxAttempts   int
	policy        retry.Policy
	suspendAfter  int
	suspendTime   time.Duration
	addressPolicy webhook.Policy
	legacyHeaders bool
	smtp          *smtpConfig // nil: not configured
	keys          *identity.Keyring
	parallel      int
	log           *service.Logger

	deliveries  *service.MetricCounter
	duration    *service.MetricTimer
	suspensions *service.MetricCounter
	recRetries  *service.MetricCounter

	// The rows being sent, each by its own goroutine holding one of slots
	// until its outcome is queued on outcomes; recordLoop, the only
	// reader of outcomes, records what has ended and exits when Close
	// closes outcomes after every send has returned.
	slots     chan struct{}
	outcomes  chan *job
	sends     sync.WaitGroup
	sendCtx   context.Context // cancelled when Close gives up waiting for the sends
	stopSends context.CancelFunc
	recCtx    context.Context // cancelled when Close gives up waiting for the recording
	stopRec   context.CancelFunc
	recorded  chan struct{} // closed when recordLoop has exited
	closeOnce sync.Once
	// closing is set by Close; WriteBatch holds mu (read) while it adds to
	// sends, so no send starts after Close has begun waiting for them.
	mu      sync.RWMutex
	closing bool
}

// recordGroupMax bounds the outcomes one recording transaction holds.
const recordGroupMax = 500

func newOutboxSend(conf *service.ParsedConfig, mgr *service.Resources, maxInFlight int) (*outboxSend, error) {
	o := &outboxSend{log: mgr.Logger()}
	if err := o.parseRetries(conf); err != nil {
		return nil, err
	}
	allowInsecure, err := conf.FieldBool(osFieldAllowInsecure)
	if err != nil {
		return nil, err
	}
	privateNets, err := conf.FieldString(osFieldAllowPrivate)
	if err != nil {
		return nil, err
	}
	if o.addressPolicy, err = webhook.NewPolicy(allowInsecure, privateNets); err != nil {
		return nil, fmt.Errorf("outbox_send: %s: %w", osFieldAllowPrivate, err)
	}
	if o.legacyHeaders, err = conf.FieldBool(osFieldLegacyHeaders); err != nil {
		return nil, err
	}
	rawSMTP, err := conf.FieldString(osFieldSMTPURL)
	if err != nil {
		return nil, err
	}
	if rawSMTP != "" {
		if o.smtp, err = parseSMTPURL(rawSMTP); err != nil {
			return nil, fmt.Errorf("outbox_send: %s: %w", osFieldSMTPURL, err)
		}
	}
	rawKeys, err := conf.FieldString(osFieldEncryptionKey)
	if err != nil {
		return nil, err
	}
	if o.keys, err = identity.ParseKeyring(rawKeys); err != nil {
		return nil, fmt.Errorf("outbox_send: the webhook secrets' key ring: %w", err)
	}
	if o.parallel, err = conf.FieldInt(osFieldParallel); err != nil {
		return nil, err
	}
	o.parallel = max(o.parallel, 1)
	o.client = webhook.NewClient(o.timeout, o.addressPolicy)
	m := mgr.Metrics()
	o.deliveries = m.NewCounter(outbox.MetricDeliveries, "outbox", "event_type", "outcome")
	o.duration = m.NewTimer(outbox.MetricAttemptDuration, "outbox")
	o.suspensions = m.NewCounter(outbox.MetricSuspensions)
	o.recRetries = m.NewCounter(outbox.MetricRecordRetries)
	if o.pool, err = pgsystem.OpenFromParsed(conf, "outbox_send", maxInFlight+1); err != nil {
		return nil, err
	}
	capacity := o.parallel * max(maxInFlight, 1)
	o.slots = make(chan struct{}, capacity)
	o.outcomes = make(chan *job, capacity)
	o.recorded = make(chan struct{})
	o.sendCtx, o.stopSends = context.WithCancel(context.Background())
	o.recCtx, o.stopRec = context.WithCancel(context.Background())
	go o.recordLoop()
	return o, nil
}

// parseRetries reads the send timeout, the retry policy and the endpoint
// suspension thresholds.
func (o *outboxSend) parseRetries(conf *service.ParsedConfig) error {
	var err error
	if o.timeout, err = conf.FieldDuration(osFieldTimeout); err != nil {
		return err
	}
	if o.timeout <= 0 {
		return fmt.Errorf("outbox_send: %s must be positive, got %s", osFieldTimeout, o.timeout)
	}
	if o.maxAttempts, err = conf.FieldInt(osFieldMaxAttempts); err != nil {
		return err
	}
	if o.maxAttempts < 1 {
		return fmt.Errorf("outbox_send: %s must be at least 1, got %d", osFieldMaxAttempts, o.maxAttempts)
	}
	initial, err := conf.FieldDuration(osFieldInitialBackoff)
	if err != nil {
		return err
	}
	maxBackoff, err := conf.FieldDuration(osFieldMaxBackoff)
	if err != nil {
		return err
	}
	if initial <= 0 || maxBackoff < initial {
		return fmt.Errorf("outbox_send: %s (%s) must be positive and not longer than %s (%s)", osFieldInitialBackoff, initial, osFieldMaxBackoff, maxBackoff)
	}
	o.policy = retry.Policy{MaxAttempts: o.maxAttempts, Initial: initial, Max: maxBackoff, Jitter: outbox.BackoffJitter}
	if o.suspendAfter, err = conf.FieldInt(osFieldSuspendAfter); err != nil {
		return err
	}
	if o.suspendTime, err = conf.FieldDuration(osFieldSuspendFailing); err != nil {
		return err
	}
	if o.suspendTime < 0 {
		return fmt.Errorf("outbox_send: %s must not be negative, got %s", osFieldSuspendFailing, o.suspendTime)
	}
	return nil
}

// Connect runs the start-up role check (a wrong role stops the process
// before anything is sent), or after a lost connection a ping.
func (o *outboxSend) Connect(ctx context.Context) error { return o.pool.Connect(ctx) }

// WriteBatch starts sending the batch's rows, each on its own, and returns
// once every row has a slot: the rows' outcomes are recorded as each ends
// (recordLoop), so a hanging endpoint holds only its own rows' slots, not
// the batch. An error (the endpoints could not be read) makes the input hand
// the rows back; rows still waiting for a slot at shutdown are handed back
// here.
func (o *outboxSend) WriteBatch(ctx context.Context, batch service.MessageBatch) error {
	jobs := make([]*job, 0, len(batch))
	for _, msg := range batch {
		j, err := jobOf(msg)
		if err != nil {
			o.log.Errorf("worker: skipped a message: %v", err)
			continue
		}
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return nil
	}
	eps, err := o.endpoints(ctx, jobs)
	if pgclass.IsConnectionLost(err) {
		// The engine connects again (Connect pings) and writes the batch
		// again once PostgreSQL answers.
		return fmt.Errorf("%w: %w", service.ErrNotConnected, err)
	}
	if err != nil {
		return err
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	if o.closing {
		return errOutputClosing
	}
	for i, j := range jobs {
		select {
		case o.slots <- struct{}{}:
		case <-ctx.Done():
			o.handBack(jobs[i:])
			return nil
		case <-o.sendCtx.Done():
			o.handBack(jobs[i:])
			return nil
		}
		o.sends.Add(1)
		// Owned by the sends group: it ends when the attempt does (bounded
		// by timeout) and its outcome is queued; Close waits for it.
		go func() {
			defer o.sends.Done()
			defer func() { <-o.slots }()
			o.send(o.sendCtx, j, eps)
			if o.sendCtx.Err() != nil {
				// Shutdown mid-send: what was sent may not be recorded; the
				// row comes back when its lease runs out (at least once).
				return
			}
			o.outcomes <- j
		}()
	}
	return nil
}

// handBack queues rows that were claimed but never sent as released, so
// they come due again at once instead of when their lease runs out.
func (o *outboxSend) handBack(jobs []*job) {
	for _, j := range jobs {
		j.outcome = outbox.OutcomeReleased
		o.sends.Add(1)
		go func() { defer o.sends.Done(); o.outcomes <- j }()
	}
}

// Close waits for the rows being sent (each bounded by timeout) and for
// their outcomes to be recorded, as long as ctx allows; what it cannot wait
// for comes back when its lease runs out. Then it closes the pool and the
// client's idle connections.
func (o *outboxSend) Close(ctx context.Context) error {
	o.closeOnce.Do(func() {
		// Taken once WriteBatch calls in progress have handed out their
		// rows (their slots free as sends end, each bounded by timeout).
		o.mu.Lock()
		o.closing = true
		o.mu.Unlock()
		sent := make(chan struct{})
		// Ends when the last send does: sends are bounded by timeout, and
		// stopSends makes them return at once.
		go func() { o.sends.Wait(); close(sent) }()
		select {
		case <-sent:
		case <-ctx.Done():
			o.stopSends()
			<-sent
		}
		close(o.outcomes)
		select {
		case <-o.recorded:
		case <-ctx.Done():
			o.stopRec()
			<-o.recorded
		}
		o.stopSends()
		o.stopRec()
		o.client.CloseIdleConnections()
		o.pool.Close()
	})
	return nil
}
