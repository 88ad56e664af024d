package ingestapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"

	"github.com/speculapro/speculapro/internal/apikey"
	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/config"
	"github.com/speculapro/speculapro/internal/identity"
	"github.com/speculapro/speculapro/internal/kafkaconf"
	"github.com/speculapro/speculapro/internal/procmem"
	"github.com/speculapro/speculapro/internal/redisconn"
)

const (
	iaFieldAddress      = "address"
	iaFieldDBURL        = "db_url"
	iaFieldMaxItems     = "max_items"
	iaFieldMaxBodyBytes = "max_body_bytes"
	iaFieldAckTimeout   = "ack_timeout"
	iaFieldInFlight     = "max_in_flight_bytes"
	iaFieldActive       = "max_active_requests"
	iaFieldRedisURL     = "redis_url"
	iaFieldRedisPrefix  = "redis_key_prefix"
	iaFieldIdemTTL      = "idempotency_ttl"
	iaFieldAccountProcs = "account_event_processors"
	iaFieldWSShare      = "workspace_share"
	iaFieldKeyShare     = "api_key_share"

	// iaRejectPrefix and iaRejectErroredPrefix start the error of an item
	// the pipeline refused for its content: a reject output's message
	// starting "rejected: ", or what reject_errored (pipelines/ingest.yaml)
	// nacks a message a processor failed with. Such an item is answered
	// rejected with the rest of the message, every other failure retry.
	iaRejectPrefix        = "rejected: "
	iaRejectErroredPrefix = "rejecting due to failed processing: "
	// iaActiveDefault is max_active_requests' default. At 16 clients ×
	// 500-item requests on 2 cores, in runs alternated with all 16 at once:
	// p99 1.5 × p50 against 1.7-2.3 ×, peak RSS 100-136 MB against 165-178
	// MB, items/s within the runs' noise; 4 gives fewer items/s, 8 no
	// better than 6.
	iaActiveDefault = 6
)

// bodyReadTimeout bounds the reading of a request, body included (a
// variable so a test can shorten it).
var bodyReadTimeout = 60 * time.Second

