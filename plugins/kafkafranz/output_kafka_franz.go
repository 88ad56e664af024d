package kafkafranz

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/kafkaconf"
)

const (
	kfoFieldTopic           = "topic"
	kfoFieldKey             = "key"
	kfoFieldMetadata        = "metadata"
	kfoFieldIncludePrefixes = "include_prefixes"
	kfoFieldIncludePatterns = "include_patterns"
	kfoFieldExcludePrefixes = "exclude_prefixes"
	kfoFieldExcludePatterns = "exclude_patterns"
	kfoFieldCompression     = "compression"
	kfoFieldTimeout         = "timeout"
	kfoFieldClientID        = "client_id"
	kfoFieldBatching        = "batching"
	kfoFieldLinger          = "linger"

	// kfoStickyBytes is how much an unkeyed partition receives before the
	// partitioner moves on, the Java client's batch.size default.
	kfoStickyBytes = 16 << 10
	// kfoCheckTimeout bounds the connection check in Connect, so a broker
	// that is down does not keep the output from taking (and timing out)
	// writes.
	kfoCheckTimeout = 5 * time.Second
)

// long: the component's config spec, one field after another as its documentation page lists them
func kfoSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("Writes batches of messages to Kafka with franz-go: key, headers from metadata, acks=all with the idempotent producer, and a delivery timeout.").
		Description(`
Every write waits for all in-sync replicas (`+"`acks=all`"+`) and uses the idempotent producer, so a
retried write is not duplicated within a partition. A message that Kafka has not taken within `+"`timeout`"+`
fails (it is nacked and the engine retries or reports it) instead of waiting forever.

Keyed messages are assigned partitions exactly like the Java client's default partitioner (murmur2 of the
key, made positive, modulo the partition count), so a key lands on the same partition whichever client
wrote it. Messages without a key (an empty `+"`key`"+`) are spread over partitions in sticky batches.

### Headers

Headers come from message metadata: a metadata key becomes a header when it matches `+"`metadata.include_prefixes`"+`
or `+"`metadata.include_patterns`"+` and matches neither `+"`metadata.exclude_prefixes`"+` nor
`+"`metadata.exclude_patterns`"+`. Nothing is included by default. The exclusions default to `+"`kafka_`"+`,
so the metadata the `+"`kafka_franz`"+` input adds about where a record came from (`+"`kafka_key`"+`,
`+"`kafka_topic`"+`, `+"`kafka_partition`"+`, `+"`kafka_offset`"+`, `+"`kafka_timestamp_ms`"+`) is
never written back as headers, while the record's own headers are (with `+"`include_patterns: [ '.*' ]`"+`).

### Dead letters

With the `+"`kafka_franz`"+` input, `+"`key: ${! @kafka_key }`"+`, `+"`topic: ${! @kafka_topic }.dlq`"+`
and `+"`metadata: {include_patterns: [ '.*' ]}`"+` write a record back to its topic's `+"`.dlq`"+` twin with
its original key, value and headers; see `+"`config/examples/dlq.yaml`"+`.

### Connection

`+"`seed_brokers`"+`, `+"`tls`"+` and `+"`sasl`"+` default to the `+"`SP_KAFKA_*`"+` settings. TLS 1.2 is
the minimum; SASL `+"`PLAIN`"+` without TLS is refused at start.`).
		Fields(kafkaconf.Fields()...).
		Fields(
			service.NewInterpolatedStringField(kfoFieldTopic).
				Description("The topic to write each message to.").
				Examples("sp.txn.ingested", `${! meta("kafka_topic") }.dlq`),
			service.NewInterpolatedStringField(kfoFieldKey).
				Description("The key of each message. Empty means no key. Write the `kafka_franz` input's key back with `${! @kafka_key }`, which is empty for a record without a key (`meta(\"kafka_key\")` renders an empty or absent key as `null`).").
				Examples(`${! json("workspace_id") }:${! json("account_external_id") }`, `${! @kafka_key }`).
				Default(""),
			service.NewObjectField(kfoFieldMetadata,
				service.NewStringListField(kfoFieldIncludePrefixes).
					Description("Metadata keys with any of these prefixes become headers.").
					Example([]string{"sp_"}).Default([]any{}),
				service.NewStringListField(kfoFieldIncludePatterns).
					Description("Metadata keys matching any of these regular expressions become headers.").
					Example([]string{".*"}).Default([]any{}),
				service.NewStringListField(kfoFieldExcludePrefixes).
					Description("Metadata keys with any of these prefixes never become headers, even when included.").
					Default([]any{"kafka_"}),
				service.NewStringListField(kfoFieldExcludePatterns).
					Description("Metadata keys matching any of these regular expressions never become headers, even when included.").
					Default([]any{}),
			).Description("Which metadata becomes record headers."),
			service.NewStringEnumField(kfoFieldCompression, "none", "gzip", "snappy", "lz4", "zstd").
				Description("Compression of the record batches.").
				Default("none"),
			service.NewDurationField(kfoFieldTimeout).
				Description("How long a write may wait for Kafka to take it before it fails (and is nacked). Kafka taking a write means all in-sync replicas have it.").
				Default("10s"),
			service.NewDurationField(kfoFieldLinger).
				Description("How long a partition's records wait for more before the producer sends them (franz-go's ProducerLinger): longer gathers more records a produce request, shorter answers sooner.").
				Advanced().Default("10ms"),
			service.NewStringField(kfoFieldClientID).
				Description("The client ID the brokers see, for their logs and quotas.").
				Advanced().Default("speculapro"),
			service.NewOutputMaxInFlightField().Default(10),
			service.NewBatchPolicyField(kfoFieldBatching),
		).
		Example("Transactions keyed by account", "", `
output:
  kafka_franz:
    topic: ${SP_KAFKA_TOPIC_PREFIX:sp.}txn.ingested
    key: ${! json("workspace_id") }:${! json("account_external_id") }
    timeout: 10s
    batching:
      count: 500
      period: 5ms
`)
}

