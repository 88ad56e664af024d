// Package opentelemetrycollector owns the `open_telemetry_collector` tracer,
// which batches the engine's spans and exports them over OTLP gRPC and/or
// HTTP with a service name, resource tags and parent-based ratio sampling.
// Field names follow Redpanda Connect's component of the same name so that a
// Connect user's YAML reads the same.
package opentelemetrycollector

import "errors"

// Sentinel errors of this package; match them with errors.Is.
var (
	// ErrNoCollector means an open_telemetry_collector config lists neither an
	// http nor a grpc collector, so no span could ever leave the process.
	ErrNoCollector = errors.New("no http or grpc collector configured")

	// ErrSamplingRatio means sampling is enabled without a ratio in [0, 1].
	ErrSamplingRatio = errors.New("sampling ratio must be set between 0 and 1 when sampling is enabled")
)
