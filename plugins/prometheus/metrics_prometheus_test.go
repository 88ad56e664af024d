package prometheus

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redpanda-data/benthos/v4/public/service"
)

func newTestExporter(t *testing.T, yaml string) *prometheusExporter {
	t.Helper()
	conf, err := prometheusMetricsSpec().ParseYAML(yaml, nil)
	if err != nil {
		t.Fatalf("parsing prometheus config %q: %v", yaml, err)
	}
	p, err := newPrometheusExporter(conf, service.MockResources().Logger())
	if err != nil {
		t.Fatalf("creating prometheus exporter from %q: %v", yaml, err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// scrape fetches the exporter's handler the way Prometheus would.
func scrape(t *testing.T, p *prometheusExporter) string {
	t.Helper()
	srv := httptest.NewServer(p.HandlerFunc())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatalf("scraping /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading /metrics: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics answered %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("/metrics content type %q, want Prometheus text", ct)
	}
	return string(body)
}

func assertLines(t *testing.T, text string, want, notWant []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("scrape lacks %q\n--- scrape ---\n%s", w, text)
		}
	}
	for _, nw := range notWant {
		if strings.Contains(text, nw) {
			t.Errorf("scrape unexpectedly has %q", nw)
		}
	}
}

func TestObservePrometheusSpecParsesConfig(t *testing.T) {
	tests := []struct {
		name          string
		yaml          string
		wantHistogram bool
		wantBuckets   []float64
		wantObjective map[float64]float64
		wantPush      bool
		wantInterval  time.Duration
		wantErr       string
	}{
		{
			name:          "defaults",
			yaml:          ``,
			wantBuckets:   prometheus.DefBuckets,
			wantObjective: map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001},
		},
		{
			name: "histogram with buckets",
			yaml: `
use_histogram_timing: true
histogram_buckets: [0.1, 1, 10]
`,
			wantHistogram: true,
			wantBuckets:   []float64{0.1, 1, 10},
			wantObjective: map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001},
		},
		{
			name: "custom objectives and push",
			yaml: `
summary_quantiles_objectives:
  - quantile: 0.75
    error: 0.02
push_url: http://127.0.0.1:1
push_interval: 1h
push_job_name: sp
`,
			wantBuckets:   prometheus.DefBuckets,
			wantObjective: map[float64]float64{0.75: 0.02},
			wantPush:      true,
			wantInterval:  time.Hour,
		},
		{
			name:    "quantile out of range",
			yaml:    "summary_quantiles_objectives: [{quantile: 1.5, error: 0.1}]",
			wantErr: "outside [0, 1]",
		},
		{
			name:    "wrong type",
			yaml:    "add_go_metrics: sometimes",
			wantErr: "bool",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conf, err := prometheusMetricsSpec().ParseYAML(tc.yaml, nil)
			var p *prometheusExporter
			if err == nil {
				p, err = newPrometheusExporter(conf, service.MockResources().Logger())
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(context.Background())
			if p.useHistogram != tc.wantHistogram {
				t.Errorf("useHistogram %v, want %v", p.useHistogram, tc.wantHistogram)
			}
			if !equalFloats(p.buckets, tc.wantBuckets) {
				t.Errorf("buckets %v, want %v", p.buckets, tc.wantBuckets)
			}
			if len(p.objectives) != len(tc.wantObjective) {
				t.Errorf("objectives %v, want %v", p.objectives, tc.wantObjective)
			}
			for q, e := range tc.wantObjective {
				if p.objectives[q] != e {
					t.Errorf("objective %v: error %v, want %v", q, p.objectives[q], e)
				}
			}
			if (p.pusher != nil) != tc.wantPush || p.pushInterval != tc.wantInterval {
				t.Errorf("push %v every %v, want %v every %v", p.pusher != nil, p.pushInterval, tc.wantPush, tc.wantInterval)
			}
		})
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestObservePrometheusExporterServesCountersGaugesAndSummaries(t *testing.T) {
	p := newTestExporter(t, `add_process_metrics: false
add_go_metrics: false`)

	received := p.NewCounterCtor("input_received", "label", "path")
	received("gen", "root.input").Incr(3)
	received("gen", "root.input").Incr(2)
	received("other", "root.input").Incr(1)
	received("gen", "root.input").Incr(-7) // a counter never goes down

	lag := p.NewGaugeCtor("speculapro.kafka-lag", "topic")
	lag("sp.txn.ingested").Set(42)
	lag("sp.account.events").(interface{ SetFloat64(float64) }).SetFloat64(1.5)

	latency := p.NewTimerCtor("output_latency_ns", "label")
	latency("db").Timing(int64(2 * time.Millisecond))
	latency("db").Timing(int64(4 * time.Millisecond))

	noLabels := p.NewCounterCtor("plain_total")
	noLabels().Incr(1)

	text := scrape(t, p)
	assertLines(t, text, []string{
		"# TYPE input_received counter",
		`input_received{label="gen",path="root.input"} 5`,
		`input_received{label="other",path="root.input"} 1`,
		"# TYPE speculapro_kafka_lag gauge",
		`speculapro_kafka_lag{topic="sp.txn.ingested"} 42`,
		`speculapro_kafka_lag{topic="sp.account.events"} 1.5`,
		"# TYPE output_latency_ns summary",
		`output_latency_ns{label="db",quantile="0.5"}`,
		`output_latency_ns{label="db",quantile="0.99"}`,
		`output_latency_ns_sum{label="db"} 6e+06`,
		`output_latency_ns_count{label="db"} 2`,
		"plain_total 1",
	}, []string{
		"process_cpu_seconds_total",
		"go_goroutines",
	})
}

func TestObservePrometheusExporterHistogramTimingInSeconds(t *testing.T) {
	p := newTestExporter(t, `use_histogram_timing: true
histogram_buckets: [0.001, 0.01]`)
	latency := p.NewTimerCtor("processor_latency_ns", "label", "path")
	latency("map", "root.pipeline.processors.0").Timing(int64(5 * time.Millisecond))
	latency("map", "root.pipeline.processors.0").Timing(int64(20 * time.Millisecond))

	text := scrape(t, p)
	assertLines(t, text, []string{
		"# TYPE processor_latency_ns histogram",
		`processor_latency_ns_bucket{label="map",path="root.pipeline.processors.0",le="0.001"} 0`,
		`processor_latency_ns_bucket{label="map",path="root.pipeline.processors.0",le="0.01"} 1`,
		`processor_latency_ns_bucket{label="map",path="root.pipeline.processors.0",le="+Inf"} 2`,
		`processor_latency_ns_sum{label="map",path="root.pipeline.processors.0"} 0.025`,
		// Process and Go collectors are on by default.
		"process_cpu_seconds_total",
		"go_goroutines",
	}, nil)
}

func TestObservePrometheusExporterSharesFamiliesAndSurvivesConflicts(t *testing.T) {
	p := newTestExporter(t, "")
	// Two components asking for the same counter share one family.
	p.NewCounterCtor("output_sent", "label", "path")("a", "root.output").Incr(1)
	p.NewCounterCtor("output_sent", "label", "path")("a", "root.output").Incr(1)
	// The same name as another kind, with other labels, or taken by a runtime
	// collector records nothing instead of panicking.
	p.NewGaugeCtor("output_sent", "label", "path")("a", "root.output").Set(99)
	p.NewCounterCtor("output_sent", "other")("x").Incr(50)
	p.NewGaugeCtor("go_goroutines")().Set(-1)
	// Wrong label value count: records nothing.
	p.NewCounterCtor("output_sent", "label", "path")("only-one").Incr(70)

	text := scrape(t, p)
	assertLines(t, text, []string{
		`output_sent{label="a",path="root.output"} 2`,
		"# TYPE output_sent counter",
	}, []string{
		`output_sent{label="a",path="root.output"} 99`,
		"# TYPE output_sent gauge",
		`other="x"`,
		"go_goroutines -1",
		"only-one",
	})
}

func TestObserveSanitiseNames(t *testing.T) {
	tests := []struct {
		in, metric, label string
	}{
		{"input_received", "input_received", "input_received"},
		{"speculapro.decision-events", "speculapro_decision_events", "speculapro_decision_events"},
		{"ns:sub", "ns:sub", "ns_sub"},
		{"9lives", "_9lives", "_9lives"},
		{"__reserved", "__reserved", "_reserved"},
		{"ünï", "_n_", "_n_"},
		{"", "_", "_"},
	}
	for _, tc := range tests {
		if got := sanitiseMetricName(tc.in); got != tc.metric {
			t.Errorf("sanitiseMetricName(%q) = %q, want %q", tc.in, got, tc.metric)
		}
		if got := sanitiseLabelName(tc.in); got != tc.label {
			t.Errorf("sanitiseLabelName(%q) = %q, want %q", tc.in, got, tc.label)
		}
	}
}

func TestObservePrometheusExporterWritesFileOnClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.prom")
	p := newTestExporter(t, "add_go_metrics: false\nfile_output_path: "+path)
	p.NewCounterCtor("output_sent")().Incr(7)
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	assertLines(t, string(b), []string{"output_sent 7", "process_cpu_seconds_total"}, nil)
}

