package proxy_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	vk "github.com/valkey-io/valkey-go"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/lazy"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// valkeyCalls reads INFO commandstats of the server at c: calls per
// command name, script-internal commands included.
func valkeyCalls(t *testing.T, c vk.Client) map[string]int64 {
	t.Helper()
	info, err := c.Do(t.Context(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	return valkeytest.CommandCalls(info)
}

// valkeyGate serves a proxy made from o in front of the Valkey at addr
// (records under prefix, the replay cache of cacheBytes; 0 is off), its
// store wrapped as main wraps it: the cache is reached through lazy and
// the metrics wrapper (of o.Metrics; none when nil).
func valkeyGate(t *testing.T, addr, prefix string, cacheBytes int64, o proxy.Options) *httptest.Server {
	t.Helper()
	front := httptest.NewServer(valkeyProxy(t, addr, prefix, cacheBytes, o))
	t.Cleanup(front.Close)
	return front
}

// valkeyProxy is valkeyGate's proxy, for a test that serves it wrapped.
func valkeyProxy(t *testing.T, addr, prefix string, cacheBytes int64, o proxy.Options) *proxy.Proxy {
	t.Helper()
	return valkeyProxyOpts(t, valkey.Options{Addrs: []string{addr}, KeyPrefix: prefix, CacheBytes: cacheBytes}, o)
}

// valkeyProxyOpts is valkeyProxy over a Valkey store made with vo.
func valkeyProxyOpts(t *testing.T, vo valkey.Options, o proxy.Options) *proxy.Proxy {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vs, err := valkey.New(ctx, vo)
	if err != nil {
		t.Fatalf("valkey store: %v", err)
	}
	lz := lazy.New("valkey")
	if err := lz.Set(vs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lz.Close() })
	o.Store = metrics.InstrumentStore(lz, o.Metrics)
	p, err := proxy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Before the store closes (the cleanups run last first): a
		// response the store refused to record goes on being retried in
		// the background, and would otherwise outlive the test into the
		// next one's count of goroutines (TestAttackWaitersThatLeaveLeakNothing
		// after TestFailOpenNeverRunsAnUnacknowledgedCompletionAgain).
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Wait(ctx); err != nil {
			t.Errorf("a response was still to record 10 s after the test: %v", err)
		}
	})
	return p
}

// cacheRig is two proxies over one Valkey and one upstream: cached with
// the replay cache on, plain with it off, sharing their records.
type cacheRig struct {
	t             *testing.T
	up            *upstream
	cached, plain *httptest.Server
	raw           vk.Client
	srv           *valkeytest.Server
	reg           *prometheus.Registry
	last          map[string]int64
}

