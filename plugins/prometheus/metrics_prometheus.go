package prometheus

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/push"
	"github.com/redpanda-data/benthos/v4/public/service"
)

const (
	pmFieldUseHistogramTiming    = "use_histogram_timing"
	pmFieldHistogramBuckets      = "histogram_buckets"
	pmFieldSummaryObjectives     = "summary_quantiles_objectives"
	pmFieldSummaryQuantile       = "quantile"
	pmFieldSummaryError          = "error"
	pmFieldAddProcessMetrics     = "add_process_metrics"
	pmFieldAddGoMetrics          = "add_go_metrics"
	pmFieldPushURL               = "push_url"
	pmFieldPushInterval          = "push_interval"
	pmFieldPushJobName           = "push_job_name"
	pmFieldPushBasicAuth         = "push_basic_auth"
	pmFieldPushBasicAuthUsername = "username"
	pmFieldPushBasicAuthPassword = "password"
	pmFieldFileOutputPath        = "file_output_path"
)

// pmCloseTimeout bounds the final push on shutdown: the engine closes metrics
// without a deadline, and an unreachable push gateway must not hold the
// process up.
const pmCloseTimeout = 5 * time.Second

func prometheusMetricsSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Stable().
		Summary("Serves every engine metric and SpeculaPro's own on the engine's HTTP server at `/metrics` (and `/stats`) for Prometheus to scrape. This is the default metrics type.").
		Description(`
Metrics live in a registry of their own, so nothing registered globally by a library leaks in. Metric and label names are
sanitised to Prometheus rules: any character other than a letter, a digit, `+"`_`"+` or (for metric names) `+"`:`"+` becomes `+"`_`"+`,
and a name starting with a digit gets a leading `+"`_`"+`. Engine metrics carry the engine's labels (`+"`label`"+`, `+"`path`"+`, …).

Counters and gauges are exported as such. Timers (for example `+"`input_latency_ns`"+`) are exported as summaries in
nanoseconds, or, with `+"`use_histogram_timing: true`"+`, as histograms in seconds.

The endpoint is served on the address of the `+"`http`"+` section (`+"`http.address`"+`, default `+"`0.0.0.0:4195`"+`). Metrics can
also be pushed to a Prometheus push gateway (`+"`push_url`"+`) and written to a file on shutdown (`+"`file_output_path`"+`).`).
		Fields(
			service.NewBoolField(pmFieldUseHistogramTiming).
				Description("Export timing metrics as histograms (in seconds) instead of summaries (in nanoseconds).").
				Advanced().
				Default(false),
			service.NewFloatListField(pmFieldHistogramBuckets).
				Description("Bucket upper bounds, in seconds, of timing histograms. Empty means the Prometheus client's default buckets. Used only when `use_histogram_timing` is true.").
				Advanced().
				Example([]any{0.001, 0.01, 0.1, 1, 10}).
				Default([]any{}),
			service.NewObjectListField(pmFieldSummaryObjectives,
				service.NewFloatField(pmFieldSummaryQuantile).
					Description("A quantile to report, between 0 and 1.").
					Default(0.5),
				service.NewFloatField(pmFieldSummaryError).
					Description("The permitted absolute error of that quantile.").
					Default(0.05),
			).
				Description("Quantiles reported by timing summaries, each with its permitted error. Used only when `use_histogram_timing` is false.").
				Advanced().
				Default([]any{
					map[string]any{pmFieldSummaryQuantile: 0.5, pmFieldSummaryError: 0.05},
					map[string]any{pmFieldSummaryQuantile: 0.9, pmFieldSummaryError: 0.01},
					map[string]any{pmFieldSummaryQuantile: 0.99, pmFieldSummaryError: 0.001},
				}),
			service.NewBoolField(pmFieldAddProcessMetrics).
				Description("Export process metrics (`process_cpu_seconds_total`, `process_resident_memory_bytes`, open file descriptors, …) beside the pipeline's.").
				Default(true),
			service.NewBoolField(pmFieldAddGoMetrics).
				Description("Export Go runtime metrics (`go_goroutines`, GC pauses, heap sizes, …) beside the pipeline's.").
				Default(true),
			service.NewStringField(pmFieldPushURL).
				Description("A Prometheus push gateway to push metrics to, in addition to serving them.").
				Advanced().
				Optional().
				Example("http://127.0.0.1:9091"),
			service.NewDurationField(pmFieldPushInterval).
				Description("How often to push metrics to `push_url`. Without it metrics are pushed once, on shutdown.").
				Advanced().
				Optional().
				Example("1m"),
			service.NewStringField(pmFieldPushJobName).
				Description("The job name under which metrics are pushed to `push_url`.").
				Advanced().
				Default("speculapro_push"),
			service.NewObjectField(pmFieldPushBasicAuth,
				service.NewStringField(pmFieldPushBasicAuthUsername).
					Description("The basic authentication user name for the push gateway.").
					Default(""),
				service.NewStringField(pmFieldPushBasicAuthPassword).
					Description("The basic authentication password for the push gateway.").
					Secret().
					Default(""),
			).
				Description("Basic authentication for `push_url`.").
				Advanced(),
			service.NewStringField(pmFieldFileOutputPath).
				Description("A file to write every metric to, in the Prometheus text format, when the service shuts down. Empty means none.").
				Advanced().
				Default(""),
		)
}

