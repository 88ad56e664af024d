package redisspool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// spoolSink is a test output: it refuses every message whose content is in
// refuse (per message, as kafka_franz reports a timeout), or every message
// while down, and records what it took.
type spoolSink struct {
	mu     sync.Mutex
	down   bool
	refuse map[string]bool
	took   map[string]int
	// largest is the largest batch taken.
	largest int
}

var sink = &spoolSink{refuse: map[string]bool{}, took: map[string]int{}}

func init() {
	err := service.RegisterBatchOutput("spool_test_sink", service.NewConfigSpec(),
		func(*service.ParsedConfig, *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
			return sink, service.BatchPolicy{}, 1, nil
		})
	if err != nil {
		panic(err)
	}
}

func (s *spoolSink) Connect(context.Context) error { return nil }
func (s *spoolSink) Close(context.Context) error   { return nil }
func (s *spoolSink) WriteBatch(_ context.Context, b service.MessageBatch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errors.New("sink down")
	}
	s.largest = max(s.largest, len(b))
	var berr *service.BatchError
	for i, m := range b {
		v, _ := m.AsBytes()
		if s.refuse[string(v)] {
			if berr == nil {
				berr = service.NewBatchError(b, errors.New("some refused"))
			}
			berr = berr.Failed(i, errors.New("refused"))
			continue
		}
		s.took[string(v)]++
	}
	if berr != nil {
		return berr
	}
	return nil
}

func (s *spoolSink) set(down bool, refuse ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down, s.refuse, s.took, s.largest = down, map[string]bool{}, map[string]int{}, 0
	for _, r := range refuse {
		s.refuse[r] = true
	}
}

func (s *spoolSink) count() (int, map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.took {
		n += c
	}
	m := map[string]int{}
	for k, v := range s.took {
		m[k] = v
	}
	return n, m
}

