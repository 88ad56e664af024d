package kafkafranz

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/kafkaconf"
	"github.com/speculapro/speculapro/internal/ownership"
	"github.com/speculapro/speculapro/internal/procmem"
)

const (
	kfiFieldTopics           = "topics"
	kfiFieldConsumerGroup    = "consumer_group"
	kfiFieldCheckpointLimit  = "checkpoint_limit"
	kfiFieldCommitPeriod     = "commit_period"
	kfiFieldStartFromOldest  = "start_from_oldest"
	kfiFieldRevokeWait       = "revoke_wait"
	kfiFieldSessionTimeout   = "session_timeout"
	kfiFieldHeartbeat        = "heartbeat_interval"
	kfiFieldRebalanceTimeout = "rebalance_timeout"
	kfiFieldBatching         = "batching"

	kfiFieldMaxBufferedRecords     = "max_buffered_records"
	kfiFieldFetchMaxBytes          = "fetch_max_bytes"
	kfiFieldFetchMaxPartitionBytes = "fetch_max_partition_bytes"
	kfiFieldFetchMaxWait           = "fetch_max_wait"
)

// Metadata keys set on every message, besides the record's own headers.
const (
	kfiMetaKey       = "kafka_key"
	kfiMetaTopic     = "kafka_topic"
	kfiMetaPartition = "kafka_partition"
	kfiMetaOffset    = "kafka_offset"
	kfiMetaTimestamp = "kafka_timestamp_ms"
)

// kfiLagMetric is the consumer-lag gauge: records of a partition written to
// Kafka but not yet processed (acked) by this group.
const kfiLagMetric = "speculapro_kafka_consumer_lag"

const (
	// kfiPollRecords bounds one poll, so the mutex and the rebalance block
	// that a poll holds stay short.
	kfiPollRecords = 10000
	// kfiDefaultBuffered is max_buffered_records when batching has no count.
	kfiDefaultBuffered = 10000
	// kfiCommitTimeout bounds one periodic commit.
	kfiCommitTimeout = 10 * time.Second
	// kfiPollErrorPause keeps a poll loop that only sees errors (broker
	// down) from spinning; the client retries underneath.
	kfiPollErrorPause = time.Second
)

var (
	// errKfiNoTopics is returned when the input names no topic to consume.
	errKfiNoTopics = errors.New("kafka_franz input: no topics configured")
	// errKfiBatchingUnsupported is returned for batching features the input
	// cannot honour without breaking per-partition order.
	errKfiBatchingUnsupported = errors.New("kafka_franz input: batching.check and batching.processors are not supported")
)

