package decisionapi

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redpanda-data/benthos/v4/public/service"
	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"

	"github.com/speculapro/speculapro/internal/apikey"
	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/applog"
	"github.com/speculapro/speculapro/internal/config"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/features"
	"github.com/speculapro/speculapro/internal/identity"
	"github.com/speculapro/speculapro/internal/pgsystem"
	"github.com/speculapro/speculapro/internal/procmem"
	"github.com/speculapro/speculapro/internal/redisconn"
	"github.com/speculapro/speculapro/plugins/redisspool"
)

const (
	daFieldAddress          = "address"
	daFieldDBURL            = "db_url"
	daFieldRulesURL         = "rules_url"
	daFieldRulesFallbackURL = "rules_fallback_url"
	daFieldRedisURL         = "redis_url"
	daFieldKeyPrefix        = "key_prefix"
	daFieldReplayTTL        = "replay_ttl"
	daFieldTimeout          = "timeout"
	daFieldFallback         = "fallback"
	daFieldRemember         = "remember"
	daFieldMaxBodyBytes     = "max_body_bytes"
	daFieldReload           = "reload_interval"
	daFieldActive           = "max_active_requests"
	daFieldWSShare          = "workspace_share"
	daFieldMaxClientConns   = "max_client_connections"
	daFieldSpoolPrefix      = "spool_prefix"

	// daMaxBodyDefault: one transaction is a few hundred bytes; its metadata
	// at most 16 KiB.
	daMaxBodyDefault = 64 << 10
	// daQueue is how many decided transactions may wait for the pipeline to
	// take them; redis_spool takes each at once, so this only absorbs bursts.
	daQueue = 10000
	// daRedisPause: after Redis failed, decisions leave it alone this long
	// (answered degraded at once instead of each waiting for the timeout).
	daRedisPause = time.Second
	// daRedisSilence: a decision's deadline running out counts as Redis'
	// failure only when Redis answered nothing for this long (at least
	// twice the timeout): decision_breaker.go.
	daRedisSilence = time.Second
)

// Metric names of the decision API (the spool's metrics, in docs/kafka.md,
// are redis_spool's).
const (
	metricDecisionLatency   = "speculapro_decision_latency_ns"      // timer, label outcome
	metricDecisionOutcomes  = "speculapro_decision_outcomes_total"  // labels workspace, outcome
	metricDecisionDegraded  = "speculapro_decision_degraded_total"  // labels workspace, reason
	metricDecisionRequests  = "speculapro_decision_requests_total"  // label code
	metricDecisionThrottled = "speculapro_decision_throttled_total" // label share
)

func decisionAPISpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Network").
		Summary("SpeculaPro's real-time decision API: one transaction in, approve, review or decline out within the timeout; the decided transaction goes on through the pipeline (to redis_spool and Kafka).").
		Description(`
Serves `+"`POST /v1/decisions`"+` (documented in `+"`/v1/decisions/openapi.json`"+`) on its own `+"`address`"+`, with
`+"`Authorization: Bearer <API key>`"+` naming the workspace as for the ingest API. The body is ONE transaction with the
ingest API's fields, validated the same way (field paths in a 400 answer).

The decision: the transaction is applied to the running totals at once (`+"`features.Store.Apply`"+`, idempotent by
its fixed ID, so the stream's later pass changes nothing) and the workspace's real-time rules (enabled transaction
rules whose action is `+"`review`"+` or `+"`decline`"+`) are evaluated with the account's, customer's and counterparty's
totals including it: `+"`decline`"+` if a decline rule fired, else `+"`review`"+` if a review rule fired, else `+"`approve`"+`;
the score is the sum of the fired rules' scores.

Answered within `+"`timeout`"+` of the request's arrival: when the rules or Redis cannot finish in time the answer is
`+"`fallback`"+` with `+"`\"degraded\": true`"+`, never a late answer or a 5xx (only an API key that cannot be checked,
PostgreSQL down, and a node with `+"`max_active_requests`"+` in flight are answered 503). The answer given is the
decision stored. A workspace with its `+"`workspace_share`"+` of the requests in flight is answered 429.

The same external_id again is answered with the first decision (`+"`\"repeated\": true`"+`), remembered in Redis for
`+"`remember`"+`; two concurrent first requests are decided once (SET NX decides which answer stands).

Each decided transaction leaves as a message (the envelope with its `+"`decision`"+`, metadata `+"`ingest_key`"+`
`+"`<workspace>:<account>`"+`) without waiting for the output: put `+"`redis_spool`"+` behind it.`).
		Fields(
			service.NewStringField(daFieldAddress).Description("Address the API listens on.").Default(config.DecisionAddr.Default),
			service.NewStringField(daFieldDBURL).Description("PostgreSQL URL of the speculapro_app role (API keys).").Secret().
				Default(config.DBURL.Default).Example("${SP_DB_URL:"+config.DBURL.Default+"}"),
			service.NewStringField(daFieldRulesURL).Description("PostgreSQL URL the rules are read from (speculapro_system); the pipeline sets it to `${SP_DB_SYSTEM_URL:}`. Empty means `rules_fallback_url`.").Secret().Default(""),
			service.NewStringField(daFieldRulesFallbackURL).Description("The rules URL used when `rules_url` is empty; the pipeline sets it to `SP_DB_URL`, since `SP_DB_SYSTEM_URL` defaults to it.").Secret().Default(""),
			service.NewStringField(daFieldRedisURL).Description("SP_REDIS_URL: the running totals and the remembered decisions.").Default(config.RedisURL.Default),
			service.NewStringField(daFieldKeyPrefix).Description("Prefix of the running totals' keys (SP_REDIS_KEY_PREFIX): the stream's, so its pass is a replay.").Default(features.DefaultKeyPrefix),
			service.NewStringField(daFieldSpoolPrefix).
				Description("SP_DECISION_SPOOL_PREFIX: the `key_prefix` of the `redis_spool` behind this input. At a stop, the decided transactions the engine did not deliver (it takes no batch once the stop has begun) are parked in that spool, on `redis_url`, for its next replay.").
				Default(""),
			service.NewDurationField(daFieldReplayTTL).Description("SP_STREAM_REPLAY_TTL, as the stream.").Default("30m"),
			service.NewDurationField(daFieldTimeout).Description("SP_DECISION_TIMEOUT: every answer within this of the request's arrival.").Default(config.DecisionTimeout.Default),
			service.NewStringEnumField(daFieldFallback, string(event.OutcomeApprove), string(event.OutcomeReview), string(event.OutcomeDecline)).
				Description("SP_DECISION_FALLBACK: the outcome answered (degraded) when the decision cannot finish in time.").Default(config.DecisionFallback.Default),
			service.NewDurationField(daFieldRemember).Description("SP_DECISION_REMEMBER: how long a decision is remembered for a repeat of its external_id.").Default(config.DecisionRemember.Default),
			service.NewIntField(daFieldMaxBodyBytes).Description("The largest request body, in bytes.").Default(daMaxBodyDefault).Advanced(),
			service.NewDurationField(daFieldReload).Description("How often the rules are probed for changes.").Default("5s").Advanced(),
			service.NewIntField(daFieldActive).
				Description("SP_DECISION_MAX_ACTIVE_REQUESTS: the most requests worked on at once by the process, from the body's first byte to the answer; one beyond it is answered 503 with Retry-After at once instead of making every decision late. The default is about ten times what one node's two cores keep in flight at the rate they can decide.").
				Default(config.DecisionMaxActive.DefaultInt()).
				Example("${SP_DECISION_MAX_ACTIVE_REQUESTS:"+config.DecisionMaxActive.Default+"}"),
			service.NewIntField(daFieldMaxClientConns).
				Description("SP_DECISION_MAX_CLIENT_CONNECTIONS: the most client connections the process holds open. Beyond it a new connection waits in the kernel's accept queue until one closes, so an overload holds the connections (each a goroutine, its buffers and its request) there rather than in the process's memory. Keep it above the connections your load balancers or clients keep idle.").
				Default(config.DecisionClientConns.DefaultInt()).
				Example("${SP_DECISION_MAX_CLIENT_CONNECTIONS:"+config.DecisionClientConns.Default+"}"),
			service.NewFloatField(daFieldWSShare).
				Description("SP_DECISION_WORKSPACE_SHARE: the share (0 to 1) of `max_active_requests` one workspace's requests may take (at least one). A request beyond it waits, in arrival order, up to half the `timeout` for one of its workspace's own to end, and is then answered 429 with Retry-After: a workspace flooding the API is slowed to what its share decides, waiting rather than spinning through refusals on the cores every workspace shares, and the others' decisions stay on time.").
				Default(0.125).
				Example("${SP_DECISION_WORKSPACE_SHARE:0.125}"),
			service.NewIntField(apirequest.FieldMinBodyRate).
				Description("The slowest a request body may arrive, in bytes a second: within every `min_body_rate_window` at least this many bytes a second must arrive (a body that is complete sooner is not held to it), or the request is answered 408. 0 leaves only the whole request's 30 s.").
				Default(16384).Advanced(),
			service.NewDurationField(apirequest.FieldMinBodyRateWindow).
				Description("The window `min_body_rate` is measured over: how long a body may stall or trickle before it is cut off.").
				Default("5s").Advanced(),
		).
		Fields(identity.KeyFields()...)
}

