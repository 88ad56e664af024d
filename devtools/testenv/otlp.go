package testenv

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// OTLPReceiver stands in for an OpenTelemetry collector: it records, per
// span name, the resource attributes (service.name, tags) each span came with.
type OTLPReceiver struct {
	mu    sync.Mutex
	spans map[string]map[string]string
}

// Spans returns a copy of what was received: span name -> resource attributes.
func (r *OTLPReceiver) Spans() map[string]map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]map[string]string, len(r.spans))
	for k, v := range r.spans {
		out[k] = v
	}
	return out
}

// SpansOf counts the spans whose service.name is service.
func (r *OTLPReceiver) SpansOf(service string) int {
	n := 0
	for _, attrs := range r.Spans() {
		if attrs["service.name"] == service {
			n++
		}
	}
	return n
}

func (r *OTLPReceiver) String() string { return fmt.Sprint(r.Spans()) }

func (r *OTLPReceiver) add(req *collectortrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.spans == nil {
		r.spans = map[string]map[string]string{}
	}
	for _, rs := range req.GetResourceSpans() {
		attrs := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans[sp.GetName()] = attrs
			}
		}
	}
}

type otlpGRPCService struct {
	collectortrace.UnimplementedTraceServiceServer
	r *OTLPReceiver
}

func (s otlpGRPCService) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	s.r.add(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// ServeGRPC serves the OTLP trace service over gRPC on loopback until the
// test ends and returns its host:port.
func (r *OTLPReceiver) ServeGRPC(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, otlpGRPCService{r: r})
	go func() { _ = srv.Serve(lis) }() // ends with srv.Stop in cleanup
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// ServeHTTP serves OTLP/HTTP (protobuf) at /v1/traces on loopback until the
// test ends and returns its host:port.
func (r *OTLPReceiver) ServeHTTP(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" {
			http.NotFound(w, req)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var export collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&export)
		resp, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	})}
	go func() { _ = srv.Serve(lis) }() // ends with srv.Close in cleanup
	t.Cleanup(func() { _ = srv.Close() })
	return lis.Addr().String()
}
