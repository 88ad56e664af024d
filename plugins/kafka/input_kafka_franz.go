package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/speculapro/speculapro/internal/kafkaconf"
)

const (
	kfiFieldTopics           = "topics"
	kfiFieldConsumerGroup    = "consumer_group"
	kfiFieldCheckpointLimit  = "checkpoint_limit"
	kfiFieldCommitPeriod     = "commit_period"
	kfiFieldStartFromOldest  = "start_from_oldest"
	kfiFieldRevokeWait       = "revoke_wait"
	kfiFieldSessionTimeout   = "session_timeout"
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
			Description("How long the group waits for a silent member (one that crashed) before giving its partitions to others. Kafka's `session.timeout.ms`; the broker bounds it with `group.min.session.timeout.ms` and `group.max.session.timeout.ms`.").
			Default("45s").
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

When a rebalance revokes partitions, the input waits up to ` + "`revoke_wait`" + ` for their batches in flight, commits
what was acked and forgets the partitions; an ack that arrives afterwards commits nothing.

Every message carries the metadata ` + "`kafka_key`, `kafka_topic`, `kafka_partition`, `kafka_offset`, `kafka_timestamp_ms`" + `
and every record header (the header's bytes as a string).

The gauge ` + "`" + kfiLagMetric + "`" + ` (labels ` + "`topic`, `partition`, `group`" + `) is the consumer lag of each partition the
process owns: records written to the partition and not yet processed by the group. It is the signal that a role
keeps up; a partition that moves to another process reads 0 here and is reported by its new owner.`).
		Fields(fields...)
}

func init() {
	service.MustRegisterBatchInput("kafka_franz", kafkaFranzInputSpec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchInput, error) {
			return newKafkaFranzInput(conf, mgr)
		})
}

// kfiGauge is the part of a metric gauge the input uses; tests read it.
type kfiGauge interface {
	Set(value int64, labelValues ...string)
}

// kafkaFranzInput is the kafka_franz batch input. See the spec for the
// contract; the invariants live on kfiPartition.
type kafkaFranzInput struct {
	conn             kafkaconf.Config
	topics           []string
	group            string
	checkpointLimit  int
	commitPeriod     time.Duration
	startFromOldest  bool
	revokeWait       time.Duration
	sessionTimeout   time.Duration
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
	if in.revokeWait < 0 || in.revokeWait >= in.rebalanceTimeout {
		return nil, fmt.Errorf("kafka_franz input: %s (%s) must be shorter than %s (%s)",
			kfiFieldRevokeWait, in.revokeWait, kfiFieldRebalanceTimeout, in.rebalanceTimeout)
	}
	policy, err := conf.FieldBatchPolicy(kfiFieldBatching)
	if err != nil {
		return nil, err
	}
	if policy.Check != "" || batchPolicyHasProcessors(conf) {
		return nil, errKfiBatchingUnsupported
	}
	in.batchCount, in.batchBytes = policy.Count, policy.ByteSize
	if policy.Period != "" {
		if in.batchPeriod, err = time.ParseDuration(policy.Period); err != nil {
			return nil, fmt.Errorf("kafka_franz input: parsing %s.period %q: %w", kfiFieldBatching, policy.Period, err)
		}
	}
	if in.maxBuffered, err = conf.FieldInt(kfiFieldMaxBufferedRecords); err != nil {
		return nil, err
	}
	switch {
	case in.maxBuffered < 0:
		return nil, fmt.Errorf("kafka_franz input: %s must not be negative, got %d", kfiFieldMaxBufferedRecords, in.maxBuffered)
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
			return nil, err
		}
		if v < 1 || v > 1<<30 {
			return nil, fmt.Errorf("kafka_franz input: %s must be between 1 and 1GiB, got %d", f.name, v)
		}
		*f.dst = int32(v)
	}
	if in.fetchMaxWait, err = conf.FieldDuration(kfiFieldFetchMaxWait); err != nil {
		return nil, err
	}
	if in.fetchMaxWait < time.Millisecond {
		return nil, fmt.Errorf("kafka_franz input: %s must be at least 1ms, got %s", kfiFieldFetchMaxWait, in.fetchMaxWait)
	}
	in.tracker = newKfiTracker(in.checkpointLimit, in.maxBuffered)
	in.lag = mgr.Metrics().NewGauge(kfiLagMetric, "topic", "partition", "group")
	return in, nil
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

func (in *kafkaFranzInput) batchOf(claims []kfiClaim) service.MessageBatch {
	n := 0
	for _, c := range claims {
		n += len(c.records)
	}
	batch := make(service.MessageBatch, 0, n)
	for _, c := range claims {
		for _, r := range c.records {
			msg := service.NewMessage(r.Value)
			// Headers first, so a header cannot pass itself off as one
			// of the record's coordinates.
			for _, h := range r.Headers {
				msg.MetaSetMut(h.Key, string(h.Value))
			}
			msg.MetaSetMut(kfiMetaKey, string(r.Key))
			msg.MetaSetMut(kfiMetaTopic, r.Topic)
			msg.MetaSetMut(kfiMetaPartition, strconv.FormatInt(int64(r.Partition), 10))
			msg.MetaSetMut(kfiMetaOffset, strconv.FormatInt(r.Offset, 10))
			msg.MetaSetMut(kfiMetaTimestamp, strconv.FormatInt(r.Timestamp.UnixMilli(), 10))
			batch = append(batch, msg)
		}
	}
	return batch
}

func (in *kafkaFranzInput) ackFunc(claims []kfiClaim) service.AckFunc {
	var once sync.Once
	return func(_ context.Context, err error) error {
		once.Do(func() { in.resolve(claims, err) })
		return nil
	}
}

func (in *kafkaFranzInput) resolve(claims []kfiClaim, ackErr error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	current := in.tracker.resolve(claims, ackErr != nil, time.Now())
	for _, p := range current {
		in.maybeResumeLocked(p)
		in.reportLagLocked(p)
	}
	if ackErr != nil && len(current) > 0 && !in.closing {
		in.log.Warnf("kafka_franz: batch of group %s nacked, delivering its records again: %v", in.group, ackErr)
	}
	in.notifyLocked()
}

// notifyLocked wakes everyone waiting for the tracker to change.
func (in *kafkaFranzInput) notifyLocked() {
	close(in.changed)
	in.changed = make(chan struct{})
}

func (in *kafkaFranzInput) maybeResumeLocked(p *kfiPartition) {
	if p.paused && p.unacked() < in.checkpointLimit && in.client != nil {
		in.client.ResumeFetchPartitions(map[string][]int32{p.tp.topic: {p.tp.partition}})
		p.paused = false
	}
}

func (in *kafkaFranzInput) reportLagLocked(p *kfiPartition) {
	pos := p.position()
	if pos < 0 || p.highWater < 0 {
		return
	}
	in.lag.Set(max(p.highWater-pos, 0), p.tp.topic, strconv.FormatInt(int64(p.tp.partition), 10), in.group)
}

// pollLoop moves fetched records into the tracker. It owns polling: it is
// the only caller of PollRecords and AllowRebalance while the input runs.
func (in *kafkaFranzInput) pollLoop(ctx context.Context, cl *kgo.Client) {
	defer in.loops.Done()
	// A canceled poll still counts as a poller; let the final leave run.
	defer cl.AllowRebalance()
	for {
		room, ok := in.waitForRoom(ctx)
		if !ok {
			return
		}
		fetches := cl.PollRecords(ctx, min(room, kfiPollRecords))
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return
		}
		failed := false
		fetches.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
				return
			}
			failed = true
			in.log.Errorf("kafka_franz: fetching %s/%d for group %s: %v", topic, partition, in.group, err)
		})
		in.mu.Lock()
		got := 0
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if fp.Err != nil || len(fp.Records) == 0 {
				return
			}
			got += len(fp.Records)
			p := in.tracker.add(kfiTopicPartition{fp.Topic, fp.Partition}, fp.Records, fp.HighWatermark)
			if !p.paused && p.unacked() >= in.checkpointLimit {
				cl.PauseFetchPartitions(map[string][]int32{fp.Topic: {fp.Partition}})
				p.paused = true
			}
			in.reportLagLocked(p)
		})
		if got > 0 {
			in.notifyLocked()
		}
		in.mu.Unlock()
		cl.AllowRebalance()
		if failed && got == 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(kfiPollErrorPause):
			}
		}
	}
}

// waitForRoom blocks while max_buffered_records records wait to be handed
// out and returns how many more may be polled; false once ctx ends. Not
// polling is what bounds memory: the client fetches again only after its
// buffered response has been polled.
func (in *kafkaFranzInput) waitForRoom(ctx context.Context) (int, bool) {
	for {
		in.mu.Lock()
		room := in.tracker.room()
		changed := in.changed
		in.mu.Unlock()
		if room > 0 {
			return room, true
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-changed:
		}
	}
}

// bufferedRecords is how many fetched records wait to be handed out.
func (in *kafkaFranzInput) bufferedRecords() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.tracker.buffered
}

// commitLoop commits acked offsets and refreshes the lag gauge every
// commit_period until ctx ends.
func (in *kafkaFranzInput) commitLoop(ctx context.Context, cl *kgo.Client) {
	defer in.loops.Done()
	tick := time.NewTicker(in.commitPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		in.commitMu.Lock()
		in.mu.Lock()
		commits := in.tracker.commits(nil)
		in.mu.Unlock()
		err := in.commit(ctx, cl, commits)
		in.commitMu.Unlock()
		if err != nil && ctx.Err() == nil {
			// The next tick retries: offsets only ever grow.
			in.log.Warnf("kafka_franz: %v", err)
		}
		in.refreshLag(ctx, cl)
	}
}

// commit sends the offsets and records which ones the group took. The
// caller holds commitMu.
func (in *kafkaFranzInput) commit(ctx context.Context, cl *kgo.Client, commits []kfiCommit) error {
	if len(commits) == 0 {
		return nil
	}
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for _, c := range commits {
		if offsets[c.part.tp.topic] == nil {
			offsets[c.part.tp.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[c.part.tp.topic][c.part.tp.partition] = kgo.EpochOffset{Epoch: c.epoch, Offset: c.offset}
	}
	cctx, cancel := context.WithTimeout(ctx, kfiCommitTimeout)
	defer cancel()
	var (
		commitErr error
		done      = map[kfiTopicPartition]bool{}
	)
	cl.CommitOffsetsSync(cctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			commitErr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
					commitErr = fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, perr)
					continue
				}
				done[kfiTopicPartition{t.Topic, p.Partition}] = true
			}
		}
	})
	in.mu.Lock()
	for _, c := range commits {
		if done[c.part.tp] && c.offset > c.part.committed {
			c.part.committed = c.offset
		}
	}
	in.mu.Unlock()
	if commitErr != nil {
		return fmt.Errorf("committing offsets of %d partitions for group %s: %w", len(commits), in.group, commitErr)
	}
	return nil
}

// refreshLag reads the partitions' end offsets, because a paused or idle
// partition has no fetch to carry its high watermark.
func (in *kafkaFranzInput) refreshLag(ctx context.Context, cl *kgo.Client) {
	in.mu.Lock()
	topicSet := map[string]bool{}
	for tp := range in.tracker.parts {
		topicSet[tp.topic] = true
	}
	in.mu.Unlock()
	if len(topicSet) == 0 {
		return
	}
	topics := make([]string, 0, len(topicSet))
	for t := range topicSet {
		topics = append(topics, t)
	}
	lctx, cancel := context.WithTimeout(ctx, kfiCommitTimeout)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(lctx, topics...)
	if err != nil {
		if ctx.Err() == nil {
			in.log.Debugf("kafka_franz: listing end offsets for the lag of group %s: %v", in.group, err)
		}
		return
	}
	committed := cl.CommittedOffsets()
	in.mu.Lock()
	defer in.mu.Unlock()
	ends.Each(func(o kadm.ListedOffset) {
		p := in.tracker.parts[kfiTopicPartition{o.Topic, o.Partition}]
		if p == nil || o.Err != nil {
			return
		}
		if o.Offset > p.highWater {
			p.highWater = o.Offset
		}
		if p.position() < 0 {
			// Nothing fetched yet: the group stands at its commit.
			if eo, ok := committed[o.Topic][o.Partition]; ok && eo.Offset >= 0 {
				in.lag.Set(max(p.highWater-eo.Offset, 0), o.Topic, strconv.FormatInt(int64(o.Partition), 10), in.group)
			}
			return
		}
		in.reportLagLocked(p)
	})
}

func (in *kafkaFranzInput) onAssigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	in.mu.Lock()
	for topic, parts := range assigned {
		for _, partition := range parts {
			in.tracker.assign(kfiTopicPartition{topic, partition})
		}
	}
	// A partition paused while we owned it before stays paused in the
	// client until resumed.
	cl.ResumeFetchPartitions(assigned)
	in.notifyLocked()
	in.mu.Unlock()
	in.log.Debugf("kafka_franz: group %s assigned %v", in.group, assigned)
}

// onRevoked lets partitions go in a rebalance or on leaving: it waits (up to
// revoke_wait) for their batches in flight, commits what was acked, and
// forgets them so that later acks commit nothing.
func (in *kafkaFranzInput) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	tps := kfiFlatten(revoked)
	if len(tps) == 0 {
		return
	}
	deadline := time.Now().Add(in.revokeWait)
	in.mu.Lock()
	for _, tp := range tps {
		if p := in.tracker.parts[tp]; p != nil {
			// Hand out nothing more of a partition on its way out.
			p.revoking = true
		}
	}
	for !in.closing && in.tracker.inFlight(tps) > 0 {
		wait := time.Until(deadline)
		if wait <= 0 {
			break
		}
		changed := in.changed
		in.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		in.mu.Lock()
		if ctx.Err() != nil {
			break
		}
	}
	stuck := in.tracker.inFlight(tps)
	closing := in.closing
	in.mu.Unlock()
	if stuck > 0 && !closing {
		in.log.Warnf("kafka_franz: group %s gave up %d partitions with a batch still unacked after %s; the next owner delivers those records again", in.group, stuck, in.revokeWait)
	}

	in.commitMu.Lock()
	defer in.commitMu.Unlock()
	only := map[kfiTopicPartition]bool{}
	for _, tp := range tps {
		only[tp] = true
	}
	in.mu.Lock()
	commits := in.tracker.commits(only)
	for _, tp := range tps {
		if p := in.tracker.drop(tp); p != nil {
			in.lag.Set(0, tp.topic, strconv.FormatInt(int64(tp.partition), 10), in.group)
		}
	}
	cl.ResumeFetchPartitions(revoked)
	in.notifyLocked()
	in.mu.Unlock()
	if err := in.commit(ctx, cl, commits); err != nil && ctx.Err() == nil {
		in.log.Errorf("kafka_franz: on revoke: %v; the next owner delivers those records again", err)
	}
	in.log.Debugf("kafka_franz: group %s revoked %v", in.group, revoked)
}

// onLost forgets partitions the group took away without a revoke (session
// expired, fenced): committing for them would be refused, so nothing is.
func (in *kafkaFranzInput) onLost(_ context.Context, cl *kgo.Client, lost map[string][]int32) {
	tps := kfiFlatten(lost)
	if len(tps) == 0 {
		return
	}
	in.commitMu.Lock()
	defer in.commitMu.Unlock()
	in.mu.Lock()
	for _, tp := range tps {
		if p := in.tracker.drop(tp); p != nil {
			in.lag.Set(0, tp.topic, strconv.FormatInt(int64(tp.partition), 10), in.group)
		}
	}
	cl.ResumeFetchPartitions(lost)
	in.notifyLocked()
	closing := in.closing
	in.mu.Unlock()
	if !closing {
		in.log.Warnf("kafka_franz: group %s lost %d partitions; their uncommitted records are delivered again", in.group, len(tps))
	}
}

// kfiClientLogger passes the client's own log lines on at debug level: they
// explain rebalances and fetch sessions when a group misbehaves.
type kfiClientLogger struct{ log *service.Logger }

func (l kfiClientLogger) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (l kfiClientLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	var b strings.Builder
	b.WriteString("kafka_franz client: ")
	b.WriteString(msg)
	for i := 0; i+1 < len(keyvals); i += 2 {
		fmt.Fprintf(&b, " %v=%v", keyvals[i], keyvals[i+1])
	}
	if level <= kgo.LogLevelWarn && level != kgo.LogLevelNone {
		l.log.Warnf("%s", b.String())
		return
	}
	l.log.Debugf("%s", b.String())
}

func kfiFlatten(m map[string][]int32) []kfiTopicPartition {
	var out []kfiTopicPartition
	for topic, parts := range m {
		for _, p := range parts {
			out = append(out, kfiTopicPartition{topic, p})
		}
	}
	return out
}

// Close commits what was acked and leaves the group. The engine calls it
// once no ack can arrive any more, so nothing in flight is waited for.
func (in *kafkaFranzInput) Close(ctx context.Context) error {
	in.connMu.Lock()
	defer in.connMu.Unlock()
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