func init() {
	err := service.RegisterBatchOutput("kafka_franz", kfoSpec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (out service.BatchOutput, policy service.BatchPolicy, maxInFlight int, err error) {
			if maxInFlight, err = conf.FieldMaxInFlight(); err != nil {
				return
			}
			if policy, err = conf.FieldBatchPolicy(kfoFieldBatching); err != nil {
				return
			}
			out, err = newKfoWriter(conf, mgr)
			return
		})
	if err != nil {
		panic(err)
	}
}

// kfoHeaderFilter decides which metadata keys become headers.
type kfoHeaderFilter struct {
	includePrefixes []string
	includePatterns []*regexp.Regexp
	excludePrefixes []string
	excludePatterns []*regexp.Regexp
}

// includes reports whether any metadata key can become a header: with no
// inclusions none can, and the metadata is not walked.
func (f kfoHeaderFilter) includes() bool {
	return len(f.includePrefixes) > 0 || len(f.includePatterns) > 0
}

func (f kfoHeaderFilter) match(key string) bool {
	return kfoMatches(key, f.includePrefixes, f.includePatterns) &&
		!kfoMatches(key, f.excludePrefixes, f.excludePatterns)
}

func kfoMatches(key string, prefixes []string, patterns []*regexp.Regexp) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	for _, re := range patterns {
		if re.MatchString(key) {
			return true
		}
	}
	return false
}

// kfoPartitioner is the Java client's default for keyed records (murmur2 of
// the key, high bit cleared, modulo the partition count; KafkaHasher in
// franz-go) and KIP-794's uniform sticky batches for records without a key.
func kfoPartitioner() kgo.Partitioner {
	return kgo.UniformBytesPartitioner(kfoStickyBytes, true, true, nil)
}

type kfoWriter struct {
	conn        kafkaconf.Config
	topic       *service.InterpolatedString
	key         *service.InterpolatedString
	topicRef    *kfoMetaRef // set when topic is a prefix and one metadata value
	keyRef      *kfoMetaRef // the same for key
	headers     kfoHeaderFilter
	compression kgo.CompressionCodec
	timeout     time.Duration
	linger      time.Duration
	clientID    string

	log      *service.Logger
	timedOut *service.MetricCounter

	mu     sync.RWMutex
	client *kgo.Client
}