func init() {
	service.MustRegisterMetricsExporter("prometheus", prometheusMetricsSpec(),
		func(conf *service.ParsedConfig, log *service.Logger) (service.MetricsExporter, error) {
			return newPrometheusExporter(conf, log)
		})
}

// metricKind names what a registered name was registered as, so that a later
// request for the same name as another kind is refused instead of panicking
// inside the Prometheus client.
type metricKind string

const (
	kindCounter metricKind = "counter"
	kindGauge   metricKind = "gauge"
	kindTimer   metricKind = "timer"
)

// registeredMetric is one metric family in our registry.
type registeredMetric struct {
	kind   metricKind
	labels []string
	vec    any // *prometheus.CounterVec, *prometheus.GaugeVec or prometheus.ObserverVec
}

// prometheusExporter is the engine's metrics exporter backed by its own
// Prometheus registry.
type prometheusExporter struct {
	log *service.Logger
	reg *prometheus.Registry

	useHistogram bool
	buckets      []float64
	objectives   map[float64]float64

	pusher       *push.Pusher
	pushInterval time.Duration
	filePath     string

	// stopPush ends the periodic push loop; pushDone is closed by that loop
	// once it has returned, so Close never races a push in flight.
	stopPush  chan struct{}
	pushDone  chan struct{}
	closeOnce sync.Once

	mu      sync.Mutex
	metrics map[string]*registeredMetric
}

func newPrometheusExporter(conf *service.ParsedConfig, log *service.Logger) (*prometheusExporter, error) {
	p := &prometheusExporter{
		log:     log,
		reg:     prometheus.NewRegistry(),
		metrics: map[string]*registeredMetric{},
	}
	var err error
	if p.useHistogram, err = conf.FieldBool(pmFieldUseHistogramTiming); err != nil {
		return nil, err
	}
	if p.buckets, err = conf.FieldFloatList(pmFieldHistogramBuckets); err != nil {
		return nil, err
	}
	if len(p.buckets) == 0 {
		p.buckets = prometheus.DefBuckets
	}
	objConfs, err := conf.FieldObjectList(pmFieldSummaryObjectives)
	if err != nil {
		return nil, err
	}
	p.objectives = make(map[float64]float64, len(objConfs))
	for i, oc := range objConfs {
		q, err := oc.FieldFloat(pmFieldSummaryQuantile)
		if err != nil {
			return nil, err
		}
		e, err := oc.FieldFloat(pmFieldSummaryError)
		if err != nil {
			return nil, err
		}
		if q < 0 || q > 1 {
			return nil, fmt.Errorf("%s[%d].%s: quantile %v is outside [0, 1]", pmFieldSummaryObjectives, i, pmFieldSummaryQuantile, q)
		}
		p.objectives[q] = e
	}

	addProcess, err := conf.FieldBool(pmFieldAddProcessMetrics)
	if err != nil {
		return nil, err
	}
	if addProcess {
		if err := p.reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
			return nil, fmt.Errorf("registering the process metrics collector: %w", err)
		}
	}
	addGo, err := conf.FieldBool(pmFieldAddGoMetrics)
	if err != nil {
		return nil, err
	}
	if addGo {
		if err := p.reg.Register(collectors.NewGoCollector()); err != nil {
			return nil, fmt.Errorf("registering the Go runtime metrics collector: %w", err)
		}
	}

	if p.filePath, err = conf.FieldString(pmFieldFileOutputPath); err != nil {
		return nil, err
	}
	if err := p.configurePush(conf); err != nil {
		return nil, err
	}
	return p, nil
}

