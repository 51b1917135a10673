// Package tracing builds idemgate's OpenTelemetry tracer provider and the spans for requests, upstream calls and store operations.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of the spans this package creates
// (store operations); the request and upstream spans carry otelhttp's.
const ScopeName = "github.com/idemgate/idemgate/tracing"

// Span attributes idemgate adds. None of them ever holds an idempotency
// key or an owner: both identify a client's operation or the client itself
// and would leak into every tracing backend.
const (
	// AttrRoute is the matched route's name, on the request span (set by
	// the proxy).
	AttrRoute = attribute.Key("idemgate.route")
	// AttrScope is the record's key scope (store.Identity.Scope, the route's
	// `scope`), on every store span: records are not kept by route.
	AttrScope = attribute.Key("idemgate.scope")
	// AttrOutcome is how the request ended, one of the metrics.Outcome*
	// values (forwarded, replayed, conflict, ...), on the request span.
	AttrOutcome = attribute.Key("idemgate.outcome")
	// AttrStoreState is the record state a store.claim answered (claimed,
	// running, completed, abandoned) or a store.get found (absent too).
	AttrStoreState = attribute.Key("idemgate.store.state")
	// AttrStoreTakeover is true on a store.claim that took over a claim
	// whose lease had ended.
	AttrStoreTakeover = attribute.Key("idemgate.store.takeover")
	// AttrStoreActed is whether store.complete, store.release, store.extend
	// or store.delete changed the record (false: the claim's token no
	// longer held it, or there was nothing to delete).
	AttrStoreActed = attribute.Key("idemgate.store.acted")
)

// Option adjusts Setup.
type Option func(*options)

type options struct {
	log *slog.Logger
}

// WithLogger makes Setup report span export failures and recoveries on log
// (one line per change, not per batch); without it they are discarded.
func WithLogger(log *slog.Logger) Option {
	return func(o *options) { o.log = log }
}

// Propagator returns the propagator idemgate reads from requests and writes
// to the upstream: W3C Trace Context (traceparent, tracestate) and W3C
// Baggage (https://www.w3.org/TR/trace-context/,
// https://www.w3.org/TR/baggage/).
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Setup builds the tracer provider cfg asks for. With cfg.Enabled false it
// returns a no-op provider, builds no exporter and opens no connection.
// Otherwise it returns an SDK provider that samples new traces at
// cfg.SampleRatio and follows an incoming parent's sampled flag, and
// batches spans to an OTLP exporter (cfg.Protocol, cfg.Endpoint; the
// OTEL_EXPORTER_OTLP_* environment variables fill in what cfg leaves unset,
// as the SDK reads them itself). The resource carries service.name
// (cfg.ServiceName, unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES
// set it) and service.version (version).
//
// The exporter connects lazily, so an unreachable collector is not an error
// here; spans are then dropped and logged (WithLogger). shutdown flushes the
// spans still queued and stops the exporter; call it once the servers have
// stopped, with a deadline. Errors: an exporter or resource that cannot be
// built from cfg, wrapped.
func Setup(ctx context.Context, cfg Config, version string, opts ...Option) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if !cfg.Enabled {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	o := options{log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	exp, err := newExporter(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP %s exporter: %w", cfg.Protocol, err)
	}
	// Later detectors win: the environment overrides the config file, as
	// OTEL_SERVICE_NAME is documented to.
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName(cfg.ServiceName), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if errors.Is(err, resource.ErrPartialResource) {
		o.log.Warn("tracing: some resource attributes were ignored", "err", err)
	} else if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, nil, fmt.Errorf("tracing: resource: %w", err)
	}
	sdk := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(&loggingExporter{SpanExporter: exp, log: o.log, endpoint: cfg.Endpoint}),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
	)
	return sdk, sdk.Shutdown, nil
}

func newExporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, error) {
	isURL := strings.Contains(cfg.Endpoint, "://")
	switch cfg.Protocol {
	case ProtocolHTTPProtobuf:
		var opts []otlptracehttp.Option
		switch {
		case isURL:
			u, err := url.Parse(cfg.Endpoint)
			if err != nil {
				return nil, fmt.Errorf("endpoint %q: %w", cfg.Endpoint, err)
			}
			// The SDK uses a URL's path as is; a bare collector URL means
			// the standard traces path (OTLP specification, "OTLP/HTTP").
			if u.Path == "" || u.Path == "/" {
				u.Path = "/v1/traces"
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		case cfg.Endpoint != "":
			opts = append(opts, otlptracehttp.WithEndpoint(cfg.Endpoint))
		}
		if cfg.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		return otlptracehttp.New(ctx, opts...)
	case ProtocolGRPC:
		var opts []otlptracegrpc.Option
		switch {
		case isURL:
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		case cfg.Endpoint != "":
			opts = append(opts, otlptracegrpc.WithEndpoint(cfg.Endpoint))
		}
		if cfg.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	return nil, fmt.Errorf("unknown protocol %q (want %s or %s)", cfg.Protocol, ProtocolGRPC, ProtocolHTTPProtobuf)
}

// loggingExporter logs when exporting starts failing and when it recovers,
// instead of letting the SDK hand every failed batch to the process-global
// OpenTelemetry error handler (which prints to stderr). A failed batch is
// dropped either way: tracing never slows or fails a request.
type loggingExporter struct {
	sdktrace.SpanExporter
	log      *slog.Logger
	endpoint string

	mu      sync.Mutex
	failing bool
}

func (e *loggingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case err != nil && !e.failing:
		e.failing = true
		e.log.Warn("tracing: span export failed; dropping spans until the collector answers",
			"endpoint", e.endpoint, "spans", len(spans), "err", err)
	case err == nil && e.failing:
		e.failing = false
		e.log.Info("tracing: span export recovered", "endpoint", e.endpoint)
	}
	return nil
}

// Handler returns next wrapped in a server span per request (otelhttp): the
// span continues the trace of an incoming traceparent (propagator), is
// named after the method, carries the HTTP semantic-convention attributes
// and the status, and the proxy adds AttrRoute and AttrOutcome to it. The
// span is in the request's context, so store calls and the upstream call
// become its children. With a no-op tp it returns next unchanged.
func Handler(next http.Handler, tp trace.TracerProvider, propagator propagation.TextMapPropagator) http.Handler {
	if isNoop(tp) {
		return next
	}
	return otelhttp.NewHandler(next, "idemgate",
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(propagator),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()), // Prometheus has the metrics
	)
}

// Transport returns base wrapped so that every upstream request gets a
// client span, child of the request span, and carries that span's context
// in traceparent (and baggage) via propagator. The wrapper keeps the
// request body non-rewindable, as the proxy requires for at-most-once
// forwarding. With a no-op tp it returns base unchanged.
func Transport(base http.RoundTripper, tp trace.TracerProvider, propagator propagation.TextMapPropagator) http.RoundTripper {
	if isNoop(tp) {
		return base
	}
	return otelhttp.NewTransport(base,
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(propagator),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
	)
}

func isNoop(tp trace.TracerProvider) bool {
	if tp == nil {
		return true
	}
	_, ok := tp.(noop.TracerProvider)
	return ok
}