// long: the component's config spec, one field after another as its documentation page lists them
func ingestAPISpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Network").
		Summary("SpeculaPro's HTTP ingest API: batches of transactions and account events in, each item answered only once it is safely in Kafka.").
		Description(`
Serves the API documented in `+"`/v1/openapi.json`"+` on its own `+"`address`"+` (not the engine's HTTP
server, so the pipeline also runs under `+"`speculapro streams`"+`):

- `+"`POST /v1/transactions`"+`, `+"`POST /v1/account-events`"+`: a batch of up to `+"`max_items`"+` items
  (and `+"`max_body_bytes`"+`). Each item is answered `+"`accepted`"+` with its fixed ID, `+"`duplicate`"+`
  (already accepted or already stored, with the ID), `+"`rejected`"+` with every validation error and its
  field path, or `+"`retry`"+` when Kafka did not take it in time. A request's new items go to the pipeline
  as ONE batch and the answer waits for that batch's acknowledgement, so nothing is accepted that the
  output did not deliver; configure the output with acks from all in-sync replicas and a 10 s timeout
  (`+"`kafka_franz`"+` does both) so that the answer is on time.
- `+"`PUT /v1/customers/{external_id}`"+`, `+"`PUT /v1/accounts/{external_id}`"+`: written straight to
  PostgreSQL as `+"`db_url`"+` (the app role, bound to the caller's workspace by row-level security),
  replacing a placeholder the persister created.
- `+"`GET /healthz`"+` (the process is up) and `+"`GET /readyz`"+` (Kafka, PostgreSQL and Redis answer).

Every request but the health checks and the OpenAPI document needs `+"`Authorization: Bearer <API key>`"+`;
the key names the workspace, and nothing in a body can name another.

Each item's ID is assigned once, when its `+"`external_id`"+` is first accepted (the event package's
TransactionID / AccountEventID of workspace, external_id and occurred_at, to the microsecond). A resend
is answered with that first ID, whatever its occurred_at, by every process and after restarts: the first
ID is kept in Redis (`+"`redis_url`"+`, keys `+"`<redis_key_prefix>idem:{…}`"+`) for `+"`idempotency_ttl`"+`,
and found in the database's (workspace_id, external_id) index after that. A resend with the same content
(every field but occurred_at) is `+"`duplicate`"+`, one with other content `+"`conflict`"+` (the first is
kept). With Redis unreachable, items are answered `+"`retry`"+`: accepting them unchecked could store a
resend twice.

Messages carry metadata `+"`ingest_topic`"+` (`+"`txn.ingested`"+` or `+"`account.events`"+`) and
`+"`ingest_key`"+` (`+"`<workspace>:<account>`"+` or `+"`<workspace>:<customer>`"+`) for the output.`).
		Fields(kafkaconf.Fields()...).
		Fields(
			service.NewStringField(iaFieldAddress).
				Description("Address the API listens on.").
				Default(config.IngestAddr.Default).
				Example("${SP_INGEST_ADDR:127.0.0.1:8080}"),
			service.NewStringField(iaFieldDBURL).
				Description("PostgreSQL URL of the speculapro_app role (API keys, customers, accounts, stored-duplicate lookups).").
				Secret().
				Default(config.DBURL.Default).
				Example("${SP_DB_URL:"+config.DBURL.Default+"}"),
			service.NewIntField(iaFieldMaxItems).
				Description("The most items one request may carry.").
				Default(apirequest.MaxItemsDefault),
			service.NewIntField(iaFieldMaxBodyBytes).
				Description("The largest request body, in bytes.").
				Default(apirequest.MaxBodyBytesDefault),
			service.NewIntField(iaFieldInFlight).
				Description("The most request-body bytes in flight at once, until each request is answered (waiting for Kafka included). A body holds what has arrived of it (its buffer grows in steps of at least 64 KiB, each taken from this budget first), not what its Content-Length announces, so bodies that announce much and send little hold almost nothing; a request whose next step does not fit is answered 503 with Retry-After. It bounds the memory requests hold: a request takes about 10 bytes of memory per body byte while it is decoded and waits (copies of the items, their envelopes, the messages, and the garbage collector's headroom), so the default 32 MiB (six 5 MiB requests) keeps the process under 500 MB; at 64 MiB it reached about 700 MB).").
				Default(32<<20).
				Advanced(),
			service.NewFloatField(iaFieldWSShare).
				Description("The share (0 to 1) of `max_in_flight_bytes` one workspace's requests may announce (Content-Length, or `max_body_bytes` when a request gives none) until they are answered; never less than `max_body_bytes`. A request beyond it is answered 429 with Retry-After, so one workspace's slow or numerous requests are refused to it alone while the others keep the rest of the budget.").
				Default(0.5).
				Example("${SP_INGEST_WORKSPACE_SHARE:0.5}"),
			service.NewFloatField(iaFieldKeyShare).
				Description("The share (0 to 1) of `max_in_flight_bytes` the requests of one API key may announce, as `workspace_share` does for a workspace: one client system of a workspace cannot take the workspace's whole share.").
				Default(0.25).
				Example("${SP_INGEST_API_KEY_SHARE:0.25}"),
			service.NewIntField(apirequest.FieldMinBodyRate).
				Description("The slowest a request body may arrive, in bytes a second: within every `min_body_rate_window` at least this many bytes a second must arrive (a body that is complete sooner is not held to it), or the request is answered 408 and its connection closed. 0 leaves only the whole request's 60 s.").
				Default(16384).
				Example("${SP_INGEST_MIN_BODY_RATE:16384}"),
			service.NewDurationField(apirequest.FieldMinBodyRateWindow).
				Description("The window `min_body_rate` is measured over: how long a body may stall or trickle before it is cut off.").
				Default("5s").
				Example("${SP_INGEST_MIN_BODY_RATE_WINDOW:5s}"),
			service.NewIntField(iaFieldActive).
				Description("The most batch requests worked on at once; the others wait for one of them to be answered (at most the ack timeout, then 503 with Retry-After), the waiting workspaces taking turns and each workspace's requests in the order they arrived, so one workspace's many requests delay another's by one turn, not by all of them. On a busy machine requests then finish one after another instead of all sharing the cores, the resend check and Kafka at once (which would make every request as slow as the slowest), and only these requests' items are held decoded.").
				Default(iaActiveDefault).
				Advanced(),
			service.NewDurationField(iaFieldAckTimeout).
				Description("How long a request waits for the pipeline to take and acknowledge its items before they are answered `retry`. Keep it above the output's own timeout (10 s), which normally answers first.").
				Default("15s"),
			service.NewStringField(iaFieldRedisURL).
				Description("Redis (or a Redis Cluster's seed nodes) keeping the first ID of every accepted external_id.").
				Secret().
				Default(config.RedisURL.Default).
				Example("${SP_REDIS_URL:"+config.RedisURL.Default+"}"),
			service.NewStringField(iaFieldRedisPrefix).
				Description("Prefix of the Redis keys; give each environment sharing one Redis its own.").
				Default(config.RedisKeyPrefix.Default).
				Example("${SP_REDIS_KEY_PREFIX:"+config.RedisKeyPrefix.Default+"}"),
			service.NewProcessorListField(iaFieldAccountProcs).
				Description("Processors run on each account-events request's new items before they go to the pipeline (pipelines/ingest.yaml: feature_update, so a sim_swap counts in the running totals at once). Transactions skip them: in the pipeline's processors every transaction would pay the engine's processor step (a tracing span, a context and a sort-group tag a message, about 4 % of the CPU and 6 % of the bytes at the benchmark's load) for a step that leaves it untouched. A message a processor fails is answered rejected, as reject_errored refuses it.").
				Default([]any{}).
				Advanced(),
			service.NewDurationField(iaFieldIdemTTL).
				Description("How long Redis keeps an accepted external_id's first ID. At least the retention of the ingest topics: an item the persister has not stored by then is gone from Kafka anyway, and a stored one is found in the database.").
				Default(config.IngestIdempotencyTTL.Default).
				Example("${SP_INGEST_IDEMPOTENCY_TTL:"+config.IngestIdempotencyTTL.Default+"}"),
		).
		Fields(identity.KeyFields()...)
}

