package tracing

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// ContextProvider returns a tracer provider for an engine that runs inside
// a host which traces requests itself with a provider idemgate is not
// given (Caddy's tracing directive; a service whose own instrumentation
// is all it has): each span is started by the provider of the span the
// context already carries (trace.Span.TracerProvider), so idemgate's
// spans join the host's traces, sampled and exported as its own are. With
// no span in the context it starts a non-recording one: InstrumentStore
// then makes no span, as for a call outside a traced request.
func ContextProvider() trace.TracerProvider { return contextProvider{} }

type contextProvider struct{ embedded.TracerProvider }

// Tracer returns the tracer name that starts its spans with the
// provider of the span in the context.
func (contextProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return contextTracer{name: name, opts: opts}
}

type contextTracer struct {
	embedded.Tracer
	name string
	opts []trace.TracerOption
}

// Start starts the span with the provider of the span ctx carries (a
// no-op provider when it carries none).
func (t contextTracer) Start(ctx context.Context, spanName string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return trace.SpanFromContext(ctx).TracerProvider().Tracer(t.name, t.opts...).Start(ctx, spanName, opts...)
}
