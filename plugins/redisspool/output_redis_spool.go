package redisspool

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redpanda-data/benthos/v4/public/service"
	"golang.org/x/time/rate"

	"github.com/speculapro/speculapro/internal/applog"
	"github.com/speculapro/speculapro/internal/redisconn"
)

const (
	rsFieldURL         = "url"
	rsFieldKeyPrefix   = "key_prefix"
	rsFieldBufferCount = "buffer_count"
	rsFieldBufferBytes = "buffer_bytes"
	rsFieldWait        = "max_wait"
	rsFieldStopWait    = "stop_wait"
	rsFieldReplay      = "replay_interval"
	rsFieldReplayRate  = "replay_rate"
	rsFieldOutput      = "output"

	// SpoolKey is the spool list (docs/kafka.md): the braces are a Redis Cluster
	// hash tag, so the list and its replay lock share one slot.
	SpoolKey = "spool:{decisions}"
	// spoolLockSuffix names the replay lock: one replayer per spool at a
	// time, so two processes never deliver the same entry at once.
	spoolLockSuffix = ":replayer"
	// spoolLockTTL bounds a replayer that died holding the lock; it is
	// refreshed before every chunk, which takes at most the Kafka write
	// timeout (10 s).
	spoolLockTTL = 30 * time.Second
	// replayChunk is the most entries one Kafka write replays; at
	// replay_rate a chunk is a tenth of a second's worth.
	replayChunk = 500
	// sendChunk is the most buffered entries one Kafka write takes.
	sendChunk = 2000
	// senders is how many Kafka writes of buffered entries run at once:
	// with Kafka down each waits out its timeout, and the others keep
	// taking the newer entries.
	senders = 4
	// redisOpTimeout bounds one spool write, read or trim.
	redisOpTimeout = 5 * time.Second
	// sendRetryPause: after a failed write, a sender waits this long.
	sendRetryPause = 200 * time.Millisecond
)

// Metric names (docs/kafka.md, "When Kafka is down").
const (
	metricSpooled    = "speculapro_decision_events_spooled_total"
	metricUnspooled  = "speculapro_decision_events_unspooled_total"
	metricSpoolGauge = "speculapro_decision_spool_events"
	metricLost       = "speculapro_decision_events_lost_total"
	metricBuffered   = "speculapro_decision_buffer_events"
)

// Log lines.
const (
	logLost         = "decision: event LOST"
	logSpoolFailed  = "decision: spool unreachable"
	logReplayFailed = "decision: replaying the spool failed, retrying"
	logParked       = "decision: parked in the spool"
	logStopParked   = "decision: stopping, parked what Kafka did not take"
)

func redisSpoolSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("Wraps an output (the Kafka write) with a large in-memory buffer and a Redis spool, so that a decided transaction is lost only when Kafka and Redis both fail.").
		Description(`
The decision role's output, which keeps decided transactions while Kafka is down (docs/kafka.md). Every message is taken at once into an in-memory
buffer bounded by `+"`buffer_count`"+` and `+"`buffer_bytes`"+` and written to the wrapped `+"`output`"+` from there.
A message the output has not taken within `+"`max_wait`"+` (30 s) is parked in the Redis list `+"`spool:{decisions}`"+`
(prefixed by `+"`key_prefix`"+`; the braces are a Redis Cluster hash tag), as is every message that arrives while the
buffer is full. Every `+"`replay_interval`"+` (1 s) the spool is replayed into the output, oldest first, at most
`+"`replay_rate`"+` entries a second in chunks of a tenth of that; an entry is removed only after the output acknowledged
it. The pace keeps the replay from taking the CPU the decisions need when the broker comes back (and from
handing the persister the whole spool at once). Several processes may share one spool: a lock
(`+"`spool:{decisions}:replayer`"+`) lets one replay at a time, so no entry is delivered twice at once (a process
killed between the acknowledgement and the removal replays its last chunk again; storing is idempotent).

On a clean stop the buffer is given `+"`stop_wait`"+` (10 s) to reach Kafka, then whatever is left is parked, and
only then is Redis closed.

A message Redis refuses too stays in memory and is tried on both again, until one takes it. It is lost only
when the process stops with Kafka and Redis both still refusing it, when it arrives with the buffer full and
Redis refuses it, or when a spool entry is unreadable: then
`+"`level=ERROR msg=\"decision: event LOST\" workspace=… external_id=…`"+` is logged (the message's `+"`workspace_id`"+`
and `+"`external_id`"+`, nothing else) and `+"`speculapro_decision_events_lost_total`"+` counts it.

Metrics: `+"`speculapro_decision_events_spooled_total`"+` (parked), `+"`speculapro_decision_events_unspooled_total`"+`
(parked and delivered later), `+"`speculapro_decision_spool_events`"+` (a gauge of the spool's length, set at start
and every second), `+"`speculapro_decision_events_lost_total`"+`, and `+"`speculapro_decision_buffer_events`"+`
(a gauge of the in-memory buffer).

A write never fails: the output owns every message it was given.`).
		Fields(
			service.NewStringField(rsFieldURL).Description("SP_REDIS_URL: one Redis, or a Redis Cluster's seed nodes.").Default("redis://127.0.0.1:6379/0"),
			service.NewStringField(rsFieldKeyPrefix).Description("Prefix of the spool's key (SP_DECISION_SPOOL_PREFIX); empty gives exactly `spool:{decisions}`.").Default(""),
			service.NewIntField(rsFieldBufferCount).Description("Most messages waiting in memory (SP_DECISION_BUFFER_COUNT).").Default(100000),
			service.NewIntField(rsFieldBufferBytes).Description("Most bytes of messages waiting in memory (SP_DECISION_BUFFER_BYTES).").Default(256<<20),
			service.NewDurationField(rsFieldWait).Description("How long a message waits in memory for the output before it is parked in the spool.").Default("30s").Advanced(),
			service.NewDurationField(rsFieldStopWait).Description("How long a clean stop gives the buffer to reach the output before parking the rest.").Default("10s").Advanced(),
			service.NewDurationField(rsFieldReplay).Description("How often the spool is replayed.").Default("1s").Advanced(),
			service.NewIntField(rsFieldReplayRate).Description("The most spool entries replayed a second.").Default(2000).Advanced(),
			service.NewOutputField(rsFieldOutput).Description("The output wrapped: the Kafka write (`kafka_franz` with its own 10 s timeout)."),
		)
}

func init() {
	service.MustRegisterBatchOutput("redis_spool", redisSpoolSpec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
			o, err := newRedisSpool(conf, mgr)
			return o, service.BatchPolicy{}, 4, err
		})
}

// spoolEntry is one message waiting for Kafka, and its form in the spool.
type spoolEntry struct {
	V     int               `json:"v"`
	Meta  map[string]string `json:"meta,omitempty"`
	Value json.RawMessage   `json:"value,omitempty"`
	B64   string            `json:"b64,omitempty"` // a value that is not JSON
	enq   time.Time
	size  int
	// unparked: the spool refused it once; it stays in memory, tried on
	// Kafka and the spool again, until the process stops.
	unparked bool
}

func entryOf(m *service.Message) (*spoolEntry, error) {
	b, err := m.AsBytes()
	if err != nil {
		return nil, err
	}
	e := &spoolEntry{V: 1, enq: time.Now(), Meta: map[string]string{}}
	_ = m.MetaWalk(func(k, v string) error { e.Meta[k] = v; return nil })
	if json.Valid(b) {
		e.Value = append(json.RawMessage(nil), b...)
	} else {
		e.B64 = base64.StdEncoding.EncodeToString(b)
	}
	e.size = len(b) + 64
	for k, v := range e.Meta {
		e.size += len(k) + len(v)
	}
	return e, nil
}

func (e *spoolEntry) bytes() []byte {
	if e.B64 != "" {
		b, _ := base64.StdEncoding.DecodeString(e.B64)
		return b
	}
	return e.Value
}

func (e *spoolEntry) message() *service.Message {
	m := service.NewMessage(e.bytes())
	for k, v := range e.Meta {
		m.MetaSetMut(k, v)
	}
	return m
}

// names reads the workspace and external_id of a decided transaction, the
// only identifiers a LOST line carries.
func (e *spoolEntry) names() (ws, ext string) {
	var n struct {
		WorkspaceID string `json:"workspace_id"`
		ExternalID  string `json:"external_id"`
	}
	_ = json.Unmarshal(e.bytes(), &n)
	return n.WorkspaceID, n.ExternalID
}

