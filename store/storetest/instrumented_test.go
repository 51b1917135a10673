package storetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/memory"
	"github.com/idemgate/idemgate/store/storetest"
	"github.com/idemgate/idemgate/tracing"
)

// ops are the store operations both wrappers instrument.
var ops = []string{"claim", "complete", "release", "extend", "get", "delete", "ping"}

// TestContractInstrumented runs the whole contract through the metrics and
// tracing wrappers, composed as main composes them, over a memory store:
// a wrapper must pass every answer and error through unchanged, as go-cloud
// runs drivertest through its portable types. Every call carries a span,
// as in a traced request, so the tracing wrapper records one per call.
// Afterwards every operation must have been timed and traced.
func TestContractInstrumented(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	request := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1},
		SpanID:     trace.SpanID{1},
		TraceFlags: trace.FlagsSampled,
	})
	storetest.RunHarness(t, storetest.Harness{
		NewStore: func(t *testing.T, clock *storetest.Clock) store.Store {
			var st store.Store = memory.New(memory.WithClock(clock.Now))
			return tracing.InstrumentStore(metrics.InstrumentStore(st, m), tp)
		},
		ClockStart: time.Date(2025, 1, 2, 3, 4, 5, 678_900_000, time.UTC),
		Context: func(ctx context.Context) context.Context {
			return trace.ContextWithRemoteSpanContext(ctx, request)
		},
	})
	// The subtests run in parallel after this function returns.
	t.Cleanup(func() {
		timed := map[string]bool{}
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() != "idemgate_store_operation_duration_seconds" {
				continue
			}
			for _, s := range f.GetMetric() {
				for _, l := range s.GetLabel() {
					if l.GetName() == "operation" && s.GetHistogram().GetSampleCount() > 0 {
						timed[l.GetValue()] = true
					}
				}
			}
		}
		traced := map[string]bool{}
		for _, s := range spans.Ended() {
			if s.Parent().TraceID() == request.TraceID() {
				traced[s.Name()] = true
			}
		}
		for _, op := range ops {
			if !timed[op] {
				t.Errorf("no %s operation timed by the metrics wrapper", op)
			}
			if !traced["store."+op] {
				t.Errorf("no store.%s span recorded by the tracing wrapper", op)
			}
		}
	})
}