func newKfoWriter(conf *service.ParsedConfig, mgr *service.Resources) (*kfoWriter, error) {
	w := &kfoWriter{
		log:      mgr.Logger(),
		timedOut: mgr.Metrics().NewCounter("kafka_franz_output_timed_out"),
	}
	var err error
	if w.conn, err = kafkaconf.FromParsed(conf); err != nil {
		return nil, err
	}
	if w.topic, err = conf.FieldInterpolatedString(kfoFieldTopic); err != nil {
		return nil, err
	}
	if topicStr, _ := conf.FieldString(kfoFieldTopic); topicStr != "" {
		w.topicRef = parseKfoMetaRef(topicStr)
	}
	if keyStr, _ := conf.FieldString(kfoFieldKey); keyStr != "" {
		if w.key, err = conf.FieldInterpolatedString(kfoFieldKey); err != nil {
			return nil, err
		}
		w.keyRef = parseKfoMetaRef(keyStr)
	}
	if w.headers, err = kfoHeaderFilterFromParsed(conf.Namespace(kfoFieldMetadata)); err != nil {
		return nil, err
	}
	codec, err := conf.FieldString(kfoFieldCompression)
	if err != nil {
		return nil, err
	}
	switch codec {
	case "none":
		w.compression = kgo.NoCompression()
	case "gzip":
		w.compression = kgo.GzipCompression()
	case "snappy":
		w.compression = kgo.SnappyCompression()
	case "lz4":
		w.compression = kgo.Lz4Compression()
	case "zstd":
		w.compression = kgo.ZstdCompression()
	default:
		return nil, fmt.Errorf("compression %q: use none, gzip, snappy, lz4 or zstd", codec)
	}
	if w.timeout, err = conf.FieldDuration(kfoFieldTimeout); err != nil {
		return nil, err
	}
	if w.timeout <= 0 {
		return nil, fmt.Errorf("timeout %v: must be positive", w.timeout)
	}
	if w.clientID, err = conf.FieldString(kfoFieldClientID); err != nil {
		return nil, err
	}
	if w.linger, err = conf.FieldDuration(kfoFieldLinger); err != nil {
		return nil, err
	}
	if w.linger < 0 {
		return nil, fmt.Errorf("linger %v: must not be negative", w.linger)
	}
	return w, nil
}

func kfoHeaderFilterFromParsed(conf *service.ParsedConfig) (kfoHeaderFilter, error) {
	var f kfoHeaderFilter
	var err error
	if f.includePrefixes, err = conf.FieldStringList(kfoFieldIncludePrefixes); err != nil {
		return f, err
	}
	if f.excludePrefixes, err = conf.FieldStringList(kfoFieldExcludePrefixes); err != nil {
		return f, err
	}
	for _, p := range []struct {
		field string
		dst   *[]*regexp.Regexp
	}{{kfoFieldIncludePatterns, &f.includePatterns}, {kfoFieldExcludePatterns, &f.excludePatterns}} {
		pats, err := conf.FieldStringList(p.field)
		if err != nil {
			return f, err
		}
		for _, s := range pats {
			re, err := regexp.Compile(s)
			if err != nil {
				return f, fmt.Errorf("metadata.%s %q: %w", p.field, s, err)
			}
			*p.dst = append(*p.dst, re)
		}
	}
	return f, nil
}

// Connect builds the producer and checks that a broker lets us in. A broker
// that cannot be reached is only a warning: writes are then taken and fail
// after `timeout` each, which is what callers waiting on them (the ingest
// API answers `retry`) need, rather than the engine holding them while it
// reconnects. A broker that refuses us (TLS, SASL) is an error, because no
// write can ever succeed.
func (w *kfoWriter) Connect(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.client != nil {
		return nil
	}
	opts, err := w.conn.ClientOpts()
	if err != nil {
		return err
	}
	opts = append(opts,
		kgo.ClientID(w.clientID),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(w.compression),
		kgo.RecordPartitioner(kfoPartitioner()),
		kgo.ProducerLinger(w.linger),
		// The client gives up on its own too, so records a timed-out
		// write left behind do not pile up while the broker is away
		// (franz-go allows no less than a second).
		kgo.RecordDeliveryTimeout(max(w.timeout, time.Second)),
	)
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("creating Kafka producer: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, kfoCheckTimeout)
	defer cancel()
	if err := w.conn.Check(cctx, client); err != nil {
		var opErr *net.OpError
		if ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &opErr) && opErr.Op == "dial")) {
			w.log.Warnf("kafka_franz output: %v; writes will fail after %v until a broker answers", err, w.timeout)
		} else {
			client.Close()
			return err
		}
	}
	w.client = client
	return nil
}