func newTestSpool(t *testing.T, redisURL, prefix string, extra ...string) *redisSpool {
	t.Helper()
	conf, err := redisSpoolSpec().ParseYAML(fmt.Sprintf(`
url: %s
key_prefix: %q
max_wait: 500ms
stop_wait: 1s
replay_interval: 100ms
%s
output:
  spool_test_sink: {}
`, redisURL, prefix, strings.Join(extra, "\n")), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newRedisSpool(conf, service.MockResources())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func msgs(from, to int) service.MessageBatch {
	var b service.MessageBatch
	for i := from; i < to; i++ {
		b = append(b, service.NewMessage(fmt.Appendf(nil, `{"workspace_id":"w","external_id":"e-%d"}`, i)))
	}
	return b
}

// A message the output refuses individually (a BatchError) is written
// again, never taken for delivered; one refused past max_wait is parked and
// replayed once the output takes it: every message arrives exactly once.
func TestRedisSpoolRefusedMessagesAreNotDropped(t *testing.T) {
	r := testenv.PrivateRedis(t)
	refused := `{"workspace_id":"w","external_id":"e-3"}`
	sink.set(false, refused)
	s := newTestSpool(t, r.URL(), "t1:")
	if err := s.WriteBatch(context.Background(), msgs(0, 10)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // past max_wait: e-3 is parked
	sink.mu.Lock()
	sink.refuse = map[string]bool{}
	sink.mu.Unlock()
	if !poll(10*time.Second, func() bool { n, _ := sink.count(); return n == 10 }) {
		n, _ := sink.count()
		t.Fatalf("the output took %d of 10", n)
	}
	_, took := sink.count()
	if took[refused] != 1 {
		t.Errorf("the refused message was delivered %d times, want 1 (through the spool)", took[refused])
	}
	_ = s.Close(context.Background())
}

// Close with the output down parks exactly what was not delivered; a new
// spool replays it all.
func TestRedisSpoolCloseParksTheBuffer(t *testing.T) {
	r := testenv.PrivateRedis(t)
	sink.set(true)
	s := newTestSpool(t, r.URL(), "t2:")
	if err := s.WriteBatch(context.Background(), msgs(0, 50)); err != nil {
		t.Fatal(err)
	}
	_ = s.Close(context.Background())
	c, _ := redisOpenTest(r.URL())
	defer c.Close()
	if n := c.LLen(context.Background(), "t2:spool:{decisions}").Val(); n != 50 {
		t.Fatalf("spool holds %d after Close, want 50", n)
	}
	sink.set(false)
	s2 := newTestSpool(t, r.URL(), "t2:")
	defer s2.Close(context.Background())
	if !poll(10*time.Second, func() bool { n, _ := sink.count(); return n == 50 }) {
		n, _ := sink.count()
		t.Fatalf("replayed %d of 50", n)
	}
	if !poll(5*time.Second, func() bool { return c.LLen(context.Background(), "t2:spool:{decisions}").Val() == 0 }) {
		t.Fatal("the spool was not emptied after the replay")
	}
}

// The replay is paced: never more than replay_rate entries a second, in
// chunks of a tenth of that, so a big spool does not take the CPU and the
// broker all at once when Kafka is back; it still replays everything.
func TestRedisSpoolReplayIsPaced(t *testing.T) {
	r := testenv.PrivateRedis(t)
	sink.set(true)
	s := newTestSpool(t, r.URL(), "t3:", "replay_rate: 1000")
	if err := s.WriteBatch(context.Background(), msgs(0, 600)); err != nil {
		t.Fatal(err)
	}
	_ = s.Close(context.Background()) // the output is down: all 600 parked
	sink.set(false)
	start := time.Now()
	s2 := newTestSpool(t, r.URL(), "t3:", "replay_rate: 1000")
	defer s2.Close(context.Background())
	time.Sleep(200 * time.Millisecond)
	// An upper bound only: a slow machine replays less, never more.
	if n, _ := sink.count(); float64(n) > 1000*time.Since(start).Seconds()+100 {
		t.Errorf("%d replayed within %v at replay_rate 1000/s", n, time.Since(start))
	}
	if !poll(10*time.Second, func() bool { n, _ := sink.count(); return n == 600 }) {
		n, _ := sink.count()
		t.Fatalf("replayed %d of 600", n)
	}
	sink.mu.Lock()
	largest := sink.largest
	sink.mu.Unlock()
	if largest > 100 {
		t.Errorf("a replay chunk of %d entries, want at most a tenth of replay_rate (100)", largest)
	}
}

func poll(within time.Duration, done func() bool) bool {
	end := time.Now().Add(within)
	for time.Now().Before(end) {
		if done() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return done()
}

func redisOpenTest(url string) (*goredis.Client, error) {
	opt, err := goredis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return goredis.NewClient(opt), nil
}

// One replayer per spool: while another process holds the replay lock
// nothing is replayed here; once its lock runs out this process takes it,
// replays everything, and releases it.
func TestRedisSpoolReplaysOnlyWhileHoldingTheLock(t *testing.T) {
	url := testenv.RedisURL(t)
	prefix := fmt.Sprintf("sptest:spool:lock:%d:", time.Now().UnixNano())
	client, err := redisOpenTest(url)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	lockKey := prefix + SpoolKey + spoolLockSuffix
	t.Cleanup(func() { client.Del(ctx, prefix+SpoolKey, lockKey) })

	sink.set(true)
	s := newTestSpool(t, url, prefix)
	if err := s.WriteBatch(ctx, msgs(0, 50)); err != nil {
		t.Fatal(err)
	}
	_ = s.Close(ctx) // the output is down: all 50 parked
	if err := client.Set(ctx, lockKey, "another-process", 1500*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	sink.set(false)
	s2 := newTestSpool(t, url, prefix)
	defer s2.Close(ctx)
	time.Sleep(time.Second) // ten replay rounds, all while the other holds the lock
	if n, _ := sink.count(); n != 0 {
		t.Fatalf("%d replayed while another process held the replay lock", n)
	}
	if !poll(10*time.Second, func() bool { n, _ := sink.count(); return n == 50 }) {
		n, _ := sink.count()
		t.Fatalf("replayed %d of 50 after the other process's lock ran out", n)
	}
	if !poll(5*time.Second, func() bool { return client.Exists(ctx, lockKey).Val() == 0 }) {
		t.Errorf("the replay lock is still held after the spool was replayed: %q", client.Get(ctx, lockKey).Val())
	}
}

// What Park puts in a spool (with its metadata) is replayed by a redis_spool
// of the same key_prefix like anything it parked itself: the decision API
// parks what the engine dropped at a stop this way.
func TestParkIsReplayedBySpool(t *testing.T) {
	r := testenv.PrivateRedis(t)
	c, _ := redisOpenTest(r.URL())
	defer c.Close()
	batch := msgs(0, 20)
	for _, m := range batch {
		m.MetaSetMut("ingest_key", "w:acc")
	}
	batch = append(batch, service.NewMessage([]byte("not json")))
	n, err := Park(context.Background(), c, "t5:", batch)
	if err != nil || n != 21 {
		t.Fatalf("Park: %d entries, %v; want 21", n, err)
	}
	sink.set(false)
	s := newTestSpool(t, r.URL(), "t5:")
	defer s.Close(context.Background())
	if !poll(10*time.Second, func() bool { n, _ := sink.count(); return n == 21 }) {
		n, _ := sink.count()
		t.Fatalf("replayed %d of 21", n)
	}
	_, took := sink.count()
	for _, m := range batch {
		v, _ := m.AsBytes()
		if took[string(v)] != 1 {
			t.Errorf("%s replayed %d times, want 1", v, took[string(v)])
		}
	}
	if !poll(5*time.Second, func() bool { return c.LLen(context.Background(), "t5:spool:{decisions}").Val() == 0 }) {
		t.Fatal("the spool was not emptied after the replay")
	}
}
