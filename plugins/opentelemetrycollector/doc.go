// Package observe owns SpeculaPro's observability plugins for the engine: the
// `prometheus` metrics exporter, which keeps every engine metric and ours in a
// private Prometheus registry and serves it on the engine's HTTP server at
// `/metrics` (it is the default metrics type, because the engine picks a
// registered `prometheus` exporter whenever a config names none), and the
// `open_telemetry_collector` tracer, which batches the engine's spans and
// exports them over OTLP gRPC and/or HTTP with a service name, resource tags
// and parent-based ratio sampling. Field names follow Redpanda Connect's
// components of the same names so that a Connect user's YAML reads the same.
package observe

import "errors"

// Sentinel errors of this package; match them with errors.Is.
var (
	// ErrMetricConflict means a metric name (after sanitising to Prometheus
	// rules) was asked for again with another kind or other label names; the
	// later request gets a metric that records nothing and a warning is logged.
	ErrMetricConflict = errors.New("metric already registered with another kind or other labels")

	// ErrNoCollector means an open_telemetry_collector config lists neither an
	// http nor a grpc collector, so no span could ever leave the process.
	ErrNoCollector = errors.New("no http or grpc collector configured")

	// ErrSamplingRatio means sampling is enabled without a ratio in [0, 1].
	ErrSamplingRatio = errors.New("sampling ratio must be set between 0 and 1 when sampling is enabled")
)
