package tracing_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/store/memory"
	"github.com/idemgate/idemgate/tracing"
)

// collector is a fake OTLP receiver: it keeps every resource-spans batch
// it is sent over HTTP (POST /v1/traces) or gRPC.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu       sync.Mutex
	requests int
	paths    []string
	got      []*tracepb.ResourceSpans
	status   int // HTTP answer; 0 means 200
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests++
	c.got = append(c.got, req.ResourceSpans...)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.paths = append(c.paths, r.Method+" "+r.URL.Path)
	status := c.status
	c.mu.Unlock()
	if status != 0 {
		http.Error(w, "refused by the test", status)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" ||
		proto.Unmarshal(body, &req) != nil {
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	_, _ = c.Export(r.Context(), &req)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *collector) setStatus(s int) {
	c.mu.Lock()
	c.status = s
	c.mu.Unlock()
}

// spans returns the names of the spans received and the resource
// attributes of the last batch.
func (c *collector) spans() (names []string, resource map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	resource = map[string]string{}
	for _, rs := range c.got {
		for _, kv := range rs.GetResource().GetAttributes() {
			resource[kv.Key] = kv.Value.GetStringValue()
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				names = append(names, s.Name)
			}
		}
	}
	return names, resource
}

func httpCollector(t *testing.T) (*collector, *httptest.Server) {
	c := &collector{}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return c, srv
}

func enabled(protocol, endpoint string) tracing.Config {
	return tracing.Config{Enabled: true, Protocol: protocol, Endpoint: endpoint, SampleRatio: 1, ServiceName: "idemgate-test"}
}

// export runs Setup, records one span named "probe" and shuts the provider
// down, which flushes the batch synchronously.
func export(t *testing.T, cfg tracing.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tp, shutdown, err := tracing.Setup(ctx, cfg, "v1.2.3")
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	_, span := tp.Tracer("test").Start(ctx, "probe")
	if !span.IsRecording() {
		t.Error("span is not recording with tracing enabled and sample_ratio 1")
	}
	span.End()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

func wantProbe(t *testing.T, c *collector, service string) {
	t.Helper()
	names, res := c.spans()
	if len(names) != 1 || names[0] != "probe" {
		t.Fatalf("collector received spans %v, want [probe]", names)
	}
	if res["service.name"] != service || res["service.version"] != "v1.2.3" {
		t.Errorf("resource = %v, want service.name %s and service.version v1.2.3", res, service)
	}
}

func TestSetupDisabledBuildsNoExporter(t *testing.T) {
	c, srv := httpCollector(t)
	cfg := enabled(tracing.ProtocolHTTPProtobuf, srv.URL)
	cfg.Enabled = false
	tp, shutdown, err := tracing.Setup(context.Background(), cfg, "v1.2.3")
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if _, ok := tp.(*sdktrace.TracerProvider); ok {
		t.Fatal("disabled tracing built an SDK provider")
	}
	_, span := tp.Tracer("test").Start(context.Background(), "probe")
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Error("disabled tracing records spans")
	}
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	c.mu.Lock()
	paths := c.paths
	c.mu.Unlock()
	if len(paths) != 0 {
		t.Errorf("the collector was contacted: %v", paths)
	}

	// Nothing is wrapped either, so the disabled path costs nothing.
	mem := memory.New()
	defer mem.Close()
	if st := tracing.InstrumentStore(mem, tp); st != mem {
		t.Error("InstrumentStore wrapped the store with tracing disabled")
	}
	base := http.DefaultTransport
	if rt := tracing.Transport(base, tp, tracing.Propagator()); rt != base {
		t.Error("Transport wrapped the transport with tracing disabled")
	}
	next := &httputil.ReverseProxy{Rewrite: func(*httputil.ProxyRequest) {}}
	if h := tracing.Handler(next, tp, tracing.Propagator()); h != http.Handler(next) {
		t.Error("Handler wrapped the handler with tracing disabled")
	}
}

func TestSetupExportsOverHTTP(t *testing.T) {
	t.Run("collector URL", func(t *testing.T) {
		c, srv := httpCollector(t)
		export(t, enabled(tracing.ProtocolHTTPProtobuf, srv.URL)) // no path: /v1/traces is added
		wantProbe(t, c, "idemgate-test")
	})
	t.Run("host:port insecure", func(t *testing.T) {
		c, srv := httpCollector(t)
		cfg := enabled(tracing.ProtocolHTTPProtobuf, strings.TrimPrefix(srv.URL, "http://"))
		cfg.Insecure = true
		export(t, cfg)
		wantProbe(t, c, "idemgate-test")
	})
	t.Run("environment", func(t *testing.T) {
		c, srv := httpCollector(t)
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", srv.URL+"/v1/traces")
		t.Setenv("OTEL_SERVICE_NAME", "from-env")
		export(t, enabled(tracing.ProtocolHTTPProtobuf, ""))
		wantProbe(t, c, "from-env")
	})
}

func TestSetupExportsOverGRPC(t *testing.T) {
	c := &collector{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	cfg := enabled(tracing.ProtocolGRPC, ln.Addr().String())
	cfg.Insecure = true
	export(t, cfg)
	wantProbe(t, c, "idemgate-test")
}

func TestSampleRatioIsParentBased(t *testing.T) {
	_, srv := httpCollector(t)
	cfg := enabled(tracing.ProtocolHTTPProtobuf, srv.URL)
	cfg.SampleRatio = 0
	tp, shutdown, err := tracing.Setup(context.Background(), cfg, "v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shutdown(context.Background()) })
	tr := tp.Tracer("test")

	_, root := tr.Start(context.Background(), "root")
	if root.SpanContext().IsSampled() {
		t.Error("sample_ratio 0 sampled a new trace")
	}
	root.End()

	// A caller that sampled its trace keeps it sampled through idemgate.
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	_, child := tr.Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "child")
	if !child.SpanContext().IsSampled() || child.SpanContext().TraceID() != parent.TraceID() {
		t.Error("a sampled parent's trace was not sampled")
	}
	child.End()
}

func TestExportFailuresAreLoggedOncePerChange(t *testing.T) {
	c, srv := httpCollector(t)
	c.setStatus(http.StatusBadRequest) // not retried by the exporter, so each flush fails at once
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))
	tp, shutdown, err := tracing.Setup(context.Background(), enabled(tracing.ProtocolHTTPProtobuf, srv.URL), "v1.2.3", tracing.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shutdown(context.Background()) })
	sdk := tp.(*sdktrace.TracerProvider)
	flush := func() {
		t.Helper()
		_, span := tp.Tracer("test").Start(context.Background(), "probe")
		span.End()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := sdk.ForceFlush(ctx); err != nil {
			t.Fatalf("ForceFlush: %v", err)
		}
	}
	count := func(s string) int {
		logMu.Lock()
		defer logMu.Unlock()
		return strings.Count(logs.String(), s)
	}
	flush()
	flush()
	if n := count("span export failed"); n != 1 {
		t.Errorf("%d failure lines for two failed batches, want 1:\n%s", n, logs.String())
	}
	c.setStatus(0)
	flush()
	if n := count("span export recovered"); n != 1 {
		t.Errorf("%d recovery lines, want 1:\n%s", n, logs.String())
	}
	if names, _ := c.spans(); len(names) != 1 {
		t.Errorf("collector received %v after recovering, want one probe", names)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
