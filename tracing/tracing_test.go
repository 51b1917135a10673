package tracing_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/memory"
	"github.com/idemgate/idemgate/tracing"
)

// The key and owner of the test requests; no span may ever show them.
const (
	secretKey   = "key-7f3a-SECRET"
	secretOwner = "owner-alice-SECRET"
	secretMark  = "SECRET"
)

// rig is a real proxy.Proxy between an httptest client and backend, traced
// into an in-memory exporter exactly as cmd/idemgate wires it.
type rig struct {
	t      *testing.T
	front  *httptest.Server
	spans  *tracetest.InMemoryExporter
	served chan struct{}

	mu           sync.Mutex
	upstreamHits int
	traceparents []string
}

// newRig starts the rig; wrapStore (may be nil) decorates the memory store
// and backend (may be nil: 201 with an echo of the body) answers upstream.
func newRig(t *testing.T, wrapStore func(store.Store) store.Store, backend http.HandlerFunc) *rig {
	t.Helper()
	r := &rig{t: t, spans: tracetest.NewInMemoryExporter(), served: make(chan struct{}, 16)}
	// A syncer exports each span when it ends, so a span is in the exporter
	// as soon as the handler that ended it has returned.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	if backend == nil {
		backend = func(w http.ResponseWriter, req *http.Request) {
			body, _ := io.ReadAll(req.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"echo":%q}`, body)
		}
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.upstreamHits++
		r.traceparents = append(r.traceparents, req.Header.Get("Traceparent"))
		r.mu.Unlock()
		backend(w, req)
	}))
	t.Cleanup(up.Close)
	target, _ := url.Parse(up.URL)

	var st store.Store = memory.New()
	t.Cleanup(func() { st.Close() })
	if wrapStore != nil {
		st = wrapStore(st)
	}
	defaults := policy.DefaultRoute()
	defaults.Owner = identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-User"}
	defaults.Lease = 5 * time.Second // no heartbeat tick within a test
	defaults.WaitTimeout = time.Second
	orders := defaults
	orders.Name, orders.Match, orders.Required = "create-order", "POST /v1/orders", true
	pol, err := policy.New(defaults, []policy.Route{orders})
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	prop := tracing.Propagator()
	p, err := proxy.New(proxy.Options{
		Upstream:  target,
		Timeout:   5 * time.Second,
		Store:     tracing.InstrumentStore(st, tp),
		Policy:    func() *policy.Policy { return pol },
		Transport: tracing.Transport(proxy.NewTransport(5*time.Second), tp, prop),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := tracing.Handler(p, tp, prop)
	r.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// Deferred: ReverseProxy panics with http.ErrAbortHandler when the
		// client leaves mid-stream. Either way the server span has ended
		// and been exported by now.
		defer func() { r.served <- struct{}{} }()
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(r.front.Close)
	return r
}

// post sends one POST /v1/orders and returns once the proxy's handler has
// returned, so every span of the request is in r.spans.
func (r *rig) post(key, body string, header ...string) *http.Response {
	r.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.front.URL+"/v1/orders", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", `"`+key+`"`)
	req.Header.Set("X-User", secretOwner)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := r.front.Client().Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	r.wait()
	return resp
}

// wait returns once the proxy handler of the next request has returned.
func (r *rig) wait() {
	r.t.Helper()
	select {
	case <-r.served:
	case <-time.After(10 * time.Second):
		r.t.Fatal("the proxy handler did not return")
	}
}

// take returns the spans exported since the last call.
func (r *rig) take() tracetest.SpanStubs {
	s := r.spans.GetSpans()
	r.spans.Reset()
	return s
}

func (r *rig) upstream() (hits int, traceparents []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.upstreamHits, append([]string(nil), r.traceparents...)
}

func attr(s tracetest.SpanStub, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantAttr(t *testing.T, s tracetest.SpanStub, key attribute.Key, want string) {
	t.Helper()
	v, ok := attr(s, key)
	if !ok || v.String() != want {
		t.Errorf("span %q: %s = %q (set %v), want %q", s.Name, key, v.String(), ok, want)
	}
}

// split sorts one request's spans: the server span, otelhttp's upstream
// client span (nil when the upstream was not called), and store spans by name.
func split(t *testing.T, spans tracetest.SpanStubs) (server tracetest.SpanStub, client *tracetest.SpanStub, stores map[string]tracetest.SpanStub) {
	t.Helper()
	stores = map[string]tracetest.SpanStub{}
	servers := 0
	for i, s := range spans {
		switch {
		case s.SpanKind == trace.SpanKindServer:
			server = s
			servers++
		case s.InstrumentationScope.Name == tracing.ScopeName:
			if _, dup := stores[s.Name]; dup {
				t.Errorf("two %s spans in one request", s.Name)
			}
			stores[s.Name] = s
		case s.SpanKind == trace.SpanKindClient:
			if client != nil {
				t.Errorf("two upstream client spans in one request")
			}
			client = &spans[i]
		default:
			t.Errorf("unexpected span %q kind %v scope %q", s.Name, s.SpanKind, s.InstrumentationScope.Name)
		}
	}
	if servers != 1 {
		t.Fatalf("%d server spans, want 1: %v", servers, names(spans))
	}
	return server, client, stores
}

func names(spans tracetest.SpanStubs) []string {
	var n []string
	for _, s := range spans {
		n = append(n, s.Name)
	}
	return n
}

func wantChild(t *testing.T, parent, child tracetest.SpanStub) {
	t.Helper()
	if child.SpanContext.TraceID() != parent.SpanContext.TraceID() || child.Parent.SpanID() != parent.SpanContext.SpanID() {
		t.Errorf("span %q (trace %s, parent %s) is not a child of %q (trace %s, span %s)",
			child.Name, child.SpanContext.TraceID(), child.Parent.SpanID(),
			parent.Name, parent.SpanContext.TraceID(), parent.SpanContext.SpanID())
	}
}

// noSecrets fails when the idempotency key or the owner appears anywhere a
// tracing backend would see it: names, attributes, events, status, resource.
func noSecrets(t *testing.T, spans tracetest.SpanStubs) {
	t.Helper()
	check := func(where, v string) {
		if strings.Contains(v, secretMark) {
			t.Errorf("%s leaks the key or owner: %q", where, v)
		}
	}
	for _, s := range spans {
		check("span name", s.Name)
		check("status", s.Status.Description)
		kvs := append([]attribute.KeyValue(nil), s.Attributes...)
		if s.Resource != nil {
			kvs = append(kvs, s.Resource.Attributes()...)
		}
		for _, e := range s.Events {
			check("event name", e.Name)
			kvs = append(kvs, e.Attributes...)
		}
		for _, kv := range kvs {
			check(fmt.Sprintf("span %q attribute %s", s.Name, kv.Key), kv.Value.String())
		}
	}
}

func TestRequestSpansStoreChildrenAndUpstreamTraceparent(t *testing.T) {
	r := newRig(t, nil, nil)
	var all tracetest.SpanStubs

	// First request: claimed, forwarded once, completed.
	if resp := r.post(secretKey, `{"n":1}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("first request: status %d", resp.StatusCode)
	}
	spans := r.take()
	all = append(all, spans...)
	server, client, stores := split(t, spans)
	wantAttr(t, server, tracing.AttrRoute, "create-order")
	wantAttr(t, server, tracing.AttrOutcome, "forwarded")
	if v, _ := attr(server, "http.response.status_code"); v.AsInt64() != http.StatusCreated {
		t.Errorf("server span status code = %v", v.String())
	}
	if len(stores) != 2 {
		t.Errorf("store spans = %v, want store.claim and store.complete", names(spans))
	}
	claim, complete := stores["store.claim"], stores["store.complete"]
	wantChild(t, server, claim)
	wantAttr(t, claim, tracing.AttrScope, "default")
	wantAttr(t, claim, tracing.AttrStoreState, "claimed")
	wantAttr(t, claim, tracing.AttrStoreTakeover, "false")
	wantChild(t, server, complete)
	wantAttr(t, complete, tracing.AttrStoreActed, "true")
	if client == nil {
		t.Fatal("no upstream client span")
	}
	wantChild(t, server, *client)
	hits, tps := r.upstream()
	if hits != 1 || len(tps) != 1 {
		t.Fatalf("upstream hits = %d", hits)
	}
	want := fmt.Sprintf("00-%s-%s-01", server.SpanContext.TraceID(), client.SpanContext.SpanID())
	if tps[0] != want {
		t.Errorf("upstream traceparent = %q, want %q (same trace, parent = the client span)", tps[0], want)
	}

	// Retry: answered from the store; the upstream is not called again.
	resp := r.post(secretKey, `{"n":1}`)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get(proxy.ReplayedHeader) != "true" {
		t.Fatalf("retry: status %d, replayed %q", resp.StatusCode, resp.Header.Get(proxy.ReplayedHeader))
	}
	spans = r.take()
	all = append(all, spans...)
	server, client, stores = split(t, spans)
	wantAttr(t, server, tracing.AttrOutcome, "replayed")
	wantAttr(t, stores["store.claim"], tracing.AttrStoreState, "completed")
	wantChild(t, server, stores["store.claim"])
	if client != nil || len(stores) != 1 {
		t.Errorf("replay spans = %v, want only the server span and store.claim", names(spans))
	}
	if hits, _ := r.upstream(); hits != 1 {
		t.Errorf("upstream hits after the retry = %d, want 1", hits)
	}

	// The key reused for another body: 422, outcome mismatch.
	if resp := r.post(secretKey, `{"n":2}`); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("reuse: status %d", resp.StatusCode)
	}
	spans = r.take()
	all = append(all, spans...)
	server, _, _ = split(t, spans)
	wantAttr(t, server, tracing.AttrOutcome, "mismatch")

	// A caller's trace continues through idemgate to the upstream.
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r.post("key-other-SECRET", `{"n":3}`, "Traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	spans = r.take()
	all = append(all, spans...)
	server, client, _ = split(t, spans)
	if server.SpanContext.TraceID().String() != callerTrace || server.Parent.SpanID().String() != callerSpan || !server.Parent.IsRemote() {
		t.Errorf("server span trace %s parent %s, want the caller's %s / %s", server.SpanContext.TraceID(), server.Parent.SpanID(), callerTrace, callerSpan)
	}
	_, tps = r.upstream()
	if client == nil || tps[len(tps)-1] != fmt.Sprintf("00-%s-%s-01", callerTrace, client.SpanContext.SpanID()) {
		t.Errorf("upstream traceparent = %q, want the caller's trace %s", tps[len(tps)-1], callerTrace)
	}

	noSecrets(t, all)
}