func init() {
	service.MustRegisterBatchInput("decision_api", decisionAPISpec().Field(procmem.Field()),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchInput, error) {
			if err := procmem.FromParsed(conf); err != nil {
				return nil, err
			}
			return newDecisionAPI(conf, mgr)
		})
}

// decisionCacheBytes bounds the entity values a decision node keeps between
// batches.
const decisionCacheBytes = 32 << 20

type decisionAPI struct {
	// Front: authentication, body limits, the server.
	apirequest.Front

	addr, dbURL, rulesURL, redisURL string
	spoolPrefix                     string
	timeout, remember, reload       time.Duration
	fallback                        event.Outcome
	fopts                           features.Options
	protector                       *identity.Protector

	latency  *service.MetricTimer
	outcomes *service.MetricCounter
	degraded *service.MetricCounter
	requests *service.MetricCounter

	rules   *realtimeRules
	out     chan *service.Message
	applyCh chan applyReq
	// rememberCh: decision_batch.go.
	rememberCh chan rememberReq

	breaker *redisBreaker

	mu      sync.Mutex // guards the server and the clients Connect opens
	rpool   *pgxpool.Pool
	redis   goredis.UniversalClient
	store   *features.Store
	stopBg  context.CancelFunc
	bg      sync.WaitGroup
	closing chan struct{}
	closed  sync.Once
	// handlers counts requests between arrival and their message queued,
	// so Close parks every answered decision the pipeline did not deliver.
	handlers sync.WaitGroup

	// pending holds the batches handed to the engine and not yet
	// acknowledged, by number: at Close, those are the ones it dropped.
	pendMu    sync.Mutex
	pending   map[uint64]service.MessageBatch
	nextBatch uint64
}

// newDecisionAPIMetered is a decision_api with its metrics and channels,
// its settings not yet read.
func newDecisionAPIMetered(mgr *service.Resources) *decisionAPI {
	a := &decisionAPI{
		Front: apirequest.Front{
			Component: "decision_api", Scope: apikey.ScopeDecide, Log: mgr.Logger(), Keys: apirequest.NewKeyCache(), ReadTimeout: 30 * time.Second,
			Throttled:   mgr.Metrics().NewCounter(metricDecisionThrottled, "share"),
			ThrottleLog: rate.Sometimes{Interval: apirequest.LogEvery},
		},
		latency:  mgr.Metrics().NewTimer(metricDecisionLatency, "outcome"),
		outcomes: mgr.Metrics().NewCounter(metricDecisionOutcomes, "workspace", "outcome"),
		degraded: mgr.Metrics().NewCounter(metricDecisionDegraded, "workspace", "reason"),
		requests: mgr.Metrics().NewCounter(metricDecisionRequests, "code"),
		out:      make(chan *service.Message, daQueue),
		applyCh:  make(chan applyReq, daQueue),
		closing:  make(chan struct{}),
		pending:  map[uint64]service.MessageBatch{},
	}
	a.Answered = func(_ string, code int, _ time.Time) { a.requests.Incr(1, strconv.Itoa(code)) }
	return a
}

