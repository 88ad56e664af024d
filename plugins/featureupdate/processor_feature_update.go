package featureupdate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redpanda-data/benthos/v4/public/service"
	"golang.org/x/time/rate"

	"github.com/speculapro/speculapro/internal/applog"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/eventmsg"
	"github.com/speculapro/speculapro/internal/features"
	"github.com/speculapro/speculapro/internal/redisconn"
	"github.com/speculapro/speculapro/internal/retry"
)

const (
	fuFieldURL        = "url"
	fuFieldKeyPrefix  = "key_prefix"
	fuFieldReplayTTL  = "replay_ttl"
	fuFieldKinds      = "kinds"
	fuFieldBestEffort = "best_effort"
	fuFieldTimeout    = "timeout"
	fuFieldCacheBytes = "cache_bytes"
	fuFieldReplicas   = "replicas_to_wait"
	fuFieldWait       = "replica_wait_timeout"
)

// Metric names (the stream role's prefix; the ingest role records them too).
const (
	metricRoundtrip     = "speculapro_stream_redis_roundtrip_seconds"
	metricFeatureUpdate = "speculapro_stream_feature_update_seconds"
	// The entities a batch took from the process's cache (values, and
	// large entities' decoded states) and those it read from Redis: the
	// ratio says whether
	// cache_bytes holds the entities the stream keeps coming back to.
	metricCacheHits   = "speculapro_stream_feature_cache_hits_total"
	metricCacheMisses = "speculapro_stream_feature_cache_misses_total"
	// Entity writes lost to another writer (the compare-and-set failed)
	// and redone after reading the entity again.
	metricConflicts = "speculapro_stream_feature_conflicts_total"
)

// Log lines.
const (
	logRetry       = "feature_update: redis failed, retrying"
	logPassThrough = "feature_update: redis failed, batches pass through without features"
	logUnreadable  = "feature_update: unreadable running totals reset"
)

// Retry and best-effort timing.
const (
	retryInitial = 100 * time.Millisecond
	retryMax     = 10 * time.Second
	retryJitter  = 0.2
	// warnEvery bounds the best-effort WARN: at most one a minute.
	warnEvery = time.Minute
	// skipAfterFailure: after a failed best-effort batch, Redis is left
	// alone this long, so an unreachable Redis costs the ingest API no
	// timeout per request.
	skipAfterFailure = 5 * time.Second
)

func featureUpdateSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Utility").
		Summary("Applies each event to the running totals in Redis (counted once per event id) and puts the event's features on the message as metadata `features`, for `rule_eval`.").
		Description(`
Takes each message's event envelope (attached by `+"`event_decode`"+`, or decoded here), applies the batch to the
running totals with one Lua call per entity and event, all in one pipeline (one round trip per batch, one per
node on a Redis Cluster), and sets metadata `+"`features`"+` to the event's features right after it: for a
transaction `+"`{account, customer, counterparty}`"+`, for an account event `+"`{customer}`"+` (docs/running-totals.md),
as figures `+"`rule_eval`"+` reads feature by feature (building only those its rules name; with
`+"`keep_features: true`"+` it leaves the whole map there for what follows). An event id is remembered for `+"`"+fuFieldReplayTTL+"`"+`: a replay inside it changes no total.

Messages already flagged with an error, and messages that are not an envelope of one of `+"`"+fuFieldKinds+"`"+`,
pass through untouched.

On a Redis failure: with `+"`"+fuFieldBestEffort+": false`"+` (the stream) the batch is retried with backoff until it
succeeds or the pipeline stops, when the error is returned so that nothing is acknowledged; with
`+"`"+fuFieldBestEffort+": true`"+` (ingest) the batch passes through without features, a WARN is logged at most once
a minute, and Redis is left alone for 5 s (the stream applies those events later anyway).

Metrics: `+"`"+metricRoundtrip+"`"+` (per pipeline to a node), `+"`"+metricFeatureUpdate+"`"+` (per batch), `+"`"+metricCacheHits+"`"+` and `+"`"+metricCacheMisses+"`"+` (entities taken from the cache, read from Redis), `+"`"+metricConflicts+"`"+` (entity writes lost to another writer and redone).`).
		Fields(
			service.NewStringField(fuFieldURL).
				Description("SP_REDIS_URL: `redis://[user:pass@]host:port/db` for one Redis; several comma-separated URLs, or one with `?cluster=true`, for a Redis Cluster's seed nodes.").
				Default("redis://127.0.0.1:6379/0"),
			service.NewStringField(fuFieldKeyPrefix).
				Description("Prefix of every Redis key of the running totals (`<prefix>{a:<uuid>}` and its snapshot strings). Every role that reads or writes the same totals must use the same prefix: the pipelines set it from SP_REDIS_KEY_PREFIX.").
				Default(features.DefaultKeyPrefix).
				Advanced(),
			service.NewDurationField(fuFieldReplayTTL).
				Description("SP_STREAM_REPLAY_TTL: how long an event id is remembered as counted.").
				Default("30m"),
			service.NewStringListField(fuFieldKinds).
				Description("The kinds of event applied: `transaction`, `account_event`.").
				Default([]any{string(event.KindTransaction), string(event.KindAccountEvent)}),
			service.NewBoolField(fuFieldBestEffort).
				Description("Pass a batch through without features when Redis fails, instead of retrying it.").
				Default(false),
			service.NewDurationField(fuFieldTimeout).
				Description("Bound of one attempt at a batch.").
				Default("5s").
				Advanced(),
			service.NewIntField(fuFieldCacheBytes).
				Description("Memory (bytes, as estimated) for the running totals this process last wrote, kept between batches so they are not read from Redis again (the write's compare-and-set still checks them): each entity's value (after an appended write, its state encoded whole, so no delta records need applying), or for a large one (16 KiB or more) its decoded state, so it is not decoded again either; least recently used out first; 0 keeps none.").
				Default(features.DefaultCacheBytes).
				Advanced(),
			service.NewIntField(fuFieldReplicas).
				Description("SP_REDIS_REPLICAS_TO_WAIT: how many replicas of each written Redis node must hold a batch's writes (Redis `WAIT`, sent on the same connection right after them) before the batch goes on and its offsets can be committed. Redis replicates asynchronously: with 0 a write the master acknowledged but had not yet passed on vanishes when its replica is promoted, and the events it counted are never counted again. Set it to 1 on a Redis Cluster (or a Redis with a replica and failover); leave 0 on a Redis without replicas, where it costs nothing. A node with fewer connected replicas holds its batches (retried, logged) until it has them again: after a failover, until the failed node rejoins as a replica or another is added.").
				Default(0),
			service.NewDurationField(fuFieldWait).
				Description("SP_REDIS_REPLICA_WAIT_TIMEOUT: how long one attempt waits for `"+fuFieldReplicas+"` replicas; a shortfall fails the attempt, which is retried (the events already counted are replays then, counted once).").
				Default("2s").
				Advanced(),
		)
}

func init() {
	service.MustRegisterBatchProcessor("feature_update", featureUpdateSpec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchProcessor, error) {
			return newFeatureUpdate(conf, mgr)
		})
}

type timer interface {
	Timing(delta int64, labelValues ...string)
}

type counter interface {
	Incr(count int64, labelValues ...string)
}

// runningTotal counts into a metric a total the Store keeps itself: each
// follow adds what it grew by since the last.
type runningTotal struct {
	c    counter
	seen int64
}

func (t *runningTotal) follow(total int64) {
	if total > t.seen {
		t.c.Incr(total - t.seen)
		t.seen = total
	}
}

type featureUpdate struct {
	url        string
	opts       features.Options
	kinds      map[event.Kind]bool
	bestEffort bool
	timeout    time.Duration
	// replicas and replicaWait: the WAIT each pipeline of writes ends
	// with (replicas 0: none).
	replicas    int
	replicaWait time.Duration
	log         *service.Logger
	roundtrip   timer
	duration    timer
	// The Store's totals (CacheStats, Conflicts), under statsMu: batches
	// run on several threads.
	statsMu                           sync.Mutex
	cacheHits, cacheMisses, conflicts runningTotal

	mu        sync.Mutex
	client    goredis.UniversalClient
	store     *features.Store
	warns     rate.Sometimes // the best-effort WARN, at most every warnEvery
	skipUntil time.Time
	skipped   int // batches passed through since the last WARN
}