func init() {
	service.MustRegisterBatchInput("ingest_api", ingestAPISpec().Field(procmem.Field()),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchInput, error) {
			if err := procmem.FromParsed(conf); err != nil {
				return nil, err
			}
			return newIngestAPIFromParsed(conf, mgr)
		})
}

// job is one request's new items on their way through the pipeline; the
// ack function sends the outcome on done, which has room for it so the
// engine never blocks on a handler that gave up waiting.
type job struct {
	batch service.MessageBatch
	done  chan error
}

type ingestAPI struct {
	// Front: authentication, body limits and the in-flight budget,
	// the server; its pool is also where entities and stored IDs go.
	apirequest.Front

	addr       string
	dbURL      string
	maxItems   int
	ackTimeout time.Duration
	kafka      kafkaconf.Config
	protector  *identity.Protector
	// accountProcs run on account events only (account_event_processors).
	accountProcs []*service.OwnedProcessor

	items    *service.MetricCounter // by endpoint and outcome
	requests *service.MetricCounter // by endpoint and status code
	latency  *service.MetricTimer   // by endpoint

	idem        *idemStore
	redisURL    string
	redisLogged rate.Sometimes // the Redis WARN, at most every apirequest.LogEvery
	dbLogged    rate.Sometimes // the stored-ID lookup WARN, at most every apirequest.LogEvery

	// turns are the batch requests worked on at once
	// (max_active_requests); the others wait in line, workspaces taking
	// turns.
	turns *apirequest.TurnTaker

	// jobs hands batches from handlers to ReadBatch; unbuffered so a batch
	// is only ever in the pipeline's hands or its handler's, never parked.
	jobs      chan *job
	closing   chan struct{}
	closeOnce sync.Once

	mu    sync.Mutex // guards the server and the clients Connect opens
	probe *kgo.Client
}