func newDecisionAPI(conf *service.ParsedConfig, mgr *service.Resources) (*decisionAPI, error) {
	a := newDecisionAPIMetered(mgr)
	var err error
	str := func(f string, dst *string) {
		if err == nil {
			*dst, err = conf.FieldString(f)
		}
	}
	dur := func(f string, dst *time.Duration) {
		if err == nil {
			*dst, err = conf.FieldDuration(f)
		}
	}
	var fallback string
	str(daFieldAddress, &a.addr)
	str(daFieldDBURL, &a.dbURL)
	if err == nil {
		a.rulesURL, err = pgsystem.Pick(conf, daFieldRulesURL, daFieldRulesFallbackURL)
	}
	str(daFieldRedisURL, &a.redisURL)
	str(daFieldKeyPrefix, &a.fopts.KeyPrefix)
	str(daFieldSpoolPrefix, &a.spoolPrefix)
	str(daFieldFallback, &fallback)
	dur(daFieldReplayTTL, &a.fopts.ReplayTTL)
	dur(daFieldTimeout, &a.timeout)
	dur(daFieldRemember, &a.remember)
	dur(daFieldReload, &a.reload)
	if err != nil {
		return nil, err
	}
	maxBody, err := conf.FieldInt(daFieldMaxBodyBytes)
	if err != nil {
		return nil, err
	}
	a.MaxBody = int64(maxBody)
	a.fallback = event.Outcome(fallback)
	if err := a.budgetsFromParsed(conf); err != nil {
		return nil, err
	}
	if a.MinBodyRate, a.RateWindow, err = apirequest.MinBodyRateFromParsed(conf); err != nil {
		return nil, fmt.Errorf("decision_api: %w", err)
	}
	if a.timeout <= 0 || a.remember <= 0 || a.reload <= 0 || a.MaxBody < 1024 {
		return nil, fmt.Errorf("decision_api: %s, %s and %s must be positive, %s at least 1 KiB",
			daFieldTimeout, daFieldRemember, daFieldReload, daFieldMaxBodyBytes)
	}
	if a.fopts.KeyPrefix == "" {
		return nil, fmt.Errorf("decision_api: %s must not be empty", daFieldKeyPrefix)
	}
	// The running-totals cache stays well inside the role's 150 MiB soft
	// memory limit (pipelines/decision.yaml, process_memory): at the store's 128 MiB
	// default a long-running decision node's collector would run nearly
	// all the time once the cache filled.
	a.fopts.CacheBytes = decisionCacheBytes
	c, err := redisconn.Open(a.redisURL)
	if err != nil {
		return nil, fmt.Errorf("decision_api: %s: %w", daFieldRedisURL, err)
	}
	_ = c.Close()
	if a.protector, err = identity.ProtectorFromParsed(conf); err != nil {
		return nil, fmt.Errorf("decision_api: %w", err)
	}
	return a, nil
}

// budgetsFromParsed reads the node's budgets: requests worked on at once
// (by the node and by each workspace) and connections held open.
func (a *decisionAPI) budgetsFromParsed(conf *service.ParsedConfig) error {
	active, err := conf.FieldInt(daFieldActive)
	if err != nil {
		return err
	}
	wsShare, err := conf.FieldFloat(daFieldWSShare)
	if err != nil {
		return err
	}
	maxConns, err := conf.FieldInt(daFieldMaxClientConns)
	if err != nil {
		return err
	}
	if active < 1 || maxConns < 1 || !(wsShare > 0 && wsShare <= 1) {
		return fmt.Errorf("decision_api: %s and %s must be at least 1, %s more than 0 and at most 1", daFieldActive, daFieldMaxClientConns, daFieldWSShare)
	}
	a.MaxConns = maxConns
	a.Working = semaphore.NewWeighted(int64(active))
	a.WorkspaceWorking = apirequest.NewTenantShares(apirequest.ShareOf(int64(active), wsShare, 1))
	// Half the answer's time: a request that got its turn still has the
	// other half to be decided.
	a.ShareWait = a.timeout / 2
	return nil
}

// Connect opens the listener, the pools and the Redis client, and starts
// loading the rules. Neither PostgreSQL nor Redis must answer yet: until the
// rules are loaded (or while Redis is down) decisions are the fallback.
func (a *decisionAPI) Connect(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.Server != nil {
		return nil
	}
	pool, err := apirequest.OpenPool(a.dbURL, 8)
	if err != nil {
		return fmt.Errorf("decision_api: %s: %w", daFieldDBURL, err)
	}
	rpool, err := apirequest.OpenPool(a.rulesURL, 2)
	if err != nil {
		pool.Close()
		return fmt.Errorf("decision_api: %s: %w", daFieldRulesURL, err)
	}
	rc, err := redisconn.OpenNoBackoff(a.redisURL)
	if err != nil {
		pool.Close()
		rpool.Close()
		return fmt.Errorf("decision_api: %s: %w", daFieldRedisURL, err)
	}
	a.Pool, a.rpool, a.redis = pool, rpool, rc
	a.breaker = newRedisBreaker(daRedisPause, max(daRedisSilence, 2*a.timeout))
	a.rememberCh = make(chan rememberReq, daQueue)
	a.store = features.New(rc, a.fopts)
	a.rules = newRealtimeRules(rpool, a.reload, a.Log)
	bg, stop := context.WithCancel(context.Background())
	a.stopBg = stop
	a.bg.Add(1)
	go func() { defer a.bg.Done(); a.rules.run(bg) }()
	// One loop each (decision_batch.go): batches never race each other for
	// the same accounts' CAS (two apply loops measure worse on 2 cores:
	// p99 120 ms against 59 ms).
	a.bg.Add(2)
	go func() { defer a.bg.Done(); a.applyLoop(bg) }()
	go func() { defer a.bg.Done(); a.rememberLoop(bg) }()
	if err := a.Listen(a.addr, a.Handler(a.decisionRoutes())); err != nil {
		stop()
		a.bg.Wait()
		pool.Close()
		rpool.Close()
		_ = rc.Close()
		return err
	}
	return nil
}