type redisSpool struct {
	url, key, lockKey  string
	bufCount, bufBytes int
	wait, stopWait     time.Duration
	replayEvery        time.Duration
	replayRate         int
	child              *service.OwnedOutput
	log                *service.Logger

	spooled, unspooled, lost *service.MetricCounter
	spoolGauge, bufGauge     *service.MetricGauge

	client goredis.UniversalClient

	mu       sync.Mutex
	cond     *sync.Cond
	queue    []*spoolEntry // oldest first
	bytes    int
	inflight int
	stopping bool // senders take nothing more
	// drained, made by a Close waiting for the buffer to empty, is closed
	// (and cleared) by the sender that empties it.
	drained chan struct{}

	sendCtx    context.Context
	sendCancel context.CancelFunc
	bgCtx      context.Context
	bgCancel   context.CancelFunc
	senders    sync.WaitGroup
	replayer   sync.WaitGroup
	started    bool
	closeOnce  sync.Once

	warnMu sync.Mutex
	warns  map[string]*rate.Sometimes // per kind of WARN: at most one a minute
}

func newRedisSpool(conf *service.ParsedConfig, mgr *service.Resources) (*redisSpool, error) {
	s := &redisSpool{log: mgr.Logger(), warns: map[string]*rate.Sometimes{}}
	var err error
	var prefix string
	if s.url, err = conf.FieldString(rsFieldURL); err != nil {
		return nil, err
	}
	if prefix, err = conf.FieldString(rsFieldKeyPrefix); err != nil {
		return nil, err
	}
	if s.bufCount, err = conf.FieldInt(rsFieldBufferCount); err != nil {
		return nil, err
	}
	if s.bufBytes, err = conf.FieldInt(rsFieldBufferBytes); err != nil {
		return nil, err
	}
	if s.wait, err = conf.FieldDuration(rsFieldWait); err != nil {
		return nil, err
	}
	if s.stopWait, err = conf.FieldDuration(rsFieldStopWait); err != nil {
		return nil, err
	}
	if s.replayEvery, err = conf.FieldDuration(rsFieldReplay); err != nil {
		return nil, err
	}
	if s.replayRate, err = conf.FieldInt(rsFieldReplayRate); err != nil {
		return nil, err
	}
	if s.bufCount < 1 || s.bufBytes < 1 || s.wait <= 0 || s.stopWait <= 0 || s.replayEvery <= 0 || s.replayRate < 1 {
		return nil, fmt.Errorf("redis_spool: %s, %s, %s, %s, %s and %s must be positive",
			rsFieldBufferCount, rsFieldBufferBytes, rsFieldWait, rsFieldStopWait, rsFieldReplay, rsFieldReplayRate)
	}
	if s.child, err = conf.FieldOutput(rsFieldOutput); err != nil {
		return nil, fmt.Errorf("redis_spool: %s: %w", rsFieldOutput, err)
	}
	if s.client, err = redisconn.Open(s.url); err != nil {
		return nil, fmt.Errorf("redis_spool: %s: %w", rsFieldURL, err)
	}
	s.key = prefix + SpoolKey
	s.lockKey = s.key + spoolLockSuffix
	m := mgr.Metrics()
	s.spooled = m.NewCounter(metricSpooled)
	s.unspooled = m.NewCounter(metricUnspooled)
	s.lost = m.NewCounter(metricLost)
	s.spoolGauge = m.NewGauge(metricSpoolGauge)
	s.bufGauge = m.NewGauge(metricBuffered)
	s.cond = sync.NewCond(&s.mu)
	s.sendCtx, s.sendCancel = context.WithCancel(context.Background())
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	return s, nil
}

// Connect reaches Redis, so that a spool which could not park anything
// fails to connect (the engine connects again with its backoff, and the
// readiness probe shows it), then starts the senders and the replayer
// (once). Kafka need not answer: the buffer holds what it does not take.
func (s *redisSpool) Connect(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, redisOpTimeout)
	err := s.client.Ping(pctx).Err()
	cancel()
	if err != nil {
		return fmt.Errorf("redis_spool: reaching Redis for the spool %s: %w", s.key, err)
	}
	s.started = true
	for range senders {
		s.senders.Add(1)
		go func() { defer s.senders.Done(); s.send() }()
	}
	s.replayer.Add(1)
	go func() { defer s.replayer.Done(); s.replayLoop() }()
	return nil
}

// WriteBatch takes the batch into the buffer, parking in the spool what
// does not fit. It never fails: every message is delivered, parked, or
// logged and counted as lost.
func (s *redisSpool) WriteBatch(ctx context.Context, batch service.MessageBatch) error {
	var overflow []*spoolEntry
	s.mu.Lock()
	for _, m := range batch {
		e, err := entryOf(m)
		if err != nil {
			s.mu.Unlock()
			return fmt.Errorf("redis_spool: reading a message: %w", err)
		}
		if s.stopping || len(s.queue) >= s.bufCount || s.bytes+e.size > s.bufBytes {
			overflow = append(overflow, e)
			continue
		}
		s.queue = append(s.queue, e)
		s.bytes += e.size
	}
	s.bufGauge.Set(int64(len(s.queue) + s.inflight))
	s.cond.Broadcast()
	s.mu.Unlock()
	if len(overflow) > 0 {
		// No room in memory: parked at once, lost if Redis refuses too.
		s.parkOrLose(overflow, "buffer full")
	}
	return nil
}

