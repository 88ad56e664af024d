package opentelemetrycollector

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

const (
	otcFieldService         = "service"
	otcFieldHTTP            = "http"
	otcFieldGRPC            = "grpc"
	otcFieldAddress         = "address"
	otcFieldSecure          = "secure"
	otcFieldTags            = "tags"
	otcFieldSampling        = "sampling"
	otcFieldSamplingEnabled = "enabled"
	otcFieldSamplingRatio   = "ratio"
)

// otcShutdownTimeout bounds the final flush of buffered spans on shutdown, so
// an unreachable collector delays the exit by at most this long (the engine's
// own shutdown_timeout may cut it shorter).
const otcShutdownTimeout = 5 * time.Second

// serviceNameKey is the OpenTelemetry resource attribute collectors and
// tracing back ends group spans by.
const serviceNameKey = attribute.Key("service.name")

func openTelemetryCollectorSpec() *service.ConfigSpec {
	collectorFields := func(secureDesc, example string) []*service.ConfigField {
		return []*service.ConfigField{
			service.NewStringField(otcFieldAddress).
				Description("The endpoint of a collector to send spans to, as `host:port` (or a full URL with scheme).").
				Example(example),
			service.NewBoolField(otcFieldSecure).
				Description(secureDesc).
				Default(false),
		}
	}
	return service.NewConfigSpec().
		Stable().
		Summary("Sends the engine's tracing spans to OpenTelemetry collectors over OTLP, by gRPC and/or HTTP.").
		Description(`
Spans (one per message through input, processors and output) are batched and exported to every listed collector. Each
span carries the resource attribute `+"`service.name`"+` (from `+"`service`"+`) and one attribute per entry of `+"`tags`"+`.
With `+"`sampling.enabled`"+`, a root span is kept with probability `+"`sampling.ratio`"+` and a child span follows its
parent's decision (parent-based trace-ID ratio sampling); otherwise every span is kept. On shutdown the spans still
buffered are flushed, for at most five seconds.`).
		Fields(
			service.NewStringField(otcFieldService).
				Description("The service name reported with every span.").
				Default("speculapro"),
			service.NewObjectListField(otcFieldHTTP, collectorFields("Connect to the collector over HTTPS.", "localhost:4318")...).
				Description("Collectors receiving OTLP over HTTP (protobuf, path `/v1/traces`).").
				Default([]any{}),
			service.NewObjectListField(otcFieldGRPC, collectorFields("Connect to the collector with TLS.", "localhost:4317")...).
				Description("Collectors receiving OTLP over gRPC.").
				Default([]any{}),
			service.NewStringMapField(otcFieldTags).
				Description("Attributes added to the resource of every span, such as the environment or region.").
				Advanced().
				Example(map[string]any{"deployment.environment": "production"}).
				Default(map[string]any{}),
			service.NewObjectField(otcFieldSampling,
				service.NewBoolField(otcFieldSamplingEnabled).
					Description("Whether to sample traces. When false every trace is kept.").
					Default(false),
				service.NewFloatField(otcFieldSamplingRatio).
					Description("The share of traces to keep, between 0 and 1. Required when sampling is enabled.").
					Examples(0.85, 0.5).
					Optional(),
			).
				Description("Trace sampling, recommended for high-volume production workloads."),
		)
}

func init() {
	service.MustRegisterOtelTracerProvider("open_telemetry_collector", openTelemetryCollectorSpec(),
		func(conf *service.ParsedConfig) (trace.TracerProvider, error) {
			return newOpenTelemetryCollector(context.Background(), conf)
		})
}

// otcCollector is one configured collector endpoint.
type otcCollector struct {
	address string
	secure  bool
}

// otcTracerProvider is the SDK tracer provider with a bounded Shutdown; the
// engine calls Shutdown when observability closes.
type otcTracerProvider struct {
	*sdktrace.TracerProvider
}

// Shutdown flushes buffered spans and stops the exporters, waiting at most
// otcShutdownTimeout (or less, if ctx ends first).
func (p otcTracerProvider) Shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, otcShutdownTimeout)
	defer cancel()
	if err := p.TracerProvider.Shutdown(ctx); err != nil {
		return fmt.Errorf("flushing spans to the OpenTelemetry collectors on shutdown: %w", err)
	}
	return nil
}

