package observe

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// otlpSink collects the resource spans an in-test OTLP receiver was sent.
type otlpSink struct {
	mu    sync.Mutex
	spans []*tracepb.ResourceSpans
}

func (s *otlpSink) add(req *collectortrace.ExportTraceServiceRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, req.GetResourceSpans()...)
}

// received returns, per span name, the resource attributes it came with.
func (s *otlpSink) received() map[string]map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]map[string]string{}
	for _, rs := range s.spans {
		attrs := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				out[sp.GetName()] = attrs
			}
		}
	}
	return out
}

// startOTLPHTTP serves OTLP/HTTP protobuf at /v1/traces and returns its
// host:port.
func startOTLPHTTP(t *testing.T, sink *otlpSink) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

type grpcTraceReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	sink *otlpSink
}

func (g grpcTraceReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	g.sink.add(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// startOTLPGRPC serves the OTLP trace service over gRPC on loopback and
// returns its host:port.
func startOTLPGRPC(t *testing.T, sink *otlpSink) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, grpcTraceReceiver{sink: sink})
	go func() { _ = srv.Serve(lis) }() // ends with srv.Stop in cleanup
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

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
	var httpSink, grpcSink otlpSink
	httpAddr := startOTLPHTTP(t, &httpSink)
	grpcAddr := startOTLPGRPC(t, &grpcSink)

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
	for name, sink := range map[string]*otlpSink{"http": &httpSink, "grpc": &grpcSink} {
		got := sink.received()
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
			var sink otlpSink
			addr := startOTLPHTTP(t, &sink)
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
			got := sink.received()
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