// WriteBatch produces every message of the batch and waits until Kafka has
// taken each one or `timeout` has passed. Messages that failed or timed out
// are reported one by one, so the engine retries only those.
func (w *kfoWriter) WriteBatch(ctx context.Context, batch service.MessageBatch) error {
	w.mu.RLock()
	client := w.client
	w.mu.RUnlock()
	if client == nil {
		return service.ErrNotConnected
	}

	records, errs := w.records(batch)

	wctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	wait := newKfoWait(records, errs)
	// Bound once: a method value written in the loop allocates a closure
	// at every Produce.
	promise := wait.promise
	for _, r := range records {
		if r != nil {
			client.Produce(wctx, r, promise)
		}
	}
	answered, finished := wait.wait(wctx)
	if ctx.Err() != nil && !finished {
		// Shutting down: the engine decides what happens to the batch.
		return ctx.Err()
	}

	var berr *service.BatchError
	timedOut := 0
	for i, r := range records {
		err := errs[i]
		switch {
		case r == nil:
		case !answered[i] || errors.Is(err, context.DeadlineExceeded):
			timedOut++
			err = fmt.Errorf("writing to topic %s: Kafka did not take the message within %v: %w", r.Topic, w.timeout, context.DeadlineExceeded)
		case err != nil:
			err = fmt.Errorf("writing to topic %s: %w", r.Topic, err)
		}
		if err == nil {
			continue
		}
		if berr == nil {
			berr = service.NewBatchError(batch, err)
		}
		berr = berr.Failed(i, err)
	}
	if timedOut > 0 {
		w.timedOut.Incr(int64(timedOut))
	}
	if berr != nil {
		return berr
	}
	return nil
}

// kfoWait collects a batch's promises: one promise function and one wake-up
// a batch. A channel send a record and a closure a record (its index
// captured) woke the writing goroutine up to once a record and allocated
// 500 closures a 500-message batch; the record's place in the batch's one
// slab of records says which message it is.
type kfoWait struct {
	records  []*kgo.Record // records[i] is slab[i] or nil; keeps the slab alive
	base     uintptr       // &slab[0]
	size     uintptr       // unsafe.Sizeof(kgo.Record{})
	mu       sync.Mutex
	errs     []error // written by promises until closed
	answered []bool
	left     int
	closed   bool // the writer stopped waiting: promises write nothing more
	done     chan struct{}
}

func newKfoWait(records []*kgo.Record, errs []error) *kfoWait {
	wt := &kfoWait{records: records, errs: errs, answered: make([]bool, len(records)), done: make(chan struct{}), size: unsafe.Sizeof(kgo.Record{})}
	for i, r := range records {
		if r == nil {
			continue
		}
		if wt.left == 0 {
			// Records are consecutive in one slab (records), so the first
			// non-nil one, less its index, is where the slab starts.
			wt.base = uintptr(unsafe.Pointer(r)) - uintptr(i)*wt.size
		}
		wt.left++
	}
	if wt.left == 0 {
		close(wt.done)
	}
	return wt
}

// promise is franz-go's callback for every record of the batch.
func (wt *kfoWait) promise(r *kgo.Record, err error) {
	i := int((uintptr(unsafe.Pointer(r)) - wt.base) / wt.size)
	if i < 0 || i >= len(wt.records) || wt.records[i] != r {
		// Not from records' slab (records changed): found the slow way.
		i = slices.Index(wt.records, r)
	}
	wt.mu.Lock()
	defer wt.mu.Unlock()
	if wt.closed || i < 0 {
		return
	}
	wt.errs[i], wt.answered[i] = err, true
	if wt.left--; wt.left == 0 {
		close(wt.done)
	}
}

// wait returns, once every record is answered or ctx is done, which ones
// were answered and whether all were; promises arriving later are dropped.
func (wt *kfoWait) wait(ctx context.Context) (answered []bool, finished bool) {
	select {
	case <-wt.done:
	case <-ctx.Done():
	}
	wt.mu.Lock()
	defer wt.mu.Unlock()
	wt.closed = true
	return wt.answered, wt.left == 0
}