// failingStore fails every claim of a request with a message that quotes
// the record key, as a backend error might; the scope's owner record
// (policy.OwnerRecord), checked before, passes.
type failingStore struct{ store.Store }

func (f failingStore) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	if p.Identity.Owner == policy.OwnerRecordOwner {
		return f.Store.Claim(ctx, p)
	}
	return store.ClaimResult{}, fmt.Errorf("%w: EVALSHA on idemgate:{%s}:%s/%s: connection reset",
		store.ErrUnavailable, p.Identity.Owner, p.Identity.Scope, p.Identity.Key)
}

func TestStoreErrorIsRecordedWithoutKeyOrOwner(t *testing.T) {
	r := newRig(t, func(s store.Store) store.Store { return failingStore{s} }, nil)
	if resp := r.post(secretKey, `{"n":1}`); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503 (fail closed)", resp.StatusCode)
	}
	spans := r.take()
	server, client, stores := split(t, spans)
	wantAttr(t, server, tracing.AttrOutcome, "store_error")
	if client != nil {
		t.Error("the upstream was called although the claim failed")
	}
	claim, ok := stores["store.claim"]
	if !ok {
		t.Fatalf("no store.claim span: %v", names(spans))
	}
	if claim.Status.Code != codes.Error || !strings.Contains(claim.Status.Description, "connection reset") ||
		!strings.Contains(claim.Status.Description, "[redacted]") {
		t.Errorf("store.claim status = %+v, want Error with the redacted message", claim.Status)
	}
	if len(claim.Events) != 1 || claim.Events[0].Name != "exception" {
		t.Errorf("store.claim events = %+v, want one exception", claim.Events)
	}
	if _, ok := attr(claim, tracing.AttrStoreState); ok {
		t.Error("a failed claim reports a state")
	}
	noSecrets(t, spans)
}

func TestStoreSpansOnlyWithinATrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	st := tracing.InstrumentStore(mem, tp)
	id := store.Identity{Owner: secretOwner, Scope: "create-order", Key: secretKey}

	// The heartbeat and admin probes run without a request span.
	if ok, err := st.Extend(context.Background(), id, "token", time.Second); err != nil || ok {
		t.Fatalf("Extend of an absent record = %v, %v", ok, err)
	}
	if err := st.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans without a parent, want 0: %v", n, names(exp.GetSpans()))
	}

	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	if rec, err := st.Get(ctx, id); err != nil || rec != nil {
		t.Fatalf("Get = %v, %v", rec, err)
	}
	if ok, err := st.Delete(ctx, id); err != nil || ok {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	parent.End()
	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("spans = %v, want store.get, store.delete, request", names(spans))
	}
	wantAttr(t, spans[0], tracing.AttrStoreState, "absent")
	wantAttr(t, spans[1], tracing.AttrStoreActed, "false")
	for _, s := range spans[:2] {
		wantAttr(t, s, tracing.AttrScope, "create-order")
		if s.SpanKind != trace.SpanKindClient || s.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %q kind %v parent %s, want a client span under the request", s.Name, s.SpanKind, s.Parent.SpanID())
		}
	}
	noSecrets(t, spans)
}

