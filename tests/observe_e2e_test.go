package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/speculapro/speculapro/internal/testenv"
)

// Bounds of every wait in these tests; generous because the machine is shared.
const (
	observeReadyTimeout = 60 * time.Second
	observeExitTimeout  = 30 * time.Second
)

// observeSpanSink records, per receiver, the service.name of every span an
// in-test OTLP receiver was sent.
type observeSpanSink struct {
	mu       sync.Mutex
	services map[string]int // service.name -> spans
}

func (s *observeSpanSink) add(req *collectortrace.ExportTraceServiceRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.services == nil {
		s.services = map[string]int{}
	}
	for _, rs := range req.GetResourceSpans() {
		name := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				name = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			s.services[name] += len(ss.GetSpans())
		}
	}
}

func (s *observeSpanSink) spansOf(service string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.services[service]
}

func (s *observeSpanSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.services)
}

type observeGRPCReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	sink *observeSpanSink
}

func (r observeGRPCReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.sink.add(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// observeStartGRPCReceiver serves the OTLP trace service on loopback.
func observeStartGRPCReceiver(t *testing.T, sink *observeSpanSink) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, observeGRPCReceiver{sink: sink})
	go func() { _ = srv.Serve(lis) }() // ends with srv.Stop in cleanup
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// observeStartHTTPReceiver serves OTLP/HTTP (protobuf) at /v1/traces on loopback.
func observeStartHTTPReceiver(t *testing.T, sink *observeSpanSink) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sink.add(&req)
		resp, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	})}
	go func() { _ = srv.Serve(lis) }() // ends with srv.Close in cleanup
	t.Cleanup(func() { _ = srv.Close() })
	return lis.Addr().String()
}

// observeSyncBuffer collects the binary's output; the exec package writes it
// from its own goroutine while the test reads it.
type observeSyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *observeSyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *observeSyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// observeProcess is one running `speculapro run`.
type observeProcess struct {
	cmd    *exec.Cmd
	out    *observeSyncBuffer
	exited chan struct{}
	err    error
}

// observeRun writes yaml to <tmp>/pipeline.yaml and starts `speculapro run`
// on it; cleanup kills it if the test did not stop it.
func observeRun(t *testing.T, yaml string) *observeProcess {
	t.Helper()
	bin := testenv.Binary(t)
	path := filepath.Join(t.TempDir(), "pipeline.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &observeProcess{out: &observeSyncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, "run", path)
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting speculapro run: %v", err)
	}
	// The waiter owns cmd.Wait; it ends when the process does, which cleanup
	// forces with a kill if a test failed before interrupting it.
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("speculapro output:\n%s", p.out.String())
		}
	})
	return p
}

// interruptAndWait sends SIGINT as Ctrl-C would and requires a clean exit (0)
// within observeExitTimeout.
func (p *observeProcess) interruptAndWait(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("sending SIGINT: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(observeExitTimeout):
		t.Fatalf("speculapro still running %v after SIGINT", observeExitTimeout)
	}
	if p.err != nil {
		t.Fatalf("speculapro exited with %v after SIGINT, want exit code 0", p.err)
	}
}

// observeScrape fetches /metrics once; an error means not (yet) served.
func observeScrape(addr string) (string, error) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("/metrics answered %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		return "", fmt.Errorf("/metrics content type %q, want Prometheus text", ct)
	}
	return string(body), nil
}

// observeSample returns the value of the first sample of metric in a
// Prometheus text scrape (any labels), or an error when it is absent.
func observeSample(text, metric string) (float64, error) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		fields := strings.Fields(line)
		return strconv.ParseFloat(fields[len(fields)-1], 64)
	}
	return 0, fmt.Errorf("metric %s not in scrape", metric)
}