// long: the component's config spec, one field after another as its documentation page lists them
func kafkaFranzInputSpec() *service.ConfigSpec {
	fields := kafkaconf.Fields()
	fields = append(fields,
		service.NewStringListField(kfiFieldTopics).
			Description("Topics to consume. Each item may hold several comma-separated topics.").
			Example([]string{"sp.txn.ingested"}),
		service.NewStringField(kfiFieldConsumerGroup).
			Description("Consumer group to consume as. Every process of one role uses the same group, so Kafka divides the partitions between them; the group's committed offsets are where a restarted process carries on.").
			Example("speculapro-persist"),
		service.NewIntField(kfiFieldCheckpointLimit).
			Description("The most records of one partition handed out and not yet acked: a batch takes at most this many records of a partition, so with few partitions raise it to fill `batching.count`. It also bounds how many records of a partition are delivered again after a crash. Fetching of a partition pauses while this many of its records wait in memory (a fetch already under way can add one more response); memory across all partitions is bounded by `max_buffered_records`.").
			Default(1024).
			Advanced(),
		service.NewIntField(kfiFieldMaxBufferedRecords).
			Description("The most fetched records held in memory, across all partitions, before they are handed out in a batch; 0 means twice `batching.count` (10000 without a count). While this many wait, the input stops taking records from the client, and the client then fetches nothing more once its current fetch response is taken, so this bounds the input's memory however many partitions it owns, while `checkpoint_limit` bounds each partition's unacked records. Records of a nacked batch go back to their partition whatever the budget, so it can be exceeded by one batch. Lower it when a process owns many partitions or records are large; keep it at least `batching.count`, or batches are cut smaller than their count.").
			Default(0).
			Advanced(),
		service.NewIntField(kfiFieldFetchMaxBytes).
			Description("The most bytes one fetch response from a broker may carry (Kafka's `fetch.max.bytes`); a broker still returns a single record batch larger than this. The client holds one response per broker at a time, so memory for fetches is about brokers × this, more once records are decompressed. Raise it only when consumption cannot keep up on a fast network; lower it when compressed records decompress to far more than this.").
			Default(16<<20).
			Advanced(),
		service.NewIntField(kfiFieldFetchMaxPartitionBytes).
			Description("The most bytes one fetch response carries for one partition (Kafka's `max.partition.fetch.bytes`). With few partitions this, not `fetch_max_bytes`, sizes a response; lowering it below about 1 MiB makes fetches small and slows consumption.").
			Default(1<<20).
			Advanced(),
		service.NewDurationField(kfiFieldFetchMaxWait).
			Description("How long a broker may hold a fetch while it has no new records (Kafka's `fetch.max.wait.ms`). It is short because a partition resumed after an ack joins the broker's next fetch only once the current one returns; raising it saves requests on idle topics at the cost of latency.").
			Default("250ms").
			Advanced(),
		service.NewDurationField(kfiFieldCommitPeriod).
			Description("How often acked offsets are committed to the group. Offsets are also committed when partitions are revoked and on shutdown.").
			Default("1s").
			Advanced(),
		service.NewBoolField(kfiFieldStartFromOldest).
			Description("Where a group without a committed offset starts: at the oldest retained record (true) or at the newest (false).").
			Default(true).
			Advanced(),
		service.NewDurationField(kfiFieldRevokeWait).
			Description("How long a rebalance waits for batches of the revoked partitions that are still being processed before it commits what was acked and lets the partitions go. An ack arriving later is ignored, and the next owner reads those records again. Must be shorter than `rebalance_timeout`.").
			Default("10s").
			Advanced(),
		service.NewDurationField(kfiFieldSessionTimeout).
			Description("How long the group waits for a silent member (one that crashed, or was killed) before giving its partitions to others, and so how long a restarted process waits before it stores anything again. Kafka's `session.timeout.ms`; 6s is the least brokers accept by default (`group.min.session.timeout.ms`), Kafka's own default is 45s. A member whose heartbeats stop for longer (a long GC pause, a frozen VM) loses its partitions and reads them again: replays are idempotent.").
			Default("6s").
			Advanced(),
		service.NewDurationField(kfiFieldHeartbeat).
			Description("How often the member tells the group it is alive (Kafka's `heartbeat.interval.ms`); keep it well below `session_timeout`, a sixth of it by default.").
			Default("1s").
			Advanced(),
		service.NewDurationField(kfiFieldRebalanceTimeout).
			Description("How long members may take to finish a rebalance, including `revoke_wait` and the commit after it. Kafka's `rebalance.timeout.ms`.").
			Default("60s").
			Advanced(),
		service.NewBatchPolicyField(kfiFieldBatching).
			Description("How records are grouped into batches. `count` is the most records in a batch, `byte_size` the most value bytes, and `period` how long to wait for more records once one is ready; without a `period` a batch is whatever is ready. `check` and `processors` are not supported."),
	)
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("Consumes topics as a Kafka consumer group with franz-go, in order per partition, committing only what was processed.").
		Description(`
Records are handed out in batches that may span partitions, and several batches may be in flight at once, but a
partition's next records are not handed out before its earlier ones are acked. An output with ` + "`max_in_flight`" + `
above one therefore never reorders a partition: order per account holds however many writers run.

An offset is committed only once every record before it in its partition has been acked, every
` + "`commit_period`" + `, when partitions are revoked and on shutdown, so a crash or a rebalance can deliver a
record again but never skips one. A nacked batch is delivered again, the same records before anything later of
their partitions, after a backoff that doubles from 100ms up to 5s while a partition keeps failing.

An output that stores some partitions of a batch and hands the others back (a ` + "`*service.BatchError`" + ` naming
their messages, as ` + "`pg_copy_upsert`" + ` does for rows waiting for a month's partition) has the others acked and
committed; only the failed partitions are delivered again, after the wait the error asks for.

When a rebalance revokes partitions, the input waits up to ` + "`revoke_wait`" + ` for their batches in flight, commits
what was acked and forgets the partitions; an ack that arrives afterwards commits nothing. Every message's context
is the lease of its partition: it ends when the partition is given up (after ` + "`revoke_wait`" + `, or lost) and when
the engine stops reading (shutdown), so an output retrying a batch of it stops and frees its writer at once.

While a topic to consume does not exist, ` + "`Connect`" + ` fails (readiness and ` + "`input_connection_up`" + ` show it) and
logs a WARN naming the topic and ` + "`speculapro topics`" + `, the command that creates it.

Every message carries the metadata ` + "`kafka_key`, `kafka_topic`, `kafka_partition`, `kafka_offset`, `kafka_timestamp_ms`" + `
and every record header (the header's bytes as a string).

The gauge ` + "`" + kfiLagMetric + "`" + ` (labels ` + "`topic`, `partition`, `group`" + `) is the consumer lag of each partition the
process owns: records written to the partition and not yet processed by the group. It is the signal that a role
keeps up; a partition that moves to another process reads 0 here and is reported by its new owner.`).
		Fields(fields...)
}

