package outboxsend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/outbox"
	"github.com/speculapro/speculapro/internal/webhook"
)

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
