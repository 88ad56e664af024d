package outboxsend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
	"github.com/speculapro/speculapro/internal/outbox"
	"github.com/speculapro/speculapro/internal/pgsystem"
	"github.com/speculapro/speculapro/internal/retry"
	"github.com/speculapro/speculapro/internal/webhook"
)

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
	var err error
	if o.timeout, err = conf.FieldDuration(osFieldTimeout); err != nil {
		return nil, err
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("outbox_send: %s must be positive, got %s", osFieldTimeout, o.timeout)
	}
	if o.maxAttempts, err = conf.FieldInt(osFieldMaxAttempts); err != nil {
		return nil, err
	}
	if o.maxAttempts < 1 {
		return nil, fmt.Errorf("outbox_send: %s must be at least 1, got %d", osFieldMaxAttempts, o.maxAttempts)
	}
	initial, err := conf.FieldDuration(osFieldInitialBackoff)
	if err != nil {
		return nil, err
	}
	maxBackoff, err := conf.FieldDuration(osFieldMaxBackoff)
	if err != nil {
		return nil, err
	}
	if initial <= 0 || maxBackoff < initial {
		return nil, fmt.Errorf("outbox_send: %s (%s) must be positive and not longer than %s (%s)", osFieldInitialBackoff, initial, osFieldMaxBackoff, maxBackoff)
	}
	o.policy = retry.Policy{MaxAttempts: o.maxAttempts, Initial: initial, Max: maxBackoff, Jitter: outbox.BackoffJitter}
	if o.suspendAfter, err = conf.FieldInt(osFieldSuspendAfter); err != nil {
		return nil, err
	}
	if o.suspendTime, err = conf.FieldDuration(osFieldSuspendFailing); err != nil {
		return nil, err
	}
	if o.suspendTime < 0 {
		return nil, fmt.Errorf("outbox_send: %s must not be negative, got %s", osFieldSuspendFailing, o.suspendTime)
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

// Connect runs the start-up role check (a wrong role stops the process
// before anything is sent); the pool connects on demand.
func (o *outboxSend) Connect(ctx context.Context) error { return o.pool.CheckOnce(ctx) }

// job is one claimed row and, once sent, its outcome.
type job struct {
	outbox    string
	id, ws    event.UUID
	attempt   int32
	eventType string
	eventID   string
	endpoint  event.UUID
	channel   string
	recipient string
	body      []byte
	outcome   string
	status    int
	errText   string
	delay     time.Duration
	gone      bool
	recorded  bool
}

func jobOf(msg *service.Message) (*job, error) {
	j := &job{}
	get := func(k string) string { v, _ := msg.MetaGet(k); return v }
	j.outbox = get(outbox.MetaOutbox)
	if j.outbox != outbox.Webhook && j.outbox != outbox.Notification {
		return nil, fmt.Errorf("a message without outbox_claim's metadata (outbox %q): outbox_send sends what outbox_claim claimed", j.outbox)
	}
	var err error
	if j.id, err = event.ParseUUID(get(outbox.MetaID)); err != nil {
		return nil, fmt.Errorf("outbox_id: %w", err)
	}
	if j.ws, err = event.ParseUUID(get(outbox.MetaWorkspace)); err != nil {
		return nil, fmt.Errorf("workspace_id: %w", err)
	}
	n, err := strconv.ParseInt(get(outbox.MetaAttempt), 10, 32)
	if err != nil || n < 1 {
		return nil, fmt.Errorf("attempt %q is not a positive number", get(outbox.MetaAttempt))
	}
	j.attempt = int32(n)
	j.eventType = get(outbox.MetaEventType)
	if j.outbox == outbox.Webhook {
		j.eventID = get(outbox.MetaEventID)
		if j.endpoint, err = event.ParseUUID(get(outbox.MetaEndpoint)); err != nil {
			return nil, fmt.Errorf("endpoint_id: %w", err)
		}
	} else {
		j.channel, j.recipient = get(outbox.MetaChannel), get(outbox.MetaRecipient)
	}
	if j.body, err = msg.AsBytes(); err != nil {
		return nil, fmt.Errorf("reading the payload: %w", err)
	}
	return j, nil
}

// endpoint is what sending to a webhook endpoint needs.
type endpoint struct {
	url     string
	enabled bool
	secrets []string // the current one first
	err     error    // a secret that cannot be decrypted
}

const loadEndpoints = `
SELECT id, workspace_id, url, enabled, secret_encrypted,
       CASE WHEN previous_secret_expires_at > now() THEN previous_secret_encrypted END
  FROM speculapro.webhook_endpoints WHERE id = ANY($1)`

// endpoints reads, fresh for every batch (a rotation or a disable takes
// effect on the next batch), the endpoints the batch's webhooks go to.
func (o *outboxSend) endpoints(ctx context.Context, jobs []*job) (map[event.UUID]*endpoint, error) {
	var ids []event.UUID
	for _, j := range jobs {
		if j.outbox == outbox.Webhook && !slices.Contains(ids, j.endpoint) {
			ids = append(ids, j.endpoint)
		}
	}
	out := map[event.UUID]*endpoint{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := o.pool.Query(ctx, loadEndpoints, ids)
	if err != nil {
		return nil, fmt.Errorf("reading %d webhook endpoints: %w", len(ids), err)
	}
	var (
		id, ws    event.UUID
		u         string
		enabled   bool
		cur, prev []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &ws, &u, &enabled, &cur, &prev}, func() error {
		ep := &endpoint{url: u, enabled: enabled}
		for _, sealed := range [][]byte{cur, prev} {
			if sealed == nil {
				continue
			}
			s, err := webhook.OpenSecret(o.keys, ws, sealed)
			if err != nil {
				ep.err = err
				break
			}
			ep.secrets = append(ep.secrets, s)
		}
		out[id] = ep
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %d webhook endpoints: %w", len(ids), err)
	}
	return out, nil
}

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

// send makes one attempt at j and settles its outcome.
func (o *outboxSend) send(ctx context.Context, j *job, eps map[event.UUID]*endpoint) {
	start := time.Now()
	defer func() { o.duration.Timing(time.Since(start).Nanoseconds(), j.outbox) }()
	actx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if j.outbox == outbox.Webhook {
		ep := eps[j.endpoint]
		if ep == nil || !ep.enabled {
			j.outcome = outbox.OutcomeReleased
			return
		}
		if ep.err != nil {
			o.settle(j, 0, ep.err)
			return
		}
		if err := o.addressPolicy.CheckURL(ep.url); err != nil {
			o.settle(j, 0, err)
			return
		}
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		h.Set("User-Agent", "SpeculaPro-Webhook/1")
		h.Set(webhook.HeaderEvent, j.eventType)
		h.Set(webhook.HeaderDelivery, j.id.String())
		if err := webhook.SetHeaders(h, j.eventID, time.Now(), j.body, ep.secrets, o.legacyHeaders); err != nil {
			o.settle(j, 0, err)
			return
		}
		res, err := webhook.Post(actx, o.client, ep.url, h, j.body)
		o.settleHTTP(j, res, err)
		return
	}
	switch j.channel {
	case "webhook":
		if err := o.addressPolicy.CheckURL(j.recipient); err != nil {
			o.settle(j, 0, err)
			return
		}
		body, err := chatBody(j)
		if err != nil {
			o.settle(j, 0, err)
			return
		}
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		h.Set("User-Agent", "SpeculaPro-Webhook/1")
		h.Set(webhook.HeaderEvent, j.eventType)
		h.Set(webhook.HeaderIdempotency, j.id.String())
		res, err := webhook.Post(actx, o.client, j.recipient, h, body)
		o.settleHTTP(j, res, err)
	case "email":
		if o.smtp == nil {
			o.settle(j, 0, errors.New("email notifications need a mail server: set SP_SMTP_URL"))
			return
		}
		o.settle(j, 0, o.smtp.send(actx, j))
	default:
		o.settle(j, 0, fmt.Errorf("channel %q: %w (want email or webhook)", j.channel, errPermanent))
	}
}

func (o *outboxSend) settleHTTP(j *job, res webhook.Result, err error) {
	if err != nil && res.Snippet != "" {
		err = fmt.Errorf("%w: %s", err, res.Snippet)
	}
	o.settle(j, res.Status, err)
}

// settle decides a sent row's outcome from the attempt's status and error.
func (o *outboxSend) settle(j *job, status int, err error) {
	j.status = status
	if err == nil {
		j.outcome = outbox.OutcomeDelivered
		return
	}
	j.errText = err.Error()
	if len(j.errText) > maxErrorText {
		j.errText = strings.ToValidUTF8(j.errText[:maxErrorText], "")
	}
	switch {
	case status == http.StatusGone:
		j.outcome, j.gone = outbox.OutcomeFailed, true
	case errors.Is(err, webhook.ErrRedirect), errors.Is(err, webhook.ErrBlockedAddress),
		errors.Is(err, webhook.ErrNotAURL), errors.Is(err, webhook.ErrInsecureURL), errors.Is(err, errPermanent):
		j.outcome = outbox.OutcomeFailed
	case int(j.attempt) >= o.maxAttempts:
		j.outcome = outbox.OutcomeFailed
	default:
		j.outcome, j.delay = outbox.OutcomeRetry, o.policy.Delay(int(j.attempt))
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

// endpointHealth counts the failures in a row of the recorded outcomes'
// endpoints and disables those that answered 410 or reached suspend_after
// or suspend_after_failing. It returns the endpoints this recording
// disabled.
func (o *outboxSend) endpointHealth(ctx context.Context, tx pgx.Tx, jobs []*job) (suspended []suspension, gone []event.UUID, err error) {
	type tally struct{ delivered, failed, attemptsFailed int32 }
	per := map[event.UUID]*tally{}
	goneSet := map[event.UUID]bool{}
	for _, j := range jobs {
		if j.outbox != outbox.Webhook || !j.recorded {
			continue
		}
		t := per[j.endpoint]
		if t == nil {
			t = &tally{}
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