func newCacheRig(t *testing.T, storeTimeout time.Duration) *cacheRig {
	srv := valkeytest.Start(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "cache-" + hex.EncodeToString(b) + ":"
	up := newUpstream(t, created)
	target, _ := url.Parse(up.URL)
	pol, err := policy.New(baseRoute(), nil)
	if err != nil {
		t.Fatal(err)
	}
	reg, m := testMetrics(t)
	gate := func(cacheBytes int64, mt *metrics.Metrics) *httptest.Server {
		return valkeyGate(t, srv.Addr(), prefix, cacheBytes, proxy.Options{Upstream: target, Timeout: 5 * time.Second,
			StoreTimeout: storeTimeout, Metrics: mt, Policy: func() *policy.Policy { return pol }})
	}
	raw, err := vk.NewClient(vk.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	r := &cacheRig{t: t, up: up, cached: gate(1<<20, m), plain: gate(0, nil), raw: raw, srv: srv, reg: reg}
	// Loads the scripts, which a first EVALSHA would otherwise EVAL.
	for _, g := range []*httptest.Server{r.cached, r.plain} {
		r.post(g, "warm", "warm-"+g.URL, "{}")
	}
	r.last = valkeyCalls(t, raw)
	return r
}

// commands returns the commands the proxies sent since the last call,
// their round trips (scripts, and a cached read's MULTI .. EXEC) apart;
// idle PINGs and the rig's own INFO are not counted.
func (r *cacheRig) commands() (trips int64, all map[string]int64) {
	now := valkeyCalls(r.t, r.raw)
	all = map[string]int64{}
	for name, n := range now {
		if name == "info" || name == "ping" {
			continue
		}
		if n -= r.last[name]; n != 0 {
			all[name] = n
		}
	}
	r.last = now
	return all["evalsha"] + all["evalsha_ro"] + all["eval"] + all["eval_ro"] + all["exec"], all
}

func (r *cacheRig) post(g *httptest.Server, user, key, body string) result {
	r.t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.URL+"/v1/orders", strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User", user)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	resp.Header.Del("Date") // the only field a replay does not repeat
	return result{resp.StatusCode, resp.Header, string(b)}
}

// TestReplayCacheThroughProxy (docs/performance.md, "Replay cache"): a fresh
// request costs claim + complete with the cache on; the first replay on the
// instance that completed it reads the record once; later ones send no command
// and are byte for byte the replay a claim answers (an instance without cache);
// a reused key with another body is refused from the cache as from a claim, and
// another owner's same key is its own record.
func TestReplayCacheThroughProxy(t *testing.T) {
	r := newCacheRig(t, 0)
	first := r.post(r.cached, "alice", "k1", `{"n":1}`)
	if first.status != http.StatusCreated || r.up.count("/v1/orders") != 3 {
		t.Fatalf("fresh request: %d, %d upstream calls", first.status, r.up.count("/v1/orders"))
	}
	if trips, all := r.commands(); trips != 2 || all["evalsha"] != 2 || all["exec"] != 0 || all["hgetall"] != 0 {
		t.Fatalf("fresh request sent %v (%d round trips), want claim + complete", all, trips)
	}
	viaClaim := r.post(r.plain, "alice", "k1", `{"n":1}`)
	if trips, all := r.commands(); trips != 1 || all["evalsha"] != 1 {
		t.Fatalf("replay without cache sent %v, want one claim", all)
	}
	if viaClaim.header.Get(proxy.ReplayedHeader) != "true" {
		t.Fatalf("no replay without cache: %+v", viaClaim)
	}
	r.post(r.cached, "alice", "k1", `{"n":1}`)
	if trips, all := r.commands(); trips != 1 || all["exec"] != 1 || all["evalsha"] != 0 {
		t.Fatalf("first replay with the cache sent %v, want one cached read", all)
	}
	for range 3 {
		got := r.post(r.cached, "alice", "k1", `{"n":1}`)
		if trips, all := r.commands(); len(all) != 0 {
			t.Fatalf("cached replay sent %v (%d round trips), want nothing", all, trips)
		}
		if !reflect.DeepEqual(got, viaClaim) {
			t.Fatalf("cached replay\n%+v\ndiffers from the claimed one\n%+v", got, viaClaim)
		}
	}
	if got := r.post(r.cached, "alice", "k1", `{"n":2}`); got.status != http.StatusUnprocessableEntity || problemType(t, got) != "key-reused" {
		t.Fatalf("reused key, other body: %d %s", got.status, got.body)
	}
	if _, all := r.commands(); len(all) != 0 {
		t.Fatalf("a mismatch against a cached record sent %v, want nothing", all)
	}
	if got := r.post(r.cached, "bob", "k1", `{"n":1}`); got.status != http.StatusCreated || got.header.Get(proxy.ReplayedHeader) != "" {
		t.Fatalf("another owner's same key: %d %v, want its own first answer", got.status, got.header)
	}
	if n := r.up.count("/v1/orders"); n != 4 {
		t.Fatalf("%d upstream calls, want 4 (2 warm-ups, alice, bob)", n)
	}
	if got := cacheLookups(t, r.reg, "hit"); got != 4 {
		t.Fatalf("idemgate_replay_cache_total{result=hit} = %v, want 4 (3 replays, 1 mismatch)", got)
	}
	if got := cacheLookups(t, r.reg, "miss"); got != 1 {
		t.Fatalf("idemgate_replay_cache_total{result=miss} = %v, want 1", got)
	}
}

// TestReplayCacheNotWhileStoreFails: once a store operation has failed
// (here a claim against a frozen server, whose connections stay open with
// their cache), a cached record is not replayed: every keyed request
// fails closed until the store answers a claim again.
func TestReplayCacheNotWhileStoreFails(t *testing.T) {
	// The store timeout bounds the requests sent to the frozen server, and
	// also every store operation of the warm-ups and of k1's first post,
	// which must succeed: 300 ms is within what a loaded machine can delay
	// one round trip to a live Valkey.
	r := newCacheRig(t, time.Second)
	r.post(r.cached, "alice", "k1", `{}`)
	r.post(r.cached, "alice", "k1", `{}`)
	if got := r.post(r.cached, "alice", "k1", `{}`); got.header.Get(proxy.ReplayedHeader) != "true" || cacheLookups(t, r.reg, "hit") != 1 {
		t.Fatalf("replay before the outage: %d %v, %v hits", got.status, got.header, cacheLookups(t, r.reg, "hit"))
	}
	r.srv.Pause()
	if got := r.post(r.cached, "alice", "during", `{}`); got.status != http.StatusServiceUnavailable {
		t.Fatalf("fresh request with the store frozen: %d %s, want 503", got.status, got.body)
	}
	if got := r.post(r.cached, "alice", "k1", `{}`); got.status != http.StatusServiceUnavailable {
		t.Fatalf("replay after a store failure: %d %s, want 503 (fail closed, not from the cache)", got.status, got.body)
	}
	r.srv.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for r.post(r.cached, "alice", "after", `{}`).status != http.StatusCreated {
		if time.Now().After(deadline) {
			t.Fatal("the store never answered again")
		}
	}
	if got := r.post(r.cached, "alice", "k1", `{}`); got.status != http.StatusCreated || got.header.Get(proxy.ReplayedHeader) != "true" {
		t.Fatalf("replay after the outage: %d %v", got.status, got.header)
	}
	if n := r.up.count("/v1/orders"); n != 4 {
		t.Fatalf("%d upstream calls, want 4 (2 warm-ups, k1, after)", n)
	}
}

// cacheLookups reads idemgate_replay_cache_total{result} from reg.
func cacheLookups(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "idemgate_replay_cache_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no idemgate_replay_cache_total{result=%q}", result)
	return 0
}

var _ store.ReplayCache = (*lazy.Store)(nil)
