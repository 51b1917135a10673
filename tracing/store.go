package tracing

import (
	"context"
	"fmt"
	"strings"
	"time"

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
	return &traced{Store: s, tracer: tp.Tracer(ScopeName)}
}

type traced struct {
	store.Store
	tracer trace.Tracer
}

// start begins the span of op, or returns a nil span when ctx belongs to no
// trace.
func (t *traced) start(ctx context.Context, op string, scope string) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, nil
	}
	var attrs []attribute.KeyValue
	if scope != "" {
		attrs = append(attrs, AttrScope.String(scope))
	}
	return t.tracer.Start(ctx, "store."+op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
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

func (t *traced) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	ctx, span := t.start(ctx, "claim", p.Identity.Scope)
	res, err := t.Store.Claim(ctx, p)
	end(span, p.Identity, err, AttrStoreState.String(res.State.String()), AttrStoreTakeover.Bool(res.Takeover))
	return res, err
}

func (t *traced) Complete(ctx context.Context, id store.Identity, token string, resp store.Response) (bool, error) {
	ctx, span := t.start(ctx, "complete", id.Scope)
	ok, err := t.Store.Complete(ctx, id, token, resp)
	end(span, id, err, AttrStoreActed.Bool(ok))
	return ok, err
}

func (t *traced) Release(ctx context.Context, id store.Identity, token string) (bool, error) {
	ctx, span := t.start(ctx, "release", id.Scope)
	ok, err := t.Store.Release(ctx, id, token)
	end(span, id, err, AttrStoreActed.Bool(ok))
	return ok, err
}

func (t *traced) Extend(ctx context.Context, id store.Identity, token string, lease time.Duration) (bool, error) {
	ctx, span := t.start(ctx, "extend", id.Scope)
	ok, err := t.Store.Extend(ctx, id, token, lease)
	end(span, id, err, AttrStoreActed.Bool(ok))
	return ok, err
}

func (t *traced) Get(ctx context.Context, id store.Identity) (*store.Record, error) {
	ctx, span := t.start(ctx, "get", id.Scope)
	rec, err := t.Store.Get(ctx, id)
	state := store.Absent
	if rec != nil {
		state = rec.State
	}
	end(span, id, err, AttrStoreState.String(state.String()))
	return rec, err
}

func (t *traced) Delete(ctx context.Context, id store.Identity) (bool, error) {
	ctx, span := t.start(ctx, "delete", id.Scope)
	ok, err := t.Store.Delete(ctx, id)
	end(span, id, err, AttrStoreActed.Bool(ok))
	return ok, err
}

func (t *traced) Ping(ctx context.Context) error {
	ctx, span := t.start(ctx, "ping", "")
	err := t.Store.Ping(ctx)
	end(span, store.Identity{}, err)
	return err
}

// Index implements store.Store for the store behind t, traced as
// store.index (the path is not an attribute: it names a customer's
// resource).
func (t *traced) Index(ctx context.Context, path string, id store.Identity) error {
	ctx, span := t.start(ctx, "index", id.Scope)
	err := t.Store.Index(ctx, path, id)
	end(span, id, err)
	return err
}

// Tombstone implements store.Store for the store behind t, traced as
// store.tombstone.
func (t *traced) Tombstone(ctx context.Context, res store.Resource) (int, error) {
	ctx, span := t.start(ctx, "tombstone", res.Scope)
	n, err := t.Store.Tombstone(ctx, res)
	end(span, store.Identity{Owner: res.Owner, Scope: res.Scope}, err)
	return n, err
}

// CachedReplay implements store.ReplayCache for the store behind t,
// untraced: a hit makes no store call, and a miss is one read whose
// request span shows the replay.
func (t *traced) CachedReplay(ctx context.Context, id store.Identity) (*store.Record, store.CacheResult, error) {
	return store.CachedReplayOf(ctx, t.Store, id)
}