// park appends entries to the spool, oldest first, and returns them all
// when Redis refused them (the caller keeps them or, when it cannot, loses
// them).
func (s *redisSpool) park(entries []*spoolEntry, why string) []*spoolEntry {
	ctx, cancel := context.WithTimeout(context.Background(), redisOpTimeout)
	defer cancel()
	n, err := pushEntries(ctx, s.client, s.key, entries)
	if err != nil {
		s.warn("park", logSpoolFailed, "err", err.Error(), "events", len(entries))
		return entries
	}
	s.spooled.Incr(int64(len(entries)))
	s.spoolGauge.Set(n)
	s.warn("parked", logParked, "events", len(entries), "spool_events", n, "why", why)
	return nil
}

// parkOrLose parks entries; those Redis refuses are lost.
func (s *redisSpool) parkOrLose(entries []*spoolEntry, why string) {
	for _, e := range s.park(entries, why) {
		s.lose(e)
	}
}

func (s *redisSpool) lose(e *spoolEntry) {
	ws, ext := e.names()
	s.lost.Incr(1)
	applog.With(s.log, "workspace", ws, "external_id", ext).Error(logLost)
}

// warn logs a WARN at most once a minute per key.
func (s *redisSpool) warn(key, msg string, kv ...any) {
	s.warnMu.Lock()
	w := s.warns[key]
	if w == nil {
		w = &rate.Sometimes{Interval: time.Minute}
		s.warns[key] = w
	}
	s.warnMu.Unlock()
	w.Do(func() { applog.With(s.log, kv...).Warn(msg) })
}

// replayLoop sets the spool gauge at once (right after a restart too) and
// replays the spool every replay_interval until Close.
func (s *redisSpool) replayLoop() {
	t := time.NewTicker(s.replayEvery)
	defer t.Stop()
	for {
		s.replay(s.bgCtx)
		select {
		case <-s.bgCtx.Done():
			return
		case <-t.C:
		}
	}
}

// trimHead removes the first ARGV[2] entries, which the replay lock's holder
// read and delivered (others only append at the tail meanwhile), only while
// the lock (KEYS[2]) still holds the holder's value (ARGV[1]): a holder whose
// lock ran out removes nothing. The lock itself is redislock's: SET NX PX,
// refreshed and released by Lua scripts that compare the value first, the
// pattern Redis's documentation gives.
var trimHead = goredis.NewScript(`if redis.call('get', KEYS[2]) ~= ARGV[1] then return -1 end
redis.call('ltrim', KEYS[1], tonumber(ARGV[2]), -1) return redis.call('llen', KEYS[1])`)

// replay delivers the spool to the output, oldest first, chunk by chunk at
// replay_rate, while it holds the replay lock and the output takes them.
//
// Paced because, unpaced, the replay of a full-size outage's spool (about
// 16,000 entries) takes 1.6 s right when the broker comes back, alongside
// the buffer's own 15,000, and the decisions answered meanwhile lose the
// CPU they need: 303 answered degraded by timeout in the full-size
// Kafka-down proof.
func (s *redisSpool) replay(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, redisOpTimeout)
	n, err := s.client.LLen(rctx, s.key).Result()
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			s.warn("llen", logReplayFailed, "err", err.Error())
		}
		return
	}
	s.spoolGauge.Set(n)
	if n == 0 {
		return
	}
	rctx, cancel = context.WithTimeout(ctx, redisOpTimeout)
	lock, err := redislock.Obtain(rctx, s.client, s.lockKey, spoolLockTTL, nil)
	cancel()
	if err != nil {
		return // another process replays (redislock.ErrNotObtained), or Redis failed: the next round tries again
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), redisOpTimeout)
		_ = lock.Release(c)
		cancel()
	}()
	held := lock.Token() + lock.Metadata() // the lock's value, as trimHead compares it
	keys := []string{s.key, s.lockKey}
	chunk := int64(min(replayChunk, max(1, s.replayRate/10)))
	start, sent := time.Now(), 0
	for ctx.Err() == nil {
		if wait := time.Until(start.Add(time.Duration(sent) * time.Second / time.Duration(s.replayRate))); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		rctx, cancel = context.WithTimeout(ctx, redisOpTimeout)
		if err := lock.Refresh(rctx, spoolLockTTL, nil); err != nil {
			cancel()
			return // the lock ran out (another process may replay now) or Redis failed
		}
		raw, err := s.client.LRange(rctx, s.key, 0, chunk-1).Result()
		cancel()
		if err != nil {
			s.warn("lrange", logReplayFailed, "err", err.Error())
			return
		}
		if len(raw) == 0 {
			s.spoolGauge.Set(0)
			return
		}
		sent += len(raw)
		if !s.replayChunk(ctx, raw, keys, held) {
			return
		}
	}
}

