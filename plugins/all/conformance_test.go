package all_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	_ "github.com/speculapro/speculapro/plugins/all"
)

const (
	// The engine's own connection counters, which every input and output
	// gets (prefixed input or output): a Connect that failed, one that
	// succeeded, and a Read or Write that returned service.ErrNotConnected.
	metricConnFailed = "_connection_failed"
	metricConnUp     = "_connection_up"
	metricConnLost   = "_connection_lost"

	// stepWait bounds a write or read of one message; once the service
	// answers again it includes the engine's reconnect backoff (at most a
	// few seconds).
	stepWait = 60 * time.Second
	// closeWait bounds Close (the engine's stop), with every component's
	// own stop waits set short in its YAML.
	closeWait = 20 * time.Second
)

// lostWith is what a component does while its service is lost.
type lostWith int

const (
	// lostNotConnected: its Read or Write returns service.ErrNotConnected,
	// and the engine connects again (Connect checks the service) and
	// retries the message until the service answers.
	lostNotConnected lostWith = iota
	// lostWriteFails: the write fails on its own bound (kafka_franz's
	// timeout, so the ingest API answers retry on time); the client
	// reconnects by itself.
	lostWriteFails
	// lostTaken: the write is taken regardless (redis_spool keeps what
	// Redis refuses in memory).
	lostTaken
	// lostRiddenOut: the read waits; the client reconnects by itself and
	// reads on.
	lostRiddenOut
)

// connectionCounts is a metrics exporter that keeps the engine's
// connection counters, summed over labels, so a test sees the engine's
// reconnect path.
type connectionCounts struct {
	mu sync.Mutex
	n  map[string]int64
}

type countingMetric struct {
	c    *connectionCounts
	name string
}

func (m countingMetric) Incr(n int64) {
	m.c.mu.Lock()
	m.c.n[m.name] += n
	m.c.mu.Unlock()
}
func (countingMetric) Timing(int64) {}
func (countingMetric) Set(int64)    {}

func (c *connectionCounts) NewCounterCtor(name string, _ ...string) service.MetricsExporterCounterCtor {
	return func(...string) service.MetricsExporterCounter { return countingMetric{c, name} }
}

func (c *connectionCounts) NewTimerCtor(name string, _ ...string) service.MetricsExporterTimerCtor {
	return func(...string) service.MetricsExporterTimer { return countingMetric{c, name} }
}

func (c *connectionCounts) NewGaugeCtor(name string, _ ...string) service.MetricsExporterGaugeCtor {
	return func(...string) service.MetricsExporterGauge { return countingMetric{c, name} }
}

func (*connectionCounts) Close(context.Context) error { return nil }

func (c *connectionCounts) get(name string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

// waitFor polls until get(name) reaches want or stepWait passes.
func (c *connectionCounts) waitFor(t *testing.T, name string, want int64, why string) {
	t.Helper()
	deadline := time.Now().Add(stepWait)
	for c.get(name) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s stayed at %d within %v, want at least %d", why, name, c.get(name), stepWait, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// streamUnderTest is one component in a stream of its own, built from its
// YAML by the engine, with the test producing into an output or consuming
// from an input.
type streamUnderTest struct {
	stream  *service.Stream
	counts  *connectionCounts
	produce service.MessageBatchHandlerFunc // outputs
	read    chan service.MessageBatch       // inputs
	done    chan error
}

// startStream builds the component (conf is an input's or an output's YAML)
// and runs it.
func startStream(t *testing.T, conf string, isInput bool) *streamUnderTest {
	t.Helper()
	s := &streamUnderTest{counts: &connectionCounts{n: map[string]int64{}}, done: make(chan error, 1)}
	env := service.NewEnvironment()
	if err := env.RegisterMetricsExporter("connection_counts", service.NewConfigSpec(),
		func(*service.ParsedConfig, *service.Logger) (service.MetricsExporter, error) { return s.counts, nil }); err != nil {
		t.Fatal(err)
	}
	b := env.NewStreamBuilder()
	b.SetLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.SetMetricsYAML("connection_counts: {}"))
	var err error
	if isInput {
		s.read = make(chan service.MessageBatch, 16)
		must(b.AddInputYAML(conf))
		must(b.AddBatchConsumerFunc(func(_ context.Context, batch service.MessageBatch) error {
			s.read <- batch.Copy()
			return nil
		}))
	} else {
		must(b.AddOutputYAML(conf))
		s.produce, err = b.AddBatchProducerFunc()
		must(err)
	}
	if s.stream, err = b.Build(); err != nil {
		t.Fatalf("building the stream from\n%s\n: %v", conf, err)
	}
	go func() { s.done <- s.stream.Run(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeWait)
		defer cancel()
		_ = s.stream.Stop(ctx)
	})
	return s
}

// write produces batch and returns the outcome the engine reports, or an
// error when none came within bound.
func (s *streamUnderTest) write(batch service.MessageBatch, bound time.Duration) error {
	res := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	go func() { res <- s.produce(ctx, batch) }()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return errNoAnswer
	}
}

var errNoAnswer = errors.New("no answer within the bound")

// readOne waits for the next batch.
func (s *streamUnderTest) readOne(t *testing.T, why string) service.MessageBatch {
	t.Helper()
	select {
	case b := <-s.read:
		return b
	case <-time.After(stepWait):
		t.Fatalf("%s: nothing read within %v", why, stepWait)
		return nil
	}
}

// stop stops the stream, which closes the component, and fails t when that
// takes longer than closeWait.
func (s *streamUnderTest) stop(t *testing.T) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	if err := s.stream.Stop(ctx); err != nil {
		t.Fatalf("stopping: %v after %v", err, time.Since(start).Round(time.Millisecond))
	}
	if took := time.Since(start); took > closeWait {
		t.Fatalf("Close took %v, want at most %v", took, closeWait)
	}
}

// serviceProxy forwards loopback TCP connections to one service, and can
// cut them (every open connection closed, new ones closed at once) and
// restore them, so a test loses only its own connection to a shared
// service.
type serviceProxy struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newServiceProxy(t *testing.T, target string) *serviceProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &serviceProxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	// The accept loop ends when the listener is closed (cleanup), and
	// cleanup waits for it and every connection's copy.
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// Addr is the address to point the component at.
func (p *serviceProxy) Addr() string { return p.ln.Addr().String() }

func (p *serviceProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.isCut() {
			_ = c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.track(c, up)
	}
}

func (p *serviceProxy) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// track copies both ways until either side closes or Cut closes both.
func (p *serviceProxy) track(c, up net.Conn) {
	p.mu.Lock()
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		defer p.wg.Done()
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}
	p.wg.Add(2)
	go pipe(c, up)
	go pipe(up, c)
}

// Cut closes every connection and refuses new ones until Restore.
func (p *serviceProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Restore forwards new connections again.
func (p *serviceProxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}
