package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store/memory"
	"github.com/idemgate/idemgate/tracing"
)

// instantUpstream answers 201 in memory, so the benchmark measures the
// proxy and its tracing, not a network.
type instantUpstream struct{}

func (instantUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	return &http.Response{StatusCode: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"id":1}`)), ContentLength: 8, Request: r}, nil
}

// discard is a span exporter that drops everything, standing in for a
// collector.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkEnforcedRequest is one first-time enforced POST (claim, forward,
// complete) through the proxy with tracing off, on with every trace
// sampled, and on with none sampled.
func BenchmarkEnforcedRequest(b *testing.B) {
	for _, bc := range []struct {
		name string
		tp   func() trace.TracerProvider
	}{
		{"off", func() trace.TracerProvider { return noop.NewTracerProvider() }},
		{"sampled", func() trace.TracerProvider {
			return sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
		}},
		{"unsampled", func() trace.TracerProvider {
			return sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}),
				sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))))
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tp := bc.tp()
			if sdk, ok := tp.(*sdktrace.TracerProvider); ok {
				b.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
			}
			mem := memory.New()
			b.Cleanup(func() { mem.Close() })
			defaults := policy.DefaultRoute()
			defaults.Owner = identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-User"}
			pol, err := policy.New(defaults, nil)
			if err != nil {
				b.Fatal(err)
			}
			target, _ := url.Parse("http://upstream.invalid")
			prop := tracing.Propagator()
			p, err := proxy.New(proxy.Options{
				Upstream:  target,
				Timeout:   5 * time.Second,
				Store:     tracing.InstrumentStore(mem, tp),
				Policy:    func() *policy.Policy { return pol },
				Transport: tracing.Transport(instantUpstream{}, tp, prop),
			})
			if err != nil {
				b.Fatal(err)
			}
			h := tracing.Handler(p, tp, prop)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(`{"n":1}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", "k"+strconv.Itoa(i))
				req.Header.Set("X-User", "alice")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusCreated {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}