// configurePush sets up the optional push gateway and, with an interval, the
// loop that pushes to it.
func (p *prometheusExporter) configurePush(conf *service.ParsedConfig) error {
	if !conf.Contains(pmFieldPushURL) {
		return nil
	}
	pushURL, err := conf.FieldString(pmFieldPushURL)
	if err != nil || pushURL == "" {
		return err
	}
	job, err := conf.FieldString(pmFieldPushJobName)
	if err != nil {
		return err
	}
	p.pusher = push.New(pushURL, job).Gatherer(p.reg)
	user, err := conf.FieldString(pmFieldPushBasicAuth, pmFieldPushBasicAuthUsername)
	if err != nil {
		return err
	}
	pass, err := conf.FieldString(pmFieldPushBasicAuth, pmFieldPushBasicAuthPassword)
	if err != nil {
		return err
	}
	if user != "" || pass != "" {
		p.pusher = p.pusher.BasicAuth(user, pass)
	}
	if conf.Contains(pmFieldPushInterval) {
		if p.pushInterval, err = conf.FieldDuration(pmFieldPushInterval); err != nil {
			return err
		}
	}
	if p.pushInterval <= 0 {
		return nil
	}
	p.stopPush = make(chan struct{})
	p.pushDone = make(chan struct{})
	// The push loop belongs to the exporter: Close closes stopPush and waits
	// for pushDone, and each push is bounded by the interval, so it cannot leak.
	go func() {
		defer close(p.pushDone)
		ticker := time.NewTicker(p.pushInterval)
		defer ticker.Stop()
		for {
			select {
			case <-p.stopPush:
				return
			case <-ticker.C:
				ctx, cancel := context.WithTimeout(context.Background(), p.pushInterval)
				if err := p.pusher.PushContext(ctx); err != nil {
					p.log.Warnf("prometheus: pushing metrics to the push gateway: %v", err)
				}
				cancel()
			}
		}
	}()
	return nil
}

// HandlerFunc is picked up by the engine, which mounts it at /metrics and
// /stats on its HTTP server.
func (p *prometheusExporter) HandlerFunc() http.HandlerFunc {
	return promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{
		// One failing collector should not hide every other metric.
		ErrorHandling: promhttp.ContinueOnError,
	}).ServeHTTP
}

// NewCounterCtor implements service.MetricsExporter.
func (p *prometheusExporter) NewCounterCtor(name string, labelKeys ...string) service.MetricsExporterCounterCtor {
	m, err := p.register(kindCounter, name, labelKeys)
	if err != nil {
		p.log.Warnf("prometheus: counter %q records nothing: %v", name, err)
		return func(...string) service.MetricsExporterCounter { return discardMetric{} }
	}
	vec := m.vec.(*prometheus.CounterVec)
	return func(labelValues ...string) service.MetricsExporterCounter {
		c, err := vec.GetMetricWithLabelValues(labelValues...)
		if err != nil {
			p.log.Warnf("prometheus: counter %q records nothing for these label values: %v", name, err)
			return discardMetric{}
		}
		return promCounter{c}
	}
}