// countCache adds what the Store took from its cache, read from Redis and
// wrote again after a lost compare-and-set since the last call to the
// counters.
func (p *featureUpdate) countCache(store *features.Store) {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	hits, misses := store.CacheStats()
	p.cacheHits.follow(hits)
	p.cacheMisses.follow(misses)
	p.conflicts.follow(store.Conflicts())
}

func newFeatureUpdate(conf *service.ParsedConfig, mgr *service.Resources) (*featureUpdate, error) {
	p := &featureUpdate{log: mgr.Logger(), kinds: map[event.Kind]bool{}, warns: rate.Sometimes{Interval: warnEvery}}
	var err error
	if p.url, err = conf.FieldString(fuFieldURL); err != nil {
		return nil, err
	}
	if p.opts.KeyPrefix, err = conf.FieldString(fuFieldKeyPrefix); err != nil {
		return nil, err
	}
	if p.opts.KeyPrefix == "" {
		return nil, fmt.Errorf("feature_update: %s must not be empty", fuFieldKeyPrefix)
	}
	if p.opts.ReplayTTL, err = conf.FieldDuration(fuFieldReplayTTL); err != nil {
		return nil, err
	}
	if p.opts.ReplayTTL < time.Second {
		return nil, fmt.Errorf("feature_update: %s must be at least 1s, got %s", fuFieldReplayTTL, p.opts.ReplayTTL)
	}
	kinds, err := conf.FieldStringList(fuFieldKinds)
	if err != nil {
		return nil, err
	}
	for _, k := range kinds {
		if k := event.Kind(k); k != event.KindTransaction && k != event.KindAccountEvent {
			return nil, fmt.Errorf("feature_update: %s: %q is neither %s nor %s", fuFieldKinds, k, event.KindTransaction, event.KindAccountEvent)
		}
		p.kinds[event.Kind(k)] = true
	}
	if len(p.kinds) == 0 {
		return nil, fmt.Errorf("feature_update: %s must name at least one kind", fuFieldKinds)
	}
	if p.bestEffort, err = conf.FieldBool(fuFieldBestEffort); err != nil {
		return nil, err
	}
	if p.timeout, err = conf.FieldDuration(fuFieldTimeout); err != nil {
		return nil, err
	}
	if p.timeout <= 0 {
		return nil, fmt.Errorf("feature_update: %s must be positive", fuFieldTimeout)
	}
	cacheBytes, err := conf.FieldInt(fuFieldCacheBytes)
	if err != nil {
		return nil, err
	}
	if cacheBytes < 0 {
		return nil, fmt.Errorf("feature_update: %s must not be negative, got %d", fuFieldCacheBytes, cacheBytes)
	}
	if p.replicas, err = conf.FieldInt(fuFieldReplicas); err != nil {
		return nil, err
	}
	if p.replicas < 0 {
		return nil, fmt.Errorf("feature_update: %s must not be negative, got %d", fuFieldReplicas, p.replicas)
	}
	if p.replicaWait, err = conf.FieldDuration(fuFieldWait); err != nil {
		return nil, err
	}
	if p.replicas > 0 && p.replicaWait < time.Millisecond {
		return nil, fmt.Errorf("feature_update: %s must be at least 1ms, got %s", fuFieldWait, p.replicaWait)
	}
	p.opts.CacheBytes = int64(cacheBytes)
	if cacheBytes == 0 {
		p.opts.CacheBytes = -1
	}
	// The URL is checked now (no I/O), so a typo fails at start; the
	// client itself is opened on the first batch.
	c, err := redisconn.Open(p.url)
	if err != nil {
		return nil, fmt.Errorf("feature_update: %s: %w", fuFieldURL, err)
	}
	_ = c.Close()
	p.roundtrip = mgr.Metrics().NewTimer(metricRoundtrip)
	p.duration = mgr.Metrics().NewTimer(metricFeatureUpdate)
	p.cacheHits.c = mgr.Metrics().NewCounter(metricCacheHits)
	p.cacheMisses.c = mgr.Metrics().NewCounter(metricCacheMisses)
	p.conflicts.c = mgr.Metrics().NewCounter(metricConflicts)
	return p, nil
}

