// Package prometheus owns the `prometheus` metrics exporter, which keeps
// every engine metric and ours in a private Prometheus registry and serves it
// on the engine's HTTP server at `/metrics` (it is the default metrics type,
// because the engine picks a registered `prometheus` exporter whenever a
// config names none). Field names follow Redpanda Connect's component of the
// same name so that a Connect user's YAML reads the same.
package prometheus

import "errors"

// ErrMetricConflict means a metric name (after sanitising to Prometheus
// rules) was asked for again with another kind or other label names; the
// later request gets a metric that records nothing and a warning is logged.
// Match it with errors.Is.
var ErrMetricConflict = errors.New("metric already registered with another kind or other labels")