func init() {
	service.MustRegisterBatchInput("kafka_franz", kafkaFranzInputSpec().Field(procmem.Field()),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchInput, error) {
			if err := procmem.FromParsed(conf); err != nil {
				return nil, err
			}
			return newKafkaFranzInput(conf, mgr)
		})
}

// kfiGauge is the part of a metric gauge the input uses; tests read it.
type kfiGauge interface {
	Set(value int64, labelValues ...string)
}

// kafkaFranzInput is the kafka_franz batch input. Its contract is the
// component's description above (at least once, in order per partition);
// the invariants live on kfiPartition.
type kafkaFranzInput struct {
	conn             kafkaconf.Config
	topics           []string
	group            string
	checkpointLimit  int
	commitPeriod     time.Duration
	startFromOldest  bool
	revokeWait       time.Duration
	sessionTimeout   time.Duration
	heartbeat        time.Duration
	rebalanceTimeout time.Duration
	batchCount       int
	batchBytes       int
	batchPeriod      time.Duration
	maxBuffered      int
	fetchMaxBytes    int32
	fetchPartBytes   int32
	fetchMaxWait     time.Duration
	extraOpts        []kgo.Opt // tests tune heartbeats with these

	log *service.Logger
	lag kfiGauge

	// running is the parent of every partition's lease: it ends with
	// ownership.ErrShutdown when the engine stops reading (the context of
	// ReadBatch ends) or the input closes, so batches retrying downstream
	// stop at once instead of waiting out their backoff.
	running     context.Context
	stopRunning context.CancelCauseFunc
	lastRead    context.Context // the context of the last ReadBatch
	watching    context.Context // the one watched for the stop

	// mu guards tracker, changed, client, closing and stop. It is never
	// held while calling into the client except for pause/resume, which
	// take only the client's own locks and call nothing of ours.
	mu      sync.Mutex
	tracker *kfiTracker
	changed chan struct{} // closed and replaced on every change of tracker
	client  *kgo.Client
	closing bool
	stop    context.CancelFunc

	loops  sync.WaitGroup // the poll and commit loops
	connMu sync.Mutex     // serialises Connect and Close

	// commitMu makes computing and sending a commit one step, so that a
	// periodic commit cannot send offsets of a partition that a revoke
	// has handed over in between.
	commitMu sync.Mutex
}