// NewGaugeCtor implements service.MetricsExporter.
func (p *prometheusExporter) NewGaugeCtor(name string, labelKeys ...string) service.MetricsExporterGaugeCtor {
	m, err := p.register(kindGauge, name, labelKeys)
	if err != nil {
		p.log.Warnf("prometheus: gauge %q records nothing: %v", name, err)
		return func(...string) service.MetricsExporterGauge { return discardMetric{} }
	}
	vec := m.vec.(*prometheus.GaugeVec)
	return func(labelValues ...string) service.MetricsExporterGauge {
		g, err := vec.GetMetricWithLabelValues(labelValues...)
		if err != nil {
			p.log.Warnf("prometheus: gauge %q records nothing for these label values: %v", name, err)
			return discardMetric{}
		}
		return promGauge{g}
	}
}

// NewTimerCtor implements service.MetricsExporter.
func (p *prometheusExporter) NewTimerCtor(name string, labelKeys ...string) service.MetricsExporterTimerCtor {
	m, err := p.register(kindTimer, name, labelKeys)
	if err != nil {
		p.log.Warnf("prometheus: timer %q records nothing: %v", name, err)
		return func(...string) service.MetricsExporterTimer { return discardMetric{} }
	}
	vec := m.vec.(prometheus.ObserverVec)
	divisor := timerDivisor(name, p.useHistogram)
	return func(labelValues ...string) service.MetricsExporterTimer {
		o, err := vec.GetMetricWithLabelValues(labelValues...)
		if err != nil {
			p.log.Warnf("prometheus: timer %q records nothing for these label values: %v", name, err)
			return discardMetric{}
		}
		return promTimer{o: o, divisor: divisor}
	}
}

// timerDivisor is what a timer's nanoseconds are divided by. The engine's
// own timers follow Connect: histograms in seconds (so the usual bucket
// bounds fit), summaries in nanoseconds, whatever their name says. Ours say
// their unit in their name and are exported in it either way: _seconds in
// seconds, _ns in nanoseconds.
func timerDivisor(name string, histogram bool) float64 {
	switch {
	case strings.HasPrefix(name, "speculapro_") && strings.HasSuffix(name, "_seconds"):
		return float64(time.Second)
	case strings.HasPrefix(name, "speculapro_") && strings.HasSuffix(name, "_ns"):
		return 1
	case histogram:
		return float64(time.Second)
	}
	return 1
}

// register returns the metric family for name, creating it on first use. The
// engine asks for the same name once per component, so a repeat with the
// same kind and labels shares the family.
func (p *prometheusExporter) register(kind metricKind, name string, labelKeys []string) (*registeredMetric, error) {
	promName := sanitiseMetricName(name)
	labels := make([]string, len(labelKeys))
	for i, k := range labelKeys {
		labels[i] = sanitiseLabelName(k)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.metrics[promName]; ok {
		if m.kind != kind || !slices.Equal(m.labels, labels) {
			return nil, fmt.Errorf("%s %q with labels %v: %w (first as %s with labels %v)", kind, promName, labels, ErrMetricConflict, m.kind, m.labels)
		}
		return m, nil
	}

	help := helpOf(name)
	var vec prometheus.Collector
	switch kind {
	case kindCounter:
		vec = prometheus.NewCounterVec(prometheus.CounterOpts{Name: promName, Help: help}, labels)
	case kindGauge:
		vec = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: promName, Help: help}, labels)
	case kindTimer:
		if p.useHistogram {
			buckets := p.buckets
			if timerDivisor(name, true) == 1 {
				// Nanoseconds: the bounds, given in seconds, scaled to them.
				buckets = make([]float64, len(p.buckets))
				for i, b := range p.buckets {
					buckets[i] = b * float64(time.Second)
				}
			}
			vec = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: promName, Help: help, Buckets: buckets}, labels)
		} else {
			vec = prometheus.NewSummaryVec(prometheus.SummaryOpts{Name: promName, Help: help, Objectives: p.objectives}, labels)
		}
	}
	if err := p.reg.Register(vec); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			// Only a collector's own metric (process_*, go_*) can hold the
			// name here, as our families are all tracked in p.metrics.
			return nil, fmt.Errorf("%s %q: %w (taken by a runtime collector)", kind, promName, ErrMetricConflict)
		}
		return nil, fmt.Errorf("registering %s %q: %w", kind, promName, err)
	}
	m := &registeredMetric{kind: kind, labels: labels, vec: vec}
	p.metrics[promName] = m
	return m, nil
}