func newOpenTelemetryCollector(ctx context.Context, conf *service.ParsedConfig) (otcTracerProvider, error) {
	name, err := conf.FieldString(otcFieldService)
	if err != nil {
		return otcTracerProvider{}, err
	}
	httpCollectors, err := otcCollectorsFromParsed(conf, otcFieldHTTP)
	if err != nil {
		return otcTracerProvider{}, err
	}
	grpcCollectors, err := otcCollectorsFromParsed(conf, otcFieldGRPC)
	if err != nil {
		return otcTracerProvider{}, err
	}
	if len(httpCollectors)+len(grpcCollectors) == 0 {
		return otcTracerProvider{}, fmt.Errorf("open_telemetry_collector: %w", ErrNoCollector)
	}
	tags, err := conf.FieldStringMap(otcFieldTags)
	if err != nil {
		return otcTracerProvider{}, err
	}
	sampler, err := otcSamplerFromParsed(conf.Namespace(otcFieldSampling))
	if err != nil {
		return otcTracerProvider{}, err
	}

	res, err := otcResource(name, tags)
	if err != nil {
		return otcTracerProvider{}, err
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(sampler)}
	var exporters []sdktrace.SpanExporter
	fail := func(err error) (otcTracerProvider, error) {
		// Exporters built so far hold connections; release them before failing.
		for _, e := range exporters {
			_ = e.Shutdown(context.Background())
		}
		return otcTracerProvider{}, err
	}
	for _, c := range httpCollectors {
		hopts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(c.address)}
		if strings.Contains(c.address, "://") {
			hopts = []otlptracehttp.Option{otlptracehttp.WithEndpointURL(c.address)}
		}
		if !c.secure {
			hopts = append(hopts, otlptracehttp.WithInsecure())
		}
		exp, err := otlptracehttp.New(ctx, hopts...)
		if err != nil {
			return fail(fmt.Errorf("creating the OTLP HTTP exporter for %s: %w", c.address, err))
		}
		exporters = append(exporters, exp)
	}
	for _, c := range grpcCollectors {
		gopts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(c.address)}
		if strings.Contains(c.address, "://") {
			gopts = []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(c.address)}
		}
		if !c.secure {
			gopts = append(gopts, otlptracegrpc.WithInsecure())
		}
		exp, err := otlptracegrpc.New(ctx, gopts...)
		if err != nil {
			return fail(fmt.Errorf("creating the OTLP gRPC exporter for %s: %w", c.address, err))
		}
		exporters = append(exporters, exp)
	}
	for _, e := range exporters {
		opts = append(opts, sdktrace.WithBatcher(e))
	}
	return otcTracerProvider{sdktrace.NewTracerProvider(opts...)}, nil
}

func otcCollectorsFromParsed(conf *service.ParsedConfig, field string) ([]otcCollector, error) {
	list, err := conf.FieldObjectList(field)
	if err != nil {
		return nil, err
	}
	out := make([]otcCollector, 0, len(list))
	for i, c := range list {
		var oc otcCollector
		if oc.address, err = c.FieldString(otcFieldAddress); err != nil {
			return nil, err
		}
		if oc.address == "" {
			return nil, fmt.Errorf("%s[%d].%s: empty collector address", field, i, otcFieldAddress)
		}
		if oc.secure, err = c.FieldBool(otcFieldSecure); err != nil {
			return nil, err
		}
		out = append(out, oc)
	}
	return out, nil
}

// otcSamplerFromParsed keeps every trace unless sampling is enabled; a child
// span always follows its parent's decision so traces stay whole.
func otcSamplerFromParsed(conf *service.ParsedConfig) (sdktrace.Sampler, error) {
	enabled, err := conf.FieldBool(otcFieldSamplingEnabled)
	if err != nil {
		return nil, err
	}
	if !enabled {
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	}
	if !conf.Contains(otcFieldSamplingRatio) {
		return nil, fmt.Errorf("%s.%s: %w", otcFieldSampling, otcFieldSamplingRatio, ErrSamplingRatio)
	}
	ratio, err := conf.FieldFloat(otcFieldSamplingRatio)
	if err != nil {
		return nil, err
	}
	if ratio < 0 || ratio > 1 {
		return nil, fmt.Errorf("%s.%s is %v: %w", otcFieldSampling, otcFieldSamplingRatio, ratio, ErrSamplingRatio)
	}
	return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
}

// otcResource describes the process to the collector: the SDK's defaults
// (telemetry.sdk.*), then the tags, then the service name, later ones winning.
func otcResource(name string, tags map[string]string) (*resource.Resource, error) {
	attrs := make([]attribute.KeyValue, 0, len(tags)+1)
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		attrs = append(attrs, attribute.String(k, tags[k]))
	}
	attrs = append(attrs, serviceNameKey.String(name))
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("building the tracing resource for service %q: %w", name, err)
	}
	return res, nil
}
