package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// Bounds of every wait in these tests; generous because the machine is shared.
const (
	observeReadyTimeout = 60 * time.Second
	observeExitTimeout  = 30 * time.Second
)

// observeRun writes yaml (whose http.address is %[1]s, the process's own
// loopback address) to <tmp>/pipeline.yaml and starts `speculapro run` on it.
func observeRun(t *testing.T, yaml string) *binProcess {
	t.Helper()
	p := newBinProcess(t)
	path := filepath.Join(t.TempDir(), "pipeline.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(yaml, p.httpAddr)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p.start(t, nil, "run", path)
}

// observeInterrupt is Ctrl-C: the process must exit 0.
func observeInterrupt(t *testing.T, p *binProcess) {
	t.Helper()
	if code := p.interrupt(t); code != 0 {
		t.Fatalf("speculapro exited with code %d after SIGINT, want 0", code)
	}
}

const observePipeline = `
http:
  address: '%[1]s'
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
	t.Parallel()
	var grpcSink, httpSink testenv.OTLPReceiver
	grpcAddr := grpcSink.ServeGRPC(t)
	httpAddr := httpSink.ServeHTTP(t)

	yaml := observePipeline + fmt.Sprintf(`
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
	waitUntil(t, observeReadyTimeout, "engine metrics on /metrics", func() error {
		var err error
		if text, err = p.scrape(); err != nil {
			return err
		}
		for _, m := range []string{"input_received", "output_sent"} {
			if v := metricSum(text, m); v <= 0 {
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

	waitUntil(t, observeReadyTimeout, "spans of service speculapro at both OTLP receivers", func() error {
		if grpcSink.SpansOf("speculapro") == 0 {
			return fmt.Errorf("gRPC receiver has spans by service %v", grpcSink.String())
		}
		if httpSink.SpansOf("speculapro") == 0 {
			return fmt.Errorf("HTTP receiver has spans by service %v", httpSink.String())
		}
		return nil
	})

	observeInterrupt(t, p)
}

func TestObserveDefaultMetricsIsPrometheus(t *testing.T) {
	t.Parallel()
	// No metrics section at all: the default must still serve Prometheus text.
	p := observeRun(t, observePipeline)

	waitUntil(t, observeReadyTimeout, "Prometheus text on /metrics with no metrics section", func() error {
		text, err := p.scrape()
		if err != nil {
			return err
		}
		if !strings.Contains(text, "# TYPE input_received counter") {
			return errors.New("no input_received counter in scrape")
		}
		if v := metricSum(text, "output_sent"); v <= 0 {
			return fmt.Errorf("output_sent is %v, want > 0", v)
		}
		if v := metricSum(text, "go_goroutines"); v <= 0 {
			return fmt.Errorf("go_goroutines is %v, want > 0", v)
		}
		return nil
	})

	observeInterrupt(t, p)
}

func TestObserveListNamesBothPlugins(t *testing.T) {
	t.Parallel()
	run := func(args ...string) string {
		t.Helper()
		p := newBinProcess(t).start(t, nil, args...)
		if code := p.waitExit(t, observeExitTimeout); code != 0 {
			t.Fatalf("speculapro %s: exit code %d\n%s%s", strings.Join(args, " "), code, p.stdout, p.stderr)
		}
		return p.stdout.String()
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