// newIngestAPIMetered is an ingest_api with its metrics and channels, its
// settings not yet read.
func newIngestAPIMetered(mgr *service.Resources) *ingestAPI {
	a := &ingestAPI{
		Front: apirequest.Front{
			Component:   "ingest_api",
			Scope:       apikey.ScopeIngest,
			Log:         mgr.Logger(),
			Keys:        apirequest.NewKeyCache(),
			ReadTimeout: bodyReadTimeout,
			Overloaded:  mgr.Metrics().NewCounter("speculapro_ingest_overloaded_total"),
			Throttled:   mgr.Metrics().NewCounter("speculapro_ingest_throttled_total", "share"),
			ThrottleLog: rate.Sometimes{Interval: apirequest.LogEvery},
		},
		redisLogged: rate.Sometimes{Interval: apirequest.LogEvery},
		dbLogged:    rate.Sometimes{Interval: apirequest.LogEvery},
		items:       mgr.Metrics().NewCounter("speculapro_ingest_items_total", "endpoint", "outcome"),
		requests:    mgr.Metrics().NewCounter("speculapro_ingest_requests_total", "endpoint", "code"),
		latency:     mgr.Metrics().NewTimer("speculapro_ingest_request_duration", "endpoint"),
		jobs:        make(chan *job),
		closing:     make(chan struct{}),
	}
	a.Answered = func(endpoint string, code int, arrived time.Time) {
		a.requests.Incr(1, endpoint, strconv.Itoa(code))
		a.latency.Timing(time.Since(arrived).Nanoseconds(), endpoint)
	}
	return a
}

func newIngestAPIFromParsed(conf *service.ParsedConfig, mgr *service.Resources) (*ingestAPI, error) {
	a := newIngestAPIMetered(mgr)
	var err error
	if a.kafka, err = kafkaconf.FromParsed(conf); err != nil {
		return nil, err
	}
	if a.addr, err = conf.FieldString(iaFieldAddress); err != nil {
		return nil, err
	}
	if a.dbURL, err = conf.FieldString(iaFieldDBURL); err != nil {
		return nil, err
	}
	if a.maxItems, err = conf.FieldInt(iaFieldMaxItems); err != nil {
		return nil, err
	}
	maxBody, err := conf.FieldInt(iaFieldMaxBodyBytes)
	if err != nil {
		return nil, err
	}
	a.MaxBody = int64(maxBody)
	if a.ackTimeout, err = conf.FieldDuration(iaFieldAckTimeout); err != nil {
		return nil, err
	}
	inFlight, err := conf.FieldInt(iaFieldInFlight)
	if err != nil {
		return nil, err
	}
	if int64(inFlight) < a.MaxBody {
		return nil, fmt.Errorf("ingest_api: %s must be at least %s", iaFieldInFlight, iaFieldMaxBodyBytes)
	}
	a.InFlight = semaphore.NewWeighted(int64(inFlight))
	wsShare, err := conf.FieldFloat(iaFieldWSShare)
	if err != nil {
		return nil, err
	}
	keyShare, err := conf.FieldFloat(iaFieldKeyShare)
	if err != nil {
		return nil, err
	}
	if !(wsShare > 0 && wsShare <= 1 && keyShare > 0 && keyShare <= 1) {
		return nil, fmt.Errorf("ingest_api: %s and %s must be more than 0 and at most 1", iaFieldWSShare, iaFieldKeyShare)
	}
	a.WorkspaceBytes = apirequest.NewTenantShares(apirequest.ShareOf(int64(inFlight), wsShare, a.MaxBody))
	a.KeyBytes = apirequest.NewTenantShares(apirequest.ShareOf(int64(inFlight), keyShare, a.MaxBody))
	if a.MinBodyRate, a.RateWindow, err = apirequest.MinBodyRateFromParsed(conf); err != nil {
		return nil, fmt.Errorf("ingest_api: %w", err)
	}
	active, err := conf.FieldInt(iaFieldActive)
	if err != nil {
		return nil, err
	}
	if active < 1 {
		return nil, fmt.Errorf("ingest_api: %s must be at least 1", iaFieldActive)
	}
	a.turns = apirequest.NewTurnTaker(active)
	a.idem = &idemStore{}
	if a.redisURL, err = conf.FieldString(iaFieldRedisURL); err != nil {
		return nil, err
	}
	if a.idem.prefix, err = conf.FieldString(iaFieldRedisPrefix); err != nil {
		return nil, err
	}
	if a.idem.ttl, err = conf.FieldDuration(iaFieldIdemTTL); err != nil {
		return nil, err
	}
	if a.maxItems < 1 || a.MaxBody < 1024 || a.ackTimeout <= 0 || a.idem.ttl < time.Minute {
		return nil, fmt.Errorf("ingest_api: %s, %s and %s must be positive (body at least 1 KiB), %s at least 1m",
			iaFieldMaxItems, iaFieldMaxBodyBytes, iaFieldAckTimeout, iaFieldIdemTTL)
	}
	if a.protector, err = identity.ProtectorFromParsed(conf); err != nil {
		return nil, fmt.Errorf("ingest_api: %w", err)
	}
	if conf.Contains(iaFieldAccountProcs) {
		if a.accountProcs, err = conf.FieldProcessorList(iaFieldAccountProcs); err != nil {
			return nil, fmt.Errorf("ingest_api: %s: %w", iaFieldAccountProcs, err)
		}
	}
	return a, nil
}

