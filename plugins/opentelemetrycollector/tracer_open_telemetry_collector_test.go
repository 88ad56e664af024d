package opentelemetrycollector

import (
	"context"
	"errors"
	"github.com/speculapro/speculapro/devtools/testenv"
	"strings"
	"testing"
)

func TestObserveOpenTelemetryCollectorSpecParsesConfig(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr error
		errText string
	}{
		{name: "http only", yaml: "http: [{address: 127.0.0.1:4318}]"},
		{name: "grpc only, secure, tags, sampling", yaml: `
grpc: [{address: 127.0.0.1:4317, secure: true}]
service: persist
tags: {env: test}
sampling: {enabled: true, ratio: 0.25}`},
		{name: "no collector", yaml: "service: x", wantErr: ErrNoCollector},
		{name: "sampling without ratio", yaml: "http: [{address: a:1}]\nsampling: {enabled: true}", wantErr: ErrSamplingRatio},
		{name: "ratio above one", yaml: "http: [{address: a:1}]\nsampling: {enabled: true, ratio: 1.5}", wantErr: ErrSamplingRatio},
		{name: "empty address", yaml: "grpc: [{address: ''}]", errText: "empty collector address"},
		{name: "missing address", yaml: "grpc: [{secure: true}]", errText: "address"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conf, err := openTelemetryCollectorSpec().ParseYAML(tc.yaml, nil)
			if err == nil {
				var tp otcTracerProvider
				tp, err = newOpenTelemetryCollector(context.Background(), conf)
				if err == nil {
					defer tp.Shutdown(context.Background())
				}
			}
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
			case tc.errText != "":
				if err == nil || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("error %v, want one containing %q", err, tc.errText)
				}
			case err != nil:
				t.Fatal(err)
			}
		})
	}
}

func TestObserveOpenTelemetryCollectorExportsSpansOverHTTPAndGRPC(t *testing.T) {
	var httpSink, grpcSink testenv.OTLPReceiver
	httpAddr := httpSink.ServeHTTP(t)
	grpcAddr := grpcSink.ServeGRPC(t)

	conf, err := openTelemetryCollectorSpec().ParseYAML(`
http: [{address: "`+httpAddr+`"}]
grpc: [{address: "`+grpcAddr+`"}]
tags: {deployment.environment: test}
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := newOpenTelemetryCollector(context.Background(), conf)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("observe-test").Start(context.Background(), "batch")
	span.End()
	// Shutdown flushes the batch processor synchronously, so the receivers
	// have the span once it returns.
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for name, sink := range map[string]*testenv.OTLPReceiver{"http": &httpSink, "grpc": &grpcSink} {
		got := sink.Spans()
		attrs, ok := got["batch"]
		if !ok {
			t.Errorf("%s receiver got spans %v, want one named batch", name, got)
			continue
		}
		if attrs["service.name"] != "speculapro" {
			t.Errorf("%s receiver: service.name %q, want speculapro", name, attrs["service.name"])
		}
		if attrs["deployment.environment"] != "test" {
			t.Errorf("%s receiver: tag deployment.environment %q, want test", name, attrs["deployment.environment"])
		}
	}
}

func TestObserveOpenTelemetryCollectorSamplingRatio(t *testing.T) {
	tests := []struct {
		ratio     string
		wantSpans int
	}{
		{ratio: "0", wantSpans: 0},
		{ratio: "1", wantSpans: 20},
	}
	for _, tc := range tests {
		t.Run("ratio "+tc.ratio, func(t *testing.T) {
			var sink testenv.OTLPReceiver
			addr := sink.ServeHTTP(t)
			conf, err := openTelemetryCollectorSpec().ParseYAML(`
service: sampled
http: [{address: "`+addr+`"}]
sampling: {enabled: true, ratio: `+tc.ratio+`}
`, nil)
			if err != nil {
				t.Fatal(err)
			}
			tp, err := newOpenTelemetryCollector(context.Background(), conf)
			if err != nil {
				t.Fatal(err)
			}
			tracer := tp.Tracer("observe-test")
			for i := range 20 {
				ctx, root := tracer.Start(context.Background(), "root-"+string(rune('a'+i)))
				// A child follows its parent's decision: never sampled alone.
				_, child := tracer.Start(ctx, "child-"+string(rune('a'+i)))
				child.End()
				root.End()
			}
			if err := tp.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := sink.Spans()
			roots, children := 0, 0
			for name, attrs := range got {
				if attrs["service.name"] != "sampled" {
					t.Errorf("span %s: service.name %q, want sampled", name, attrs["service.name"])
				}
				if strings.HasPrefix(name, "root-") {
					roots++
				} else {
					children++
				}
			}
			if roots != tc.wantSpans || children != tc.wantSpans {
				t.Errorf("exported %d roots and %d children, want %d each", roots, children, tc.wantSpans)
			}
		})
	}
}