func newKafkaFranzInput(conf *service.ParsedConfig, mgr *service.Resources) (*kafkaFranzInput, error) {
	in := &kafkaFranzInput{
		log:     mgr.Logger(),
		changed: make(chan struct{}),
	}
	var err error
	if in.conn, err = kafkaconf.FromParsed(conf); err != nil {
		return nil, err
	}
	rawTopics, err := conf.FieldStringList(kfiFieldTopics)
	if err != nil {
		return nil, err
	}
	for _, t := range rawTopics {
		for _, s := range strings.Split(t, ",") {
			if s = strings.TrimSpace(s); s != "" {
				in.topics = append(in.topics, s)
			}
		}
	}
	if len(in.topics) == 0 {
		return nil, errKfiNoTopics
	}
	if in.group, err = conf.FieldString(kfiFieldConsumerGroup); err != nil {
		return nil, err
	}
	if strings.TrimSpace(in.group) == "" {
		return nil, fmt.Errorf("kafka_franz input: %s must not be empty", kfiFieldConsumerGroup)
	}
	if in.checkpointLimit, err = conf.FieldInt(kfiFieldCheckpointLimit); err != nil {
		return nil, err
	}
	if in.checkpointLimit < 1 {
		return nil, fmt.Errorf("kafka_franz input: %s must be at least 1, got %d", kfiFieldCheckpointLimit, in.checkpointLimit)
	}
	if in.commitPeriod, err = conf.FieldDuration(kfiFieldCommitPeriod); err != nil {
		return nil, err
	}
	if in.commitPeriod <= 0 {
		return nil, fmt.Errorf("kafka_franz input: %s must be positive", kfiFieldCommitPeriod)
	}
	if in.startFromOldest, err = conf.FieldBool(kfiFieldStartFromOldest); err != nil {
		return nil, err
	}
	if in.revokeWait, err = conf.FieldDuration(kfiFieldRevokeWait); err != nil {
		return nil, err
	}
	if in.sessionTimeout, err = conf.FieldDuration(kfiFieldSessionTimeout); err != nil {
		return nil, err
	}
	if in.rebalanceTimeout, err = conf.FieldDuration(kfiFieldRebalanceTimeout); err != nil {
		return nil, err
	}
	if in.heartbeat, err = conf.FieldDuration(kfiFieldHeartbeat); err != nil {
		return nil, err
	}
	if in.heartbeat <= 0 || in.heartbeat >= in.sessionTimeout {
		return nil, fmt.Errorf("kafka_franz input: %s (%s) must be positive and shorter than %s (%s)",
			kfiFieldHeartbeat, in.heartbeat, kfiFieldSessionTimeout, in.sessionTimeout)
	}
	if in.revokeWait < 0 || in.revokeWait >= in.rebalanceTimeout {
		return nil, fmt.Errorf("kafka_franz input: %s (%s) must be shorter than %s (%s)",
			kfiFieldRevokeWait, in.revokeWait, kfiFieldRebalanceTimeout, in.rebalanceTimeout)
	}
	if err := in.parseBatchingAndFetch(conf); err != nil {
		return nil, err
	}
	in.tracker = newKfiTracker(in.checkpointLimit, in.maxBuffered)
	in.running, in.stopRunning = context.WithCancelCause(context.Background())
	in.tracker.base = in.running
	in.lag = mgr.Metrics().NewGauge(kfiLagMetric, "topic", "partition", "group")
	return in, nil
}

// parseBatchingAndFetch reads how records are batched and fetched: the
// batch policy, the records buffered and the fetch sizes and wait.
func (in *kafkaFranzInput) parseBatchingAndFetch(conf *service.ParsedConfig) error {
	policy, err := conf.FieldBatchPolicy(kfiFieldBatching)
	if err != nil {
		return err
	}
	if policy.Check != "" || batchPolicyHasProcessors(conf) {
		return errKfiBatchingUnsupported
	}
	in.batchCount, in.batchBytes = policy.Count, policy.ByteSize
	if policy.Period != "" {
		if in.batchPeriod, err = time.ParseDuration(policy.Period); err != nil {
			return fmt.Errorf("kafka_franz input: parsing %s.period %q: %w", kfiFieldBatching, policy.Period, err)
		}
	}
	if in.maxBuffered, err = conf.FieldInt(kfiFieldMaxBufferedRecords); err != nil {
		return err
	}
	switch {
	case in.maxBuffered < 0:
		return fmt.Errorf("kafka_franz input: %s must not be negative, got %d", kfiFieldMaxBufferedRecords, in.maxBuffered)
	case in.maxBuffered == 0 && in.batchCount > 0:
		in.maxBuffered = 2 * in.batchCount
	case in.maxBuffered == 0:
		in.maxBuffered = kfiDefaultBuffered
	}
	for _, f := range []struct {
		name string
		dst  *int32
	}{{kfiFieldFetchMaxBytes, &in.fetchMaxBytes}, {kfiFieldFetchMaxPartitionBytes, &in.fetchPartBytes}} {
		v, err := conf.FieldInt(f.name)
		if err != nil {
			return err
		}
		if v < 1 || v > 1<<30 {
			return fmt.Errorf("kafka_franz input: %s must be between 1 and 1GiB, got %d", f.name, v)
		}
		*f.dst = int32(v)
	}
	if in.fetchMaxWait, err = conf.FieldDuration(kfiFieldFetchMaxWait); err != nil {
		return err
	}
	if in.fetchMaxWait < time.Millisecond {
		return fmt.Errorf("kafka_franz input: %s must be at least 1ms, got %s", kfiFieldFetchMaxWait, in.fetchMaxWait)
	}
	return nil
}