// Connect opens the listener (so a taken address stops the pipeline at
// start), the database pool and the client the readiness probe pings.
// Neither PostgreSQL nor Kafka must answer yet: /readyz says when they do.
func (a *ingestAPI) Connect(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.Server != nil {
		return nil
	}
	pcfg, err := pgxpool.ParseConfig(a.dbURL)
	if err != nil {
		return fmt.Errorf("ingest_api: parsing %s: %w", iaFieldDBURL, errors.New("invalid PostgreSQL URL"))
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		return fmt.Errorf("ingest_api: creating the PostgreSQL pool: %w", err)
	}
	opts, err := a.kafka.ClientOpts()
	if err != nil {
		pool.Close()
		return fmt.Errorf("ingest_api: %w", err)
	}
	probe, err := kgo.NewClient(append(opts, kgo.ClientID("speculapro-ingest-probe"))...)
	if err != nil {
		pool.Close()
		return fmt.Errorf("ingest_api: creating the Kafka probe client: %w", err)
	}
	rdb, err := redisconn.Open(a.redisURL)
	if err != nil {
		pool.Close()
		probe.Close()
		return fmt.Errorf("ingest_api: %s: %w", iaFieldRedisURL, err)
	}
	a.Pool, a.probe, a.idem.client = pool, probe, rdb
	if err := a.Listen(a.addr, a.Handler(a.routeList())); err != nil {
		pool.Close()
		probe.Close()
		_ = rdb.Close()
		return err
	}
	return nil
}

// ReadBatch hands the pipeline the next request's items. The ack reports
// the output's outcome, per message when it is a *service.BatchError, to
// the waiting handler.
func (a *ingestAPI) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	select {
	case j := <-a.jobs:
		return j.batch, func(_ context.Context, err error) error {
			j.done <- err
			return nil
		}, nil
	case <-a.closing:
		return nil, nil, service.ErrEndOfInput
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// Close stops taking requests and waits (bounded by ctx) for those in
// flight: their batches are already in the pipeline, which the engine
// drains before closing the output, so they still get their answers.
func (a *ingestAPI) Close(ctx context.Context) error {
	a.closeOnce.Do(func() { close(a.closing) })
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.Server == nil {
		return nil
	}
	err := a.ShutdownServer(ctx, a.Server)
	for _, p := range a.accountProcs {
		if cerr := p.Close(ctx); cerr != nil && err == nil {
			err = fmt.Errorf("ingest_api: closing an account-event processor: %w", cerr)
		}
	}
	a.Pool.Close()
	a.probe.Close()
	_ = a.idem.client.Close()
	a.Server = nil
	return err
}