// Close implements service.MetricsExporter: it stops the push loop, pushes
// once more and writes the output file, each bounded, so that the last
// values of a run are not lost.
func (p *prometheusExporter) Close(ctx context.Context) error {
	var errs []error
	p.closeOnce.Do(func() {
		if p.stopPush != nil {
			close(p.stopPush)
			<-p.pushDone
		}
		if p.pusher != nil {
			pctx, cancel := context.WithTimeout(ctx, pmCloseTimeout)
			if err := p.pusher.PushContext(pctx); err != nil {
				errs = append(errs, fmt.Errorf("pushing metrics to the push gateway on shutdown: %w", err))
			}
			cancel()
		}
		if p.filePath != "" {
			if err := prometheus.WriteToTextfile(p.filePath, p.reg); err != nil {
				errs = append(errs, fmt.Errorf("writing metrics to %s on shutdown: %w", p.filePath, err))
			}
		}
	})
	return errors.Join(errs...)
}

// sanitiseMetricName maps an engine metric name onto the Prometheus metric
// name rule [a-zA-Z_:][a-zA-Z0-9_:]*.
func sanitiseMetricName(name string) string {
	return sanitiseName(name, true)
}

// sanitiseLabelName maps an engine label name onto the Prometheus label name
// rule [a-zA-Z_][a-zA-Z0-9_]*, avoiding the reserved `__` prefix.
func sanitiseLabelName(name string) string {
	s := sanitiseName(name, false)
	if strings.HasPrefix(s, "__") {
		s = "_" + strings.TrimLeft(s, "_")
	}
	return s
}

func sanitiseName(name string, allowColon bool) string {
	if name == "" {
		return "_"
	}
	var b strings.Builder
	b.Grow(len(name) + 1)
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_', allowColon && r == ':':
			b.WriteRune(r)
		case r >= '0' && r <= '9':
			if i == 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// promCounter adapts a Prometheus counter to the engine's counter.
type promCounter struct{ c prometheus.Counter }

func (c promCounter) Incr(n int64) {
	// A Prometheus counter panics on a negative add; a counter never goes down.
	if n > 0 {
		c.c.Add(float64(n))
	}
}

func (c promCounter) IncrFloat64(n float64) {
	if n > 0 {
		c.c.Add(n)
	}
}

// promGauge adapts a Prometheus gauge to the engine's gauge.
type promGauge struct{ g prometheus.Gauge }

func (g promGauge) Set(v int64)          { g.g.Set(float64(v)) }
func (g promGauge) SetFloat64(v float64) { g.g.Set(v) }

// promTimer adapts a Prometheus summary or histogram to the engine's timer,
// whose deltas are nanoseconds.
type promTimer struct {
	o       prometheus.Observer
	divisor float64
}

func (t promTimer) Timing(delta int64) { t.o.Observe(float64(delta) / t.divisor) }

// discardMetric stands in for a metric that could not be registered, so a
// naming conflict costs a warning instead of a crash.
type discardMetric struct{}

func (discardMetric) Incr(int64)          {}
func (discardMetric) IncrFloat64(float64) {}
func (discardMetric) Set(int64)           {}
func (discardMetric) SetFloat64(float64)  {}
func (discardMetric) Timing(int64)        {}
