package main

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/tracing"
)

// listenAddrs is a slog handler that hands over the addresses runServer
// logs once it listens, so the test needs no fixed ports.
type listenAddrs struct {
	slog.Handler
	addr chan string
}

func (l listenAddrs) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "idemgate listening" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "addr" {
				l.addr <- a.Value.String()
			}
			return true
		})
	}
	return l.Handler.Handle(ctx, r)
}

func (l listenAddrs) WithAttrs(as []slog.Attr) slog.Handler {
	return listenAddrs{l.Handler.WithAttrs(as), l.addr}
}

func (l listenAddrs) WithGroup(name string) slog.Handler {
	return listenAddrs{l.Handler.WithGroup(name), l.addr}
}

// TestServeExportsRequestTraces runs the server as serve does, with
// tracing.enabled against a fake OTLP/HTTP collector, and checks that one
// enforced request yields its request span (route, outcome), a store.claim
// child, and a traceparent of the same trace at the upstream, all flushed
// by the time runServer returns; and that no span shows the idempotency key
// or the Authorization-derived owner.
func TestServeExportsRequestTraces(t *testing.T) {
	var mu sync.Mutex
	var exported []*tracepb.ResourceSpans
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		exported = append(exported, req.ResourceSpans...)
		mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(collector.Close)
	traceparents := make(chan string, 4)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		traceparents <- r.Header.Get("Traceparent")
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(backend.Close)

	cfg := config.Default()
	cfg.Upstream.URL, _ = url.Parse(backend.URL)
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Tracing = config.TracingConfig{Enabled: true, Endpoint: collector.URL, Protocol: config.ProtocolHTTPProtobuf,
		SampleRatio: 1, ServiceName: "idemgate"}
	addrs := make(chan string, 1)
	log := slog.New(listenAddrs{slog.NewTextHandler(io.Discard, nil), addrs})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	noReload := func(string) (*config.Config, error) { return nil, errors.New("no config file to reload") }
	go func() {
		done <- runServer(ctx, cfg, runOptions{load: noReload, log: log, waitStore: 10 * time.Second, version: "test"})
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("runServer: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("runServer did not start listening")
	}

	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/orders", strings.NewReader(`{"n":1}`))
	req.Header.Set("Idempotency-Key", `"serve-key-SECRET"`)
	req.Header.Set("Authorization", "Bearer token-SECRET")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d", resp.StatusCode)
	}
	stop() // runServer flushes the spans before it returns
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("runServer: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("runServer did not stop")
	}

	mu.Lock()
	defer mu.Unlock()
	var server, claim *tracepb.Span
	for _, rs := range exported {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				switch {
				case s.Kind == tracepb.Span_SPAN_KIND_SERVER:
					server = s
				case s.Name == "store.claim":
					claim = s
				}
				for _, kv := range append(s.Attributes, rs.GetResource().GetAttributes()...) {
					if strings.Contains(kv.Value.String(), "SECRET") {
						t.Errorf("span %q attribute %s leaks the key or owner: %v", s.Name, kv.Key, kv.Value)
					}
				}
			}
		}
	}
	if server == nil || claim == nil {
		t.Fatalf("exported spans lack the request span or store.claim: %v", exported)
	}
	attrs := map[string]string{}
	for _, kv := range server.Attributes {
		attrs[kv.Key] = kv.Value.GetStringValue()
	}
	if attrs["idemgate.route"] != "default" || attrs["idemgate.outcome"] != "forwarded" {
		t.Errorf("request span attributes = %v, want idemgate.route default and idemgate.outcome forwarded", attrs)
	}
	if string(claim.TraceId) != string(server.TraceId) || string(claim.ParentSpanId) != string(server.SpanId) {
		t.Error("store.claim is not a child of the request span")
	}
	select {
	case tp := <-traceparents:
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[1] != hex.EncodeToString(server.TraceId) {
			t.Errorf("upstream traceparent %q is not in the request's trace %s", tp, hex.EncodeToString(server.TraceId))
		}
	default:
		t.Error("the upstream was not called")
	}
}

// TestTracingProtocolsAgree: config validates tracing.protocol against its
// own constants and tracing.Setup switches on tracing's (the two packages do
// not import each other), so the strings must be the same, or a protocol the
// config accepts would fail at startup.
func TestTracingProtocolsAgree(t *testing.T) {
	for _, p := range [][2]string{
		{config.ProtocolGRPC, tracing.ProtocolGRPC},
		{config.ProtocolHTTPProtobuf, tracing.ProtocolHTTPProtobuf},
	} {
		if p[0] != p[1] {
			t.Errorf("config's protocol %q, tracing's %q: want the same", p[0], p[1])
		}
	}
}
