package tracing

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/store"
)

// InstrumentStore returns s with a span around every Claim, Complete,
// Release, Extend, Get, Delete and Ping that runs within a traced request:
// "store.claim", "store.complete", ..., of kind client, with AttrScope and
// the result (AttrStoreState, AttrStoreTakeover, AttrStoreActed), and the
// error recorded with status Error. A call whose context carries no span
// (the lease heartbeat, waiters' polling, admin probes) gets none, so
// background work does not start a trace of its own. The idempotency key
// and the owner are never attributes, and are cut out of recorded error
// messages. Results and errors pass through unchanged. With a no-op tp it
// returns s.
func InstrumentStore(s store.Store, tp trace.TracerProvider) store.Store {
	if isNoop(tp) {
		return s
	}
	return store.Observe(s, &storeTracer{tracer: tp.Tracer(ScopeName)})
}

// storeTracer is the store.Observer of InstrumentStore.
type storeTracer struct {
	tracer trace.Tracer
}

// Start implements store.Observer: it begins the span of c, or none when
// ctx belongs to no trace. CachedReplay is untraced: a hit makes no store
// call, and a miss is one read whose request span shows the replay.
func (t *storeTracer) Start(ctx context.Context, c store.Call) (context.Context, any) {
	if c.Op == store.OpCachedReplay || !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, nil
	}
	var attrs []attribute.KeyValue
	if c.Identity.Scope != "" {
		attrs = append(attrs, AttrScope.String(c.Identity.Scope))
	}
	ctx, span := t.tracer.Start(ctx, "store."+c.Op.String(), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, span
}

// End implements store.Observer: it records the result (AttrStoreState,
// AttrStoreTakeover, AttrStoreActed) or the error, and ends the span. The
// path of Index and the key of every call are never attributes.
func (t *storeTracer) End(c store.Call, started any, o store.Outcome) {
	span, _ := started.(trace.Span)
	if span == nil {
		return
	}
	switch c.Op {
	case store.OpClaim:
		end(span, c.Identity, o.Err, AttrStoreState.String(o.State.String()), AttrStoreTakeover.Bool(o.Takeover))
	case store.OpComplete, store.OpRelease, store.OpExtend, store.OpDelete:
		end(span, c.Identity, o.Err, AttrStoreActed.Bool(o.Acted))
	case store.OpGet:
		end(span, c.Identity, o.Err, AttrStoreState.String(o.State.String()))
	default:
		end(span, c.Identity, o.Err)
	}
}

// end records err (redacted of id's key and owner) or attrs, and ends span.
func end(span trace.Span, id store.Identity, err error, attrs ...attribute.KeyValue) {
	if span == nil {
		return
	}
	if err != nil {
		msg := redact(err.Error(), id)
		// Not span.RecordError: it would copy err.Error() verbatim.
		span.AddEvent(semconv.ExceptionEventName, trace.WithAttributes(
			semconv.ExceptionType(fmt.Sprintf("%T", err)), semconv.ExceptionMessage(msg)))
		span.SetStatus(codes.Error, msg)
	} else {
		span.SetAttributes(attrs...)
	}
	span.End()
}

// redact cuts the idempotency key and the owner out of a store error
// message, in case a backend error quotes a record key.
func redact(msg string, id store.Identity) string {
	for _, secret := range []string{id.Key, id.Owner} {
		if secret != "" {
			msg = strings.ReplaceAll(msg, secret, "[redacted]")
		}
	}
	return msg
}