func batchPolicyHasProcessors(conf *service.ParsedConfig) bool {
	if !conf.Contains(kfiFieldBatching, "processors") {
		return false
	}
	procs, err := conf.FieldAnyList(kfiFieldBatching, "processors")
	return err == nil && len(procs) > 0
}

// Connect creates the group consumer. It checks that a broker answers, so
// that an unreachable cluster surfaces as a connection failure the engine
// retries; once connected, the client rides out broker outages itself.
func (in *kafkaFranzInput) Connect(ctx context.Context) error {
	// mu is not held while the client starts: its group callbacks take mu,
	// and closing a client that failed its ping may run them.
	in.connMu.Lock()
	defer in.connMu.Unlock()
	in.mu.Lock()
	connected, closing := in.client != nil, in.closing
	in.mu.Unlock()
	if connected {
		return nil
	}
	if closing {
		return service.ErrEndOfInput
	}
	opts, err := in.conn.ClientOpts()
	if err != nil {
		return fmt.Errorf("kafka_franz input: building client options: %w", err)
	}
	reset := kgo.NewOffset().AtStart()
	if !in.startFromOldest {
		reset = kgo.NewOffset().AtEnd()
	}
	opts = append(opts,
		kgo.ClientID("speculapro"),
		kgo.ConsumerGroup(in.group),
		kgo.ConsumeTopics(in.topics...),
		kgo.ConsumeResetOffset(reset),
		kgo.DisableAutoCommit(),
		// Polls and rebalance callbacks exclude each other, so records
		// polled from a partition can never reach the tracker after the
		// partition was revoked.
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(in.sessionTimeout),
		kgo.HeartbeatInterval(in.heartbeat),
		kgo.RebalanceTimeout(in.rebalanceTimeout),
		kgo.FetchMaxWait(in.fetchMaxWait),
		kgo.FetchMaxBytes(in.fetchMaxBytes),
		kgo.FetchMaxPartitionBytes(in.fetchPartBytes),
		kgo.OnPartitionsAssigned(in.onAssigned),
		kgo.OnPartitionsRevoked(in.onRevoked),
		kgo.OnPartitionsLost(in.onLost),
	)
	opts = append(opts, kgo.WithLogger(kfiClientLogger{in.log}))
	opts = append(opts, in.extraOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka_franz input: creating client for group %q: %w", in.group, err)
	}
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		return fmt.Errorf("kafka_franz input: reaching a seed broker: %w", err)
	}
	if err := in.checkTopics(ctx, cl); err != nil {
		cl.Close()
		return err
	}
	loopCtx, stop := context.WithCancel(context.Background())
	in.mu.Lock()
	in.client, in.stop = cl, stop
	in.notifyLocked()
	in.mu.Unlock()
	// Both loops end when stop is called (Close), and Close waits for them.
	in.loops.Add(2)
	go in.pollLoop(loopCtx, cl)
	go in.commitLoop(loopCtx, cl)
	return nil
}