// ReadBatch hands the pipeline the decided transactions queued so far (at
// least one). Their answers are given already. Each batch is held until the
// engine acknowledges it (redis_spool then owns its delivery); Close parks
// the ones never acknowledged.
func (a *decisionAPI) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	var batch service.MessageBatch
	select {
	case m := <-a.out:
		batch = append(batch, m)
		for len(batch) < 500 {
			select {
			case m := <-a.out:
				batch = append(batch, m)
				continue
			default:
			}
			break
		}
	case <-ctx.Done():
		// The stop has begun, and the engine drops any batch returned from
		// now on without acknowledging it, so what is left stays in a.out
		// for Close to park. The server stops here rather than in Close,
		// which comes only after the engine's batches in flight are
		// acknowledged: no request is taken during that wait.
		a.stopServing()
		return nil, nil, ctx.Err()
	}
	a.pendMu.Lock()
	id := a.nextBatch
	a.nextBatch++
	a.pending[id] = batch
	a.pendMu.Unlock()
	return batch, func(_ context.Context, err error) error {
		if err != nil {
			// Still held: Close parks it.
			a.Log.Errorf("decision_api: the output refused %d decided transactions: %v", len(batch), err)
			return nil
		}
		a.pendMu.Lock()
		delete(a.pending, id)
		a.pendMu.Unlock()
		return nil
	}, nil
}

// stopServing stops taking requests and waits for those in flight.
func (a *decisionAPI) stopServing() {
	a.closed.Do(func() {
		close(a.closing)
		a.mu.Lock()
		srv := a.Server
		a.mu.Unlock()
		if srv != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = a.ShutdownServer(sctx, srv)
			cancel()
		}
		a.handlers.Wait()
	})
}

// undelivered takes every decided transaction the engine was not seen to
// deliver: the batches it never acknowledged, oldest first, then what is
// left in a.out. Called once the handlers are done, so nothing follows.
func (a *decisionAPI) undelivered() service.MessageBatch {
	a.pendMu.Lock()
	ids := make([]uint64, 0, len(a.pending))
	for id := range a.pending {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var left service.MessageBatch
	for _, id := range ids {
		left = append(left, a.pending[id]...)
		delete(a.pending, id)
	}
	a.pendMu.Unlock()
	for {
		select {
		case m := <-a.out:
			left = append(left, m)
			continue
		default:
		}
		return left
	}
}

// parkUndelivered parks what the engine did not deliver in redis_spool's
// spool, where its next replay (this process's output, if it still runs, or
// the next decision process's) delivers it. The engine closes an input only
// after acknowledging every batch it took, so these are exactly the
// answered decisions it dropped at the stop. (When the engine's stop runs
// out of time it closes without those acknowledgements: a batch may then be
// parked both here and by the output, and is delivered twice, which storing,
// idempotent by the transaction's ID, absorbs.)
func (a *decisionAPI) parkUndelivered() {
	left := a.undelivered()
	if len(left) == 0 {
		return
	}
	if a.redis == nil {
		applog.With(a.Log, "events", len(left), "err", "not connected to Redis").Error(logStopLost)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := redisspool.Park(ctx, a.redis, a.spoolPrefix, left)
	if err != nil {
		applog.With(a.Log, "events", len(left), "err", err.Error()).Error(logStopLost)
		return
	}
	applog.With(a.Log, "events", len(left), "spool_events", n).Info(logStopParked)
}

// Log lines of a stop.
const (
	logStopParked = "decision: stopping, parked the answered decisions the pipeline had not delivered"
	logStopLost   = "decision: stopping, answered decisions LOST: Redis did not take them"
)

// Close stops taking requests, parks what the pipeline did not deliver, and
// closes the pools and Redis.
func (a *decisionAPI) Close(ctx context.Context) error {
	a.stopServing()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.parkUndelivered()
	if a.Server == nil {
		return nil
	}
	a.stopBg()
	a.bg.Wait()
	a.Pool.Close()
	a.rpool.Close()
	_ = a.redis.Close()
	a.Server = nil
	return nil
}