// connect opens the client on first use.
func (p *featureUpdate) connect() (*features.Store, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.store != nil {
		return p.store, nil
	}
	c, err := redisconn.Open(p.url)
	if err != nil {
		return nil, fmt.Errorf("feature_update: %s: %w", fuFieldURL, err)
	}
	hooks := []goredis.Hook{roundtripHook{p.roundtrip}}
	if p.replicas > 0 {
		hooks = append(hooks, replicaWaitHook{replicas: int64(p.replicas), timeout: p.replicaWait})
	}
	if cc, ok := c.(*goredis.ClusterClient); ok {
		// Cluster pipelines run per node: time each node's, and wait for
		// each node's replicas (WAIT counts only its own node's writes).
		cc.OnNewNode(func(n *goredis.Client) {
			for _, h := range hooks {
				n.AddHook(h)
			}
		})
	} else {
		for _, h := range hooks {
			c.AddHook(h)
		}
	}
	p.client, p.store = c, features.New(c, p.opts)
	return p.store, nil
}

// envelope returns msg's envelope when it is one of the kinds applied. A
// message without an attached envelope is decoded only when its kind
// (read from the structured form, which ingest already has) is wanted.
func (p *featureUpdate) envelope(msg *service.Message) *event.Envelope {
	env, ok := eventmsg.Attached(msg)
	if !ok {
		v, err := msg.AsStructured()
		if err != nil {
			return nil
		}
		obj, _ := v.(map[string]any)
		k, _ := obj["kind"].(string)
		if !p.kinds[event.Kind(k)] {
			return nil
		}
		if env, err = eventmsg.Decode(msg, event.Kind(k)); err != nil {
			return nil
		}
	}
	if !p.kinds[env.Kind] {
		return nil
	}
	return env
}

// metaFeaturesReplayed marks an event the running totals had counted
// already (a replay inside the replay window).
const metaFeaturesReplayed = "features_replayed"

// ProcessBatch applies the batch's events and attaches their features.
func (p *featureUpdate) ProcessBatch(ctx context.Context, batch service.MessageBatch) ([]service.MessageBatch, error) {
	start := time.Now()
	var envs []*event.Envelope
	var idx []int
	for i, msg := range batch {
		if msg.GetError() != nil {
			continue
		}
		if env := p.envelope(msg); env != nil {
			envs = append(envs, env)
			idx = append(idx, i)
		}
	}
	if len(envs) == 0 {
		return []service.MessageBatch{batch}, nil
	}
	if p.bestEffort && p.skipping(start) {
		return []service.MessageBatch{batch}, nil
	}
	store, err := p.connect()
	if err != nil {
		return nil, err
	}
	apply := func(ctx context.Context, _ int) error {
		actx, cancel := context.WithTimeout(ctx, p.timeout)
		defer cancel()
		feats, replayed, err := store.ApplyValues(actx, envs)
		var corrupt *features.CorruptError
		if errors.As(err, &corrupt) {
			// Those entities were counted from empty and overwritten; every
			// event has its features, so the batch goes on.
			applog.With(p.log, "err", err.Error()).Warn(logUnreadable)
			err = nil
		}
		p.countCache(store)
		if err != nil {
			return err
		}
		for j, i := range idx {
			batch[i].MetaSetMut("features", feats[j])
			if replayed[j] {
				// Counted before: rule_eval leaves alone what it has
				// fully evaluated already; what it has not gets the
				// features of the first application (features doc.go
				// "Replays"), so it decides the same hits.
				batch[i].MetaSetMut(metaFeaturesReplayed, true)
			}
		}
		return nil
	}
	if p.bestEffort {
		if err := apply(ctx, 1); err != nil {
			p.failed(start, len(envs), err)
			p.reloadSlots()
		}
		p.duration.Timing(time.Since(start).Nanoseconds())
		return []service.MessageBatch{batch}, nil
	}
	err = retry.Do(ctx, retry.Policy{
		Initial: retryInitial, Max: retryMax, Jitter: retryJitter,
		OnRetry: func(_ int, err error, backoff time.Duration) {
			applog.With(p.log, "events", len(envs), "err", err.Error(), "backoff", backoff.Round(time.Millisecond).String()).Error(logRetry)
			p.reloadSlots()
		},
	}, apply)
	if err != nil {
		return nil, fmt.Errorf("feature_update: %w", err)
	}
	p.duration.Timing(time.Since(start).Nanoseconds())
	return []service.MessageBatch{batch}, nil
}