// replayChunk writes one chunk read from the spool's head to the output, in
// order, and removes the delivered head while the lock still holds (held).
// It reports whether the whole chunk went, so the next one may follow.
func (s *redisSpool) replayChunk(ctx context.Context, raw []string, keys []string, held string) bool {
	// Unreadable entries are lost (logged once they are removed); the
	// others are written in order.
	entries := make([]*spoolEntry, len(raw))
	var readable []*spoolEntry
	for i, r := range raw {
		var e spoolEntry
		if err := json.Unmarshal([]byte(r), &e); err != nil || e.V != 1 || (len(e.Value) == 0 && e.B64 == "") {
			continue
		}
		entries[i] = &e
		readable = append(readable, &e)
	}
	failed := map[*spoolEntry]bool{}
	if len(readable) > 0 {
		for _, e := range s.write(ctx, readable) {
			failed[e] = true
		}
	}
	// Only a delivered head can be trimmed: what follows the first
	// failure stays and is replayed again (a delivered one among them
	// then arrives twice; storing is idempotent).
	delivered, replayed := 0, 0
	for _, e := range entries {
		if e != nil && failed[e] {
			break
		}
		delivered++
		if e != nil {
			replayed++
		}
	}
	if len(failed) > 0 && ctx.Err() == nil {
		s.warn("replay", logReplayFailed, "events", len(failed), "err", "the output did not take them")
	}
	if delivered == 0 {
		return false
	}
	rctx, cancel := context.WithTimeout(context.Background(), redisOpTimeout)
	left, err := trimHead.Run(rctx, s.client, keys, held, delivered).Int64()
	cancel()
	if err != nil || left < 0 {
		s.warn("trim", logReplayFailed, "err", fmt.Sprintf("removing %d replayed entries: %v", delivered, err))
		return false
	}
	for i := 0; i < delivered; i++ {
		if entries[i] == nil {
			s.lost.Incr(1)
			ws, ext := (&spoolEntry{Value: json.RawMessage(raw[i])}).names()
			applog.With(s.log, "workspace", ws, "external_id", ext).Error(logLost)
		}
	}
	s.unspooled.Incr(int64(replayed))
	s.spoolGauge.Set(left)
	return delivered == len(raw)
}

// Close gives the buffer stop_wait to reach the output, parks the rest,
// stops the replayer, closes the output and only then Redis.
func (s *redisSpool) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		// No new replay: the spool's entries stay for the next process.
		s.bgCancel()
		s.replayer.Wait()
		s.awaitDrained(ctx)
		s.mu.Lock()
		s.stopping = true
		s.cond.Broadcast()
		s.mu.Unlock()
		// Writes still waiting for Kafka are cut short; their entries park.
		s.sendCancel()
		s.senders.Wait()
		s.mu.Lock()
		left := s.queue
		s.queue, s.bytes = nil, 0
		s.bufGauge.Set(0)
		s.mu.Unlock()
		if len(left) > 0 {
			s.parkOrLose(left, "stopping")
			applog.With(s.log, "events", len(left)).Warn(logStopParked)
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = s.child.Close(cctx)
		cancel()
		gctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if n, err := s.client.LLen(gctx, s.key).Result(); err == nil {
			s.spoolGauge.Set(n)
		}
		cancel()
		_ = s.client.Close()
	})
	return nil
}

// awaitDrained waits until the senders have handed the output every buffered
// entry, for at most stop_wait and never past ctx: the senders close the
// drained channel it waits on when the buffer empties.
func (s *redisSpool) awaitDrained(ctx context.Context) {
	deadline := time.NewTimer(s.stopWait)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		if len(s.queue) == 0 && s.inflight == 0 {
			s.mu.Unlock()
			return
		}
		if s.drained == nil {
			s.drained = make(chan struct{})
		}
		drained := s.drained
		s.mu.Unlock()
		select {
		case <-drained:
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		}
	}
}
