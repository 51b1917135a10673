package middleware_test

import (
	"cmp"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/middlewaretest"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/tracing"
)

// TestMiddlewareStoreSpans: with Options.TracerProvider, every store call
// of a keyed request is a span ("store.claim", "store.complete") under the
// service's own request span, which the engine labels with the route and
// the outcome, as the standalone proxy does under its own; the key and the
// owner are in none of them. tracing.ContextProvider (what the Caddy
// module passes) does the same with the provider of the request's span.
func TestMiddlewareStoreSpans(t *testing.T) {
	t.Run("given", func(t *testing.T) { testStoreSpans(t, nil) })
	t.Run("from the request's span", func(t *testing.T) { testStoreSpans(t, tracing.ContextProvider()) })
}

// testStoreSpans checks the spans of one keyed request through the
// middleware with Options.TracerProvider given (the service's provider
// when given is nil).
func testStoreSpans(t *testing.T, given trace.TracerProvider) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	idem := middlewaretest.EngineWith(t, `
store: {driver: memory}
log: {access: false}
defaults: {owner: "header:X-User"}
routes:
  - name: orders
    match: "POST /v1/orders"
`, middleware.Options{TracerProvider: cmp.Or[trace.TracerProvider](given, tp)})
	h := newOrders()
	// The service's instrumentation: a server span in the request's context.
	service := idem(h)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := tp.Tracer("service").Start(r.Context(), "POST /v1/orders")
		defer span.End()
		service.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(gate.Close)

	if a := mustPost(t, gate.URL, "alice", "k-span", `{"item":1}`); a.status != http.StatusCreated {
		t.Fatalf("keyed request: %d %s", a.status, a.body)
	}
	var server sdktrace.ReadOnlySpan
	children := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans.GetSpans().Snapshots() {
		if s.Name() == "POST /v1/orders" {
			server = s
		} else {
			children[s.Name()] = s
		}
		for _, a := range s.Attributes() {
			if v := a.Value.String(); v == "k-span" || v == "alice" {
				t.Errorf("span %s carries %s=%q: the key or the owner", s.Name(), a.Key, v)
			}
		}
	}
	if server == nil {
		t.Fatal("no request span")
	}
	attrs := map[string]string{}
	for _, a := range server.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs[string(tracing.AttrRoute)] != "orders" || attrs[string(tracing.AttrOutcome)] == "" {
		t.Errorf("request span attributes %v; want %s=orders and an %s", attrs, tracing.AttrRoute, tracing.AttrOutcome)
	}
	for _, name := range []string{"store.claim", "store.complete"} {
		s, ok := children[name]
		if !ok {
			t.Errorf("no %s span; spans: %v", name, slices.Collect(maps.Keys(children)))
			continue
		}
		if s.Parent().SpanID() != server.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the request span", name)
		}
	}
}