// reloadSlots asks a Redis Cluster for its slots again after a failed
// attempt: go-redis otherwise keeps sending a failed master's slots to it
// until its next periodic reload (60 s), however soon a replica took over.
func (p *featureUpdate) reloadSlots() {
	p.mu.Lock()
	c := p.client
	p.mu.Unlock()
	if cc, ok := c.(*goredis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// skipping reports whether a recent best-effort failure leaves Redis alone.
func (p *featureUpdate) skipping(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.Before(p.skipUntil) {
		p.skipped++
		return true
	}
	return false
}

// failed records a best-effort failure: a WARN at most once a minute,
// naming how many batches went without features since the last one.
func (p *featureUpdate) failed(now time.Time, events int, err error) {
	p.mu.Lock()
	p.skipped++
	p.skipUntil = now.Add(skipAfterFailure)
	warn, skipped := false, p.skipped
	p.warns.Do(func() { warn, p.skipped = true, 0 })
	p.mu.Unlock()
	if warn {
		applog.With(p.log, "events", events, "batches", skipped, "err", err.Error()).Warn(logPassThrough)
	}
}

// Close closes the client.
func (p *featureUpdate) Close(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil {
		return nil
	}
	err := p.client.Close()
	p.client, p.store = nil, nil
	return err
}

// roundtripHook times every pipeline sent to a Redis node.
type roundtripHook struct{ t timer }

func (h roundtripHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h roundtripHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return next
}
func (h roundtripHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		h.t.Timing(time.Since(start).Nanoseconds())
		return err
	}
}

// ErrNotReplicated: a node acknowledged a pipeline's writes, but fewer of its
// replicas than replicas_to_wait confirmed them in time.
var ErrNotReplicated = errors.New("writes not confirmed by enough replicas")

// replicaWaitHook ends every pipeline that writes with WAIT, on the same
// connection (WAIT covers the writes of its own connection only), and fails
// the pipeline's commands when fewer replicas than asked confirm them: the
// batch is then retried rather than acknowledged, so no Kafka offset is
// committed for writes a failover could take back. A retry of writes that
// did reach the master changes nothing (the events are replays then).
type replicaWaitHook struct {
	replicas int64
	timeout  time.Duration
}

func (h replicaWaitHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h replicaWaitHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return next
}
func (h replicaWaitHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if !writes(cmds) {
			return next(ctx, cmds)
		}
		wait := goredis.NewIntCmd(ctx, "wait", h.replicas, h.timeout.Milliseconds())
		err := next(ctx, append(cmds[:len(cmds):len(cmds)], wait))
		if err != nil {
			return err
		}
		n, werr := wait.Result()
		switch {
		case werr != nil:
			err = fmt.Errorf("waiting for %d replicas: %w", h.replicas, werr)
		case n < h.replicas:
			err = fmt.Errorf("%w: %d of %d within %s", ErrNotReplicated, n, h.replicas, h.timeout)
		default:
			return nil
		}
		// On the commands too: a plain pipeline's Exec error alone would
		// leave every command looking successful.
		for _, c := range cmds {
			if c.Err() == nil {
				c.SetErr(err)
			}
		}
		return err
	}
}

// writes reports whether a pipeline holds a command other than the
// Store's reads.
func writes(cmds []goredis.Cmder) bool {
	for _, c := range cmds {
		switch c.Name() {
		case "get", "mget", "exists", "ttl", "pttl", "ping", "script":
		default:
			return true
		}
	}
	return false
}