// observeWaitFor polls cond every 200ms until it holds or the timeout passes.
func observeWaitFor(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s: %v", timeout, what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

const observePipeline = `
http:
  address: %s
input:
  generate:
    interval: 20ms
    mapping: 'root = {"n": counter()}'
pipeline:
  processors:
    - mapping: |
        root = this
        root.doubled = this.n * 2
output:
  drop: {}
`

func TestObserveMetricsAndTracesEndToEnd(t *testing.T) {
	var grpcSink, httpSink observeSpanSink
	grpcAddr := observeStartGRPCReceiver(t, &grpcSink)
	httpAddr := observeStartHTTPReceiver(t, &httpSink)
	apiAddr := testenv.FreeAddr(t)

	yaml := fmt.Sprintf(observePipeline, apiAddr) + fmt.Sprintf(`
metrics:
  prometheus: {}
tracer:
  open_telemetry_collector:
    grpc:
      - address: %s
    http:
      - address: %s
`, grpcAddr, httpAddr)
	p := observeRun(t, yaml)

	var text string
	observeWaitFor(t, observeReadyTimeout, "engine metrics on /metrics", func() error {
		var err error
		if text, err = observeScrape(apiAddr); err != nil {
			return err
		}
		for _, m := range []string{"input_received", "output_sent"} {
			v, err := observeSample(text, m)
			if err != nil {
				return err
			}
			if v <= 0 {
				return fmt.Errorf("%s is %v, want > 0", m, v)
			}
		}
		return nil
	})
	for _, want := range []string{
		"# TYPE input_received counter",
		`input_received{label="",path="root.input"}`,
		`output_sent{label="",path="root.output"}`,
		`processor_received{label="",path="root.pipeline.processors.0"}`,
		"# TYPE output_latency_ns summary",
		"process_cpu_seconds_total",
		"process_resident_memory_bytes",
		"go_goroutines",
		"go_memstats_heap_alloc_bytes",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	observeWaitFor(t, observeReadyTimeout, "spans of service speculapro at both OTLP receivers", func() error {
		if grpcSink.spansOf("speculapro") == 0 {
			return fmt.Errorf("gRPC receiver has spans by service %v", grpcSink.String())
		}
		if httpSink.spansOf("speculapro") == 0 {
			return fmt.Errorf("HTTP receiver has spans by service %v", httpSink.String())
		}
		return nil
	})

	p.interruptAndWait(t)
}

func TestObserveDefaultMetricsIsPrometheus(t *testing.T) {
	apiAddr := testenv.FreeAddr(t)
	// No metrics section at all: the default must still serve Prometheus text.
	p := observeRun(t, fmt.Sprintf(observePipeline, apiAddr))

	observeWaitFor(t, observeReadyTimeout, "Prometheus text on /metrics with no metrics section", func() error {
		text, err := observeScrape(apiAddr)
		if err != nil {
			return err
		}
		if !strings.Contains(text, "# TYPE input_received counter") {
			return errors.New("no input_received counter in scrape")
		}
		if v, err := observeSample(text, "output_sent"); err != nil || v <= 0 {
			return fmt.Errorf("output_sent %v (%v), want > 0", v, err)
		}
		if _, err := observeSample(text, "go_goroutines"); err != nil {
			return err
		}
		return nil
	})

	p.interruptAndWait(t)
}

func TestObserveListNamesBothPlugins(t *testing.T) {
	bin := testenv.Binary(t)
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("speculapro %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	text := run("list", "metrics", "tracers")
	for _, want := range []string{"- prometheus", "- open_telemetry_collector"} {
		if !strings.Contains(text, want) {
			t.Errorf("speculapro list metrics tracers lacks %q:\n%s", want, text)
		}
	}

	var listed struct {
		Metrics []string `json:"metrics"`
		Tracers []string `json:"tracers"`
	}
	if err := json.Unmarshal([]byte(run("list", "--format", "json", "metrics", "tracers")), &listed); err != nil {
		t.Fatalf("decoding speculapro list --format json: %v", err)
	}
	if !slices.Contains(listed.Metrics, "prometheus") || !slices.Contains(listed.Tracers, "open_telemetry_collector") {
		t.Errorf("list --format json: metrics %v, tracers %v; want prometheus and open_telemetry_collector", listed.Metrics, listed.Tracers)
	}

	// The CUE form carries each field with its description.
	cue := run("list", "--format", "cue", "metrics", "tracers")
	for _, want := range []string{
		"use_histogram_timing?: bool",
		"histogram_buckets?:",
		"add_process_metrics?: bool",
		"add_go_metrics?: bool",
		"push_url?: string",
		"Export timing metrics as histograms",
		"open_telemetry_collector: {",
		"service?: string",
		"ratio?: float",
		"The service name reported with every span.",
	} {
		if !strings.Contains(cue, want) {
			t.Errorf("speculapro list --format cue lacks %q", want)
		}
	}
}