// ReadBatch hands out the next batch once count or byte_size records are
// ready, the batching period has passed since the first one was, or no
// more could become ready before an ack.
func (in *kafkaFranzInput) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	in.watchForStop(ctx)
	var first time.Time
	for {
		in.mu.Lock()
		if in.closing {
			in.mu.Unlock()
			return nil, nil, service.ErrEndOfInput
		}
		if in.client == nil {
			in.mu.Unlock()
			return nil, nil, service.ErrNotConnected
		}
		now := time.Now()
		records, bytes, canGrow := in.tracker.ready(now)
		var wakeAt time.Time
		if records > 0 {
			if first.IsZero() {
				first = now
			}
			full := in.batchCount > 0 && records >= in.batchCount || in.batchBytes > 0 && bytes >= in.batchBytes
			deadline := first.Add(in.batchPeriod)
			if full || !canGrow || !now.Before(deadline) {
				claims := in.tracker.take(in.batchCount, in.batchBytes, now)
				// Taking made room in the budget, which the poll loop may be waiting for.
				in.notifyLocked()
				in.mu.Unlock()
				return in.batchOf(claims), in.ackFunc(claims), nil
			}
			wakeAt = deadline
		}
		if retry := in.tracker.earliestRetry(now); !retry.IsZero() && (wakeAt.IsZero() || retry.Before(wakeAt)) {
			wakeAt = retry
		}
		changed := in.changed
		in.mu.Unlock()

		var (
			timer   *time.Timer
			timeout <-chan time.Time
		)
		if !wakeAt.IsZero() {
			timer = time.NewTimer(time.Until(wakeAt))
			timeout = timer.C
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-timeout:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
	}
}

// errKfiMissingTopic is returned by Connect while a topic is missing, so
// readiness and input_connection_up show it; the engine connects again.
var errKfiMissingTopic = errors.New("kafka_franz input: topic does not exist")

// checkTopics refuses to connect while a topic to consume does not exist:
// the client would wait for it silently. Each attempt logs a WARN naming
// the topics and the fix.
func (in *kafkaFranzInput) checkTopics(ctx context.Context, cl *kgo.Client) error {
	topics, err := kadm.NewClient(cl).ListTopics(ctx, in.topics...)
	if err != nil {
		return fmt.Errorf("kafka_franz input: looking up topics %s: %w", strings.Join(in.topics, ", "), err)
	}
	var missing []string
	for _, t := range in.topics {
		if d, ok := topics[t]; !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	in.log.Warnf("kafka_franz: topic %s does not exist (group %s waits for it): create it with `speculapro topics`", strings.Join(missing, ", "), in.group)
	return fmt.Errorf("%w: %s; create it with `speculapro topics`", errKfiMissingTopic, strings.Join(missing, ", "))
}

// watchForStop ends every lease with ownership.ErrShutdown once ctx, the
// engine's reading context, is cancelled: the engine passes the same context
// to every ReadBatch and cancels it when it stops the stream, before it waits
// for the batches in flight. Only a context passed twice in a row is
// watched, so a caller's context for one read (cancelled when that read
// returns) is no stop; nor is a deadline.
func (in *kafkaFranzInput) watchForStop(ctx context.Context) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if ctx.Done() == nil || in.watching == ctx {
		return
	}
	if in.lastRead != ctx {
		in.lastRead = ctx
		return
	}
	in.watching = ctx
	context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			in.stopRunning(ownership.ErrShutdown)
		}
	})
}

// Close commits what was acked and leaves the group. The engine calls it
// once no ack can arrive any more, so nothing in flight is waited for.
func (in *kafkaFranzInput) Close(ctx context.Context) error {
	in.connMu.Lock()
	defer in.connMu.Unlock()
	in.stopRunning(ownership.ErrShutdown)
	in.mu.Lock()
	in.closing = true
	cl, stop := in.client, in.stop
	in.notifyLocked()
	in.mu.Unlock()
	if cl == nil {
		return nil
	}
	stop()
	in.loops.Wait()

	cctx, cancel := context.WithTimeout(ctx, in.revokeWait+kfiCommitTimeout)
	defer cancel()
	in.commitMu.Lock()
	in.mu.Lock()
	commits := in.tracker.commits(nil)
	in.mu.Unlock()
	err := in.commit(cctx, cl, commits)
	in.commitMu.Unlock()
	if err != nil && ctx.Err() == nil {
		in.log.Errorf("kafka_franz: on shutdown: %v", err)
	}
	cl.AllowRebalance()
	// Leaving is bounded: past the deadline the group notices the member's
	// silence after session_timeout instead.
	if err := cl.LeaveGroupContext(cctx); err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
		in.log.Warnf("kafka_franz: leaving group %s: %v", in.group, err)
	}
	cl.Close()

	in.mu.Lock()
	in.client = nil
	in.mu.Unlock()
	return nil
}