func TestObservePrometheusExporterPushesOnClose(t *testing.T) {
	var (
		mu     sync.Mutex
		bodies []string
		auth   []string
	)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u, pw, _ := r.BasicAuth()
		mu.Lock()
		bodies = append(bodies, r.Method+" "+r.URL.Path+" "+string(b))
		auth = append(auth, u+":"+pw)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer gw.Close()

	p := newTestExporter(t, `add_go_metrics: false
add_process_metrics: false
push_url: `+gw.URL+`
push_job_name: sp_test
push_basic_auth:
  username: u
  password: p`)
	p.NewCounterCtor("output_sent")().Incr(3)
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 1 {
		t.Fatalf("push gateway got %d pushes, want 1: %q", len(bodies), bodies)
	}
	if !strings.HasPrefix(bodies[0], "PUT /metrics/job/sp_test ") {
		t.Errorf("push request %q, want PUT to /metrics/job/sp_test", bodies[0][:min(len(bodies[0]), 60)])
	}
	if !strings.Contains(bodies[0], "output_sent") {
		t.Errorf("push body lacks output_sent")
	}
	if auth[0] != "u:p" {
		t.Errorf("push basic auth %q, want u:p", auth[0])
	}
}

// HELP says what a metric means, not only its name: ours and the engine's
// come from metric_help.go, and one nobody described says so.
func TestObserveHelpSaysWhatAMetricMeans(t *testing.T) {
	p := newTestExporter(t, ``)
	p.NewCounterCtor("speculapro_persist_rows_stored_total", "table")("transactions").Incr(3)
	p.NewCounterCtor("input_received", "label", "path")("", "root.input").Incr(1)
	p.NewGaugeCtor("speculapro_not_in_the_table")().Set(1)
	text := scrape(t, p)
	assertLines(t, text, []string{
		"# HELP speculapro_persist_rows_stored_total Rows the persister inserted",
		"# HELP input_received Messages the input read.",
		"# HELP speculapro_not_in_the_table Undocumented metric speculapro_not_in_the_table (add it to plugins/prometheus/metric_help.go).",
	}, []string{"SpeculaPro metric "})
	for name, help := range metricHelp {
		if len(help) < 20 || !strings.HasSuffix(help, ".") {
			t.Errorf("%s: HELP %q does not say what it means in a sentence", name, help)
		}
	}
}

// A timer of ours is exported in the unit its name says, histogram or
// summary: _seconds in seconds, _ns in nanoseconds. The engine's keep
// Connect's convention (see TestObservePrometheusExporterHistogramTimingInSeconds).
func TestObserveTimerUnitFollowsItsName(t *testing.T) {
	for _, histogram := range []bool{false, true} {
		yaml := "use_histogram_timing: false"
		if histogram {
			yaml = "use_histogram_timing: true"
		}
		p := newTestExporter(t, yaml)
		p.NewTimerCtor("speculapro_persist_stage_duration_seconds", "table", "stage")("transactions", "write").Timing(int64(1500 * time.Millisecond))
		p.NewTimerCtor("speculapro_worker_attempt_duration_ns")().Timing(int64(2 * time.Millisecond))
		text := scrape(t, p)
		assertLines(t, text, []string{
			`speculapro_persist_stage_duration_seconds_sum{stage="write",table="transactions"} 1.5`,
			`speculapro_worker_attempt_duration_ns_sum 2e+06`,
		}, nil)
	}
}