// kfoMetaRef is an interpolation that is a fixed prefix and one metadata
// value (`sp.${! @ingest_topic }`, `${! @kafka_key }`), read straight from
// the message when it is a string: the same text as the interpolation,
// without running Bloblang for every message (about 5 % of the ingest
// API's CPU). Any other value, or none, goes through the interpolation.
// records builds the batch's records: nil where a message's failed, with
// its error. The records are one allocation, not one each: franz-go holds
// a record until its promise, and the slice lives as long as any does.
func (w *kfoWriter) records(batch service.MessageBatch) ([]*kgo.Record, []error) {
	errs := make([]error, len(batch))
	records := make([]*kgo.Record, len(batch))
	slab := make([]kgo.Record, len(batch))
	ex := w.executors(batch)
	for i, msg := range batch {
		if errs[i] = w.record(ex, i, msg, &slab[i]); errs[i] == nil {
			records[i] = &slab[i]
		}
	}
	return records, errs
}

type kfoMetaRef struct {
	prefix, key string
}

var kfoMetaRefPattern = regexp.MustCompile(`^([^$]*)\$\{!\s*@([A-Za-z_][A-Za-z0-9_]*)\s*\}$`)

// parseKfoMetaRef returns the reference an interpolation is, or nil.
func parseKfoMetaRef(s string) *kfoMetaRef {
	m := kfoMetaRefPattern.FindStringSubmatch(s)
	if m == nil {
		return nil
	}
	return &kfoMetaRef{prefix: m[1], key: m[2]}
}

// raw is the metadata value msg holds, when it is a string.
func (r *kfoMetaRef) raw(msg *service.Message) (string, bool) {
	if r == nil {
		return "", false
	}
	v, ok := msg.MetaGetMut(r.key)
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	return s, ok
}

// kfoExecutors interpolate topic and key over one batch: the batch is
// converted for Bloblang once, not once per message (batch.
// TryInterpolatedString copies the whole batch on every call, which made a
// 500-message batch cost 500 × 500 copies).
type kfoExecutors struct {
	topic, key *service.MessageBatchInterpolationExecutor
	// lastTopic is the latest topic a metadata value made, kept so a
	// batch for one topic builds its name once.
	lastTopicValue, lastTopic string
}

func (w *kfoWriter) executors(batch service.MessageBatch) *kfoExecutors {
	ex := &kfoExecutors{topic: batch.InterpolationExecutor(w.topic)}
	if w.key != nil {
		ex.key = batch.InterpolationExecutor(w.key)
	}
	return ex
}

// topicOf is message i's topic.
func (w *kfoWriter) topicOf(ex *kfoExecutors, i int, msg *service.Message) (string, error) {
	if s, ok := w.topicRef.raw(msg); ok {
		if s != ex.lastTopicValue || ex.lastTopic == "" {
			ex.lastTopicValue, ex.lastTopic = s, w.topicRef.prefix+s
		}
		return ex.lastTopic, nil
	}
	return ex.topic.TryString(i)
}

// record builds the Kafka record of message i in r.
func (w *kfoWriter) record(ex *kfoExecutors, i int, msg *service.Message, r *kgo.Record) error {
	topic, err := w.topicOf(ex, i, msg)
	if err != nil {
		return fmt.Errorf("interpolating topic: %w", err)
	}
	if topic == "" {
		return errors.New("interpolating topic: empty topic name")
	}
	value, err := msg.AsBytes()
	if err != nil {
		return fmt.Errorf("reading message: %w", err)
	}
	*r = kgo.Record{Topic: topic, Value: value}
	if w.key != nil {
		key, ok := w.keyRef.raw(msg)
		if ok {
			key = w.keyRef.prefix + key
		} else {
			if key, err = ex.key.TryString(i); err != nil {
				return fmt.Errorf("interpolating key: %w", err)
			}
		}
		if key != "" {
			// The string's own bytes, not a copy: franz-go only reads a
			// record's key (partitioning, encoding).
			r.Key = unsafe.Slice(unsafe.StringData(key), len(key))
		}
	}
	if w.headers.includes() {
		_ = msg.MetaWalk(func(k, v string) error {
			if w.headers.match(k) {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
			}
			return nil
		})
		// Metadata has no order; sorted headers make equal messages equal records.
		sort.Slice(r.Headers, func(a, b int) bool { return r.Headers[a].Key < r.Headers[b].Key })
	}
	return nil
}

// Close stops the producer. Records it still buffers fail, which fails the
// writes waiting on them.
func (w *kfoWriter) Close(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.client != nil {
		w.client.Close()
		w.client = nil
	}
	return nil
}