// TestPassthroughStreamsAndUpgradesWhenTraced checks that the otelhttp
// wrappers keep what the passthrough path relies on: flushing a streamed
// response as it comes, and a protocol switch (101) whose connection both
// sides keep using.
func TestPassthroughStreamsAndUpgradesWhenTraced(t *testing.T) {
	step := make(chan struct{})
	r := newRig(t, nil, func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("Upgrade") == "echo" {
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
			buf.Flush()
			line, _ := buf.ReadString('\n')
			buf.WriteString("echo " + line)
			buf.Flush()
			return
		}
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-step
		io.WriteString(w, "second\n")
	})

	resp, err := r.front.Client().Get(r.front.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	close(step)
	if err != nil || line != "first\n" {
		t.Fatalf("first line = %q, %v: not flushed before the response ended", line, err)
	}
	if rest, err := io.ReadAll(br); err != nil || string(rest) != "second\n" {
		t.Fatalf("rest of the stream = %q, %v", rest, err)
	}
	resp.Body.Close()
	r.wait()

	conn, err := net.Dial("tcp", r.front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET /chat HTTP/1.1\r\nHost: idemgate\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	br = bufio.NewReader(conn)
	up, err := http.ReadResponse(br, nil)
	if err != nil || up.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %v, %v; want 101", up, err)
	}
	io.WriteString(conn, "ping\n")
	if got, err := br.ReadString('\n'); err != nil || got != "echo ping\n" {
		t.Fatalf("over the upgraded connection got %q, %v", got, err)
	}
	conn.Close()
	r.wait()

	hits, tps := r.upstream()
	if hits != 2 {
		t.Fatalf("upstream hits = %d, want 2", hits)
	}
	servers := 0
	for _, s := range r.take() {
		if s.SpanKind != trace.SpanKindServer {
			continue
		}
		servers++
		wantAttr(t, s, tracing.AttrOutcome, "passthrough")
		if !strings.Contains(strings.Join(tps, " "), s.SpanContext.TraceID().String()) {
			t.Errorf("no upstream traceparent in trace %s: %v", s.SpanContext.TraceID(), tps)
		}
	}
	if servers != 2 {
		t.Errorf("%d server spans, want 2 (stream, upgrade)", servers)
	}
}
