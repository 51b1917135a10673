package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/memory"
)

const testToken = "s3cret-admin-token"

// userTokenOwner is the stored owner for Authorization "Bearer user-token":
// printf 'Bearer user-token' | sha256sum.
const userTokenOwner = "sha256:b8f2c25d6e8d00fcf1f2844e82b27980ecf77eca5d03b0ac22806f5532de6f3a"

// faultyStore wraps the memory store to inject the failures the admin
// handler must fail closed on, and records the contexts it is called with.
type faultyStore struct {
	store.Store
	mu        sync.Mutex
	pingErr   error
	pingBlock bool  // Ping waits for its context to end, like a hung server
	opErr     error // returned by Get and Delete
	pingCtx   context.Context
	pings     int
	getCtx    context.Context // the context of the last Get
}

func (f *faultyStore) Ping(ctx context.Context) error {
	f.mu.Lock()
	f.pingCtx, f.pings = ctx, f.pings+1
	err, block := f.pingErr, f.pingBlock
	f.mu.Unlock()
	if block {
		<-ctx.Done()
		return fmt.Errorf("ping: %w: %w", store.ErrUnavailable, ctx.Err())
	}
	if err != nil {
		return err
	}
	return f.Store.Ping(ctx)
}

func (f *faultyStore) Get(ctx context.Context, id store.Identity) (*store.Record, error) {
	f.mu.Lock()
	err := f.opErr
	f.getCtx = ctx
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return f.Store.Get(ctx, id)
}

func (f *faultyStore) Delete(ctx context.Context, id store.Identity) (bool, error) {
	f.mu.Lock()
	err := f.opErr
	f.mu.Unlock()
	if err != nil {
		return false, err
	}
	return f.Store.Delete(ctx, id)
}

// testClock is a settable clock for the memory store, so record times are
// exact.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// t0 has a millisecond part so that the millisecond formatting is checked.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 125_000_000, time.UTC)

func testRoute(name, match string, owner identity.OwnerSource) policy.Route {
	return policy.Route{
		Name:             name,
		Match:            match,
		Mode:             policy.ModeEnforce,
		Header:           "Idempotency-Key",
		Methods:          []string{"POST"},
		Owner:            owner,
		AllowGlobalKeys:  owner.Kind == identity.OwnerNone,
		Fingerprint:      fingerprint.Spec{Body: fingerprint.BodyRaw},
		Lease:            30 * time.Second,
		Retention:        24 * time.Hour,
		Concurrent:       policy.ConcurrentWait,
		WaitTimeout:      time.Second,
		ReplayStatuses:   []policy.StatusRange{{Min: 200, Max: 299}},
		MaxRequestBytes:  1 << 20,
		MaxResponseBytes: 1 << 20,
		OnStoreError:     policy.FailClosed,
		OnAbandoned:      policy.AbandonedTakeover,
	}
}

// testPolicy has a header-owned route, an Authorization-owned route and a
// global-keys defaults route. The two routes keep their records in scopes
// named as they are, so the records the tests address by route are current
// ones (the layout 1 fallback reads only layout 1 records, and only with
// Options.V1Lookup).
func testPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	orders := testRoute("orders", "POST /orders", identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-User"})
	orders.Scope = "orders"
	payments := testRoute("payments", "POST /payments", identity.OwnerSource{Kind: identity.OwnerAuthorization})
	payments.Scope = "payments"
	p, err := policy.New(testRoute("", "", identity.OwnerSource{Kind: identity.OwnerNone}), []policy.Route{orders, payments})
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	return p
}

type fixture struct {
	h     http.Handler
	store *faultyStore
	clock *testClock
	logs  *bytes.Buffer
	reg   *prometheus.Registry
}

func newFixture(t *testing.T, mutate func(*Options)) *fixture {
	t.Helper()
	clock := &testClock{now: t0}
	mem := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	t.Cleanup(func() { mem.Close() })
	f := &fixture{store: &faultyStore{Store: mem}, clock: clock, logs: &bytes.Buffer{}, reg: prometheus.NewRegistry()}
	pol := testPolicy(t)
	opts := Options{
		Store:    f.store,
		Policy:   func() *policy.Policy { return pol },
		Gatherer: f.reg,
		Token:    testToken,
		Logger:   slog.New(slog.NewTextHandler(&lockedWriter{w: f.logs}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		// The records these tests write under the route's name and without
		// a recipe are layout 1 records, found through the fallback that
		// store.v1_lookup (on by default) turns on.
		V1Lookup: true,
	}
	if mutate != nil {
		mutate(&opts)
	}
	f.h = New(opts)
	return f
}

// claim creates a running record through the store's own API.
func (f *fixture) claim(t *testing.T, id store.Identity, fingerprint, token string, lease, retention time.Duration) {
	t.Helper()
	res, err := f.store.Claim(context.Background(), store.ClaimParams{Identity: id, Fingerprint: fingerprint, Token: token, Lease: lease, Retention: retention})
	if err != nil || res.State != store.Claimed {
		t.Fatalf("Claim(%v) = %v, %v; want Claimed", id, res.State, err)
	}
}

func (f *fixture) complete(t *testing.T, id store.Identity, token string, resp store.Response) {
	t.Helper()
	if ok, err := f.store.Complete(context.Background(), id, token, resp); err != nil || !ok {
		t.Fatalf("Complete(%v) = %v, %v", id, ok, err)
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (f *fixture) do(t *testing.T, method, target string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, vs := range header {
		req.Header[k] = vs
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec
}

func authed() http.Header {
	return http.Header{"Authorization": {"Bearer " + testToken}}
}

func recordsURL(params ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(params); i += 2 {
		q.Set(params[i], params[i+1])
	}
	return "/admin/records?" + q.Encode()
}

// assertProblem checks an RFC 9457 response and returns its detail.
func assertProblem(t *testing.T, rec *httptest.ResponseRecorder, status int, kind string) string {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status = %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json", ct)
	}
	var p map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body is not JSON: %v; %s", err, rec.Body)
	}
	if p["type"] != problem.Base+kind {
		t.Errorf("type = %v, want %s", p["type"], problem.Base+kind)
	}
	if p["status"] != float64(status) {
		t.Errorf("problem status = %v, want %d", p["status"], status)
	}
	if s, _ := p["title"].(string); s == "" || s != catalogTitle(kind) {
		t.Errorf("problem title %q, want the catalog's %q: %s", s, catalogTitle(kind), rec.Body)
	}
	detail, _ := p["detail"].(string)
	if detail == "" {
		t.Errorf("problem has no detail: %s", rec.Body)
	}
	return detail
}

func TestHealthz(t *testing.T) {
	f := newFixture(t, nil)
	f.store.pingErr = fmt.Errorf("down: %w", store.ErrUnavailable) // liveness must not depend on the store
	rec := f.do(t, http.MethodGet, "/healthz", nil)
	if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
		t.Fatalf("GET /healthz = %d %q, want 200 ok", rec.Code, rec.Body)
	}
	if f.store.pingCtx != nil {
		t.Error("/healthz called the store")
	}
	rec = f.do(t, http.MethodPost, "/healthz", nil)
	assertProblem(t, rec, http.StatusMethodNotAllowed, "method-not-allowed")
	if got := rec.Header().Get("Allow"); got != "GET, HEAD" {
		t.Errorf("Allow = %q, want GET, HEAD", got)
	}
}

func TestReadyz(t *testing.T) {
	t.Run("ready", func(t *testing.T) {
		f := newFixture(t, nil)
		rec := f.do(t, http.MethodGet, "/readyz", nil)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET /readyz = %d %s, want 200", rec.Code, rec.Body)
		}
		if cc := rec.Header().Get("Cache-Control"); cc != "no-store" {
			t.Errorf("Cache-Control = %q, want no-store", cc)
		}
		dl, ok := f.store.pingCtx.Deadline()
		if !ok || time.Until(dl) > ReadyTimeout {
			t.Errorf("Ping context deadline = %v (set %v), want within %v", dl, ok, ReadyTimeout)
		}
	})
	t.Run("store down", func(t *testing.T) {
		f := newFixture(t, nil)
		f.store.pingErr = fmt.Errorf("dial tcp 127.0.0.1:1: connection refused: %w", store.ErrUnavailable)
		rec := f.do(t, http.MethodGet, "/readyz", nil)
		detail := assertProblem(t, rec, http.StatusServiceUnavailable, "not-ready")
		if !strings.Contains(detail, "store") {
			t.Errorf("detail %q does not name the store check", detail)
		}
		if cc := rec.Header().Get("Cache-Control"); cc != "no-store" {
			t.Errorf("Cache-Control = %q, want no-store", cc)
		}
	})
	t.Run("store hangs", func(t *testing.T) {
		f := newFixture(t, nil)
		f.store.pingBlock = true
		start := time.Now()
		rec := f.do(t, http.MethodGet, "/readyz", nil)
		took := time.Since(start)
		detail := assertProblem(t, rec, http.StatusServiceUnavailable, "not-ready")
		if !strings.Contains(detail, "store") {
			t.Errorf("detail %q does not name the store check", detail)
		}
		if took < ReadyTimeout || took > ReadyTimeout+2*time.Second {
			t.Errorf("/readyz answered after %v, want just over %v", took, ReadyTimeout)
		}
	})
	t.Run("no policy", func(t *testing.T) {
		f := newFixture(t, func(o *Options) { o.Policy = func() *policy.Policy { return nil } })
		rec := f.do(t, http.MethodGet, "/readyz", nil)
		detail := assertProblem(t, rec, http.StatusServiceUnavailable, "not-ready")
		if !strings.Contains(detail, "policy") {
			t.Errorf("detail %q does not name the policy check", detail)
		}
	})
	t.Run("no store", func(t *testing.T) {
		f := newFixture(t, func(o *Options) { o.Store = nil })
		assertProblem(t, f.do(t, http.MethodGet, "/readyz", nil), http.StatusServiceUnavailable, "not-ready")
	})
	t.Run("draining", func(t *testing.T) {
		var draining bool
		f := newFixture(t, func(o *Options) { o.Draining = func() bool { return draining } })
		if rec := f.do(t, http.MethodGet, "/readyz", nil); rec.Code != http.StatusOK {
			t.Fatalf("GET /readyz before the drain = %d %s, want 200", rec.Code, rec.Body)
		}
		draining = true
		f.store.pingCtx = nil
		detail := assertProblem(t, f.do(t, http.MethodGet, "/readyz", nil), http.StatusServiceUnavailable, "not-ready")
		if !strings.Contains(detail, "shutting down") {
			t.Errorf("detail %q does not say the process is shutting down", detail)
		}
		if f.store.pingCtx != nil {
			t.Error("/readyz pinged the store while draining")
		}
		if rec := f.do(t, http.MethodGet, "/healthz", nil); rec.Code != http.StatusOK {
			t.Errorf("GET /healthz while draining = %d, want 200 (liveness must not restart a draining pod)", rec.Code)
		}
	})
}

func TestMetricsFromInjectedRegistry(t *testing.T) {
	f := newFixture(t, nil)
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "idemgate_admin_test_total", Help: "test counter"})
	f.reg.MustRegister(c)
	c.Add(3)
	rec := f.do(t, http.MethodGet, "/metrics", nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", rec.Code)
	}
	body := rec.Body.String()
	if !strings.Contains(body, "idemgate_admin_test_total 3") {
		t.Errorf("metrics body lacks the injected counter:\n%s", body)
	}
	if strings.Contains(body, "go_goroutines") {
		t.Error("metrics body contains the global registry's Go collector")
	}
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader("# HELP idemgate_admin_test_total test counter\n# TYPE idemgate_admin_test_total counter\nidemgate_admin_test_total 3\n"), "idemgate_admin_test_total"); err != nil {
		t.Error(err)
	}

	nog := newFixture(t, func(o *Options) { o.Gatherer = nil })
	assertProblem(t, nog.do(t, http.MethodGet, "/metrics", nil), http.StatusNotFound, "metrics-not-configured")
}

func TestAdminAuth(t *testing.T) {
	f := newFixture(t, nil)
	target := recordsURL("route", "orders", "owner", "h:alice", "key", "k1")
	cases := []struct {
		name, authz, wantChallenge string
	}{
		{"missing", "", `Bearer realm="idemgate-admin"`},
		{"wrong token", "Bearer nope", `Bearer realm="idemgate-admin", error="invalid_token"`},
		{"token prefix", "Bearer " + testToken[:len(testToken)-1], `Bearer realm="idemgate-admin", error="invalid_token"`},
		{"token with suffix", "Bearer " + testToken + "x", `Bearer realm="idemgate-admin", error="invalid_token"`},
		{"basic scheme", "Basic " + testToken, `Bearer realm="idemgate-admin"`},
		{"empty bearer", "Bearer ", `Bearer realm="idemgate-admin"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.authz != "" {
				h.Set("Authorization", tc.authz)
			}
			for _, m := range []string{http.MethodGet, http.MethodDelete, http.MethodPut} {
				rec := f.do(t, m, target, h)
				assertProblem(t, rec, http.StatusUnauthorized, "admin-unauthorized")
				if got := rec.Header().Get("WWW-Authenticate"); got != tc.wantChallenge {
					t.Errorf("%s WWW-Authenticate = %q, want %q", m, got, tc.wantChallenge)
				}
			}
		})
	}
	// An unauthenticated caller learns nothing about which admin paths exist.
	assertProblem(t, f.do(t, http.MethodGet, "/admin/nothing-here", nil), http.StatusUnauthorized, "admin-unauthorized")
	// The scheme is case-insensitive (RFC 9110 section 11.1).
	h := http.Header{"Authorization": {"bearer " + testToken}}
	assertProblem(t, f.do(t, http.MethodGet, target, h), http.StatusNotFound, "admin-record-not-found")
	assertProblem(t, f.do(t, http.MethodGet, "/admin/nothing-here", authed()), http.StatusNotFound, "not-found")
}

func TestAdminDisabledWithoutToken(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Token = "" })
	f.claim(t, store.Identity{Owner: "h:alice", Scope: "orders", Key: "k1"}, "fp", "t", time.Minute, time.Hour)
	target := recordsURL("route", "orders", "owner", "h:alice", "key", "k1")
	for _, h := range []http.Header{nil, {"Authorization": {"Bearer "}}, {"Authorization": {"Bearer x"}}} {
		for _, m := range []string{http.MethodGet, http.MethodDelete} {
			detail := assertProblem(t, f.do(t, m, target, h), http.StatusForbidden, "admin-disabled")
			if !strings.Contains(detail, "token is not configured") {
				t.Errorf("detail %q does not say the token is not configured", detail)
			}
		}
	}
	if rec, _ := f.store.Get(context.Background(), store.Identity{Owner: "h:alice", Scope: "orders", Key: "k1"}); rec == nil {
		t.Fatal("record deleted through a disabled admin API")
	}
	// The rest of the listener keeps working.
	if rec := f.do(t, http.MethodGet, "/healthz", nil); rec.Code != http.StatusOK {
		t.Errorf("GET /healthz = %d with admin disabled", rec.Code)
	}
}

func TestRecordsBadRequests(t *testing.T) {
	f := newFixture(t, nil)
	cases := []struct {
		name   string
		target string
		status int
		kind   string
	}{
		{"no params", "/admin/records", http.StatusBadRequest, "admin-bad-request"},
		{"malformed query", "/admin/records?route=orders&owner=h:a&key=%zz", http.StatusBadRequest, "admin-bad-request"},
		{"no route", recordsURL("owner", "h:a", "key", "k"), http.StatusBadRequest, "admin-bad-request"},
		{"no key", recordsURL("route", "orders", "owner", "h:a"), http.StatusBadRequest, "admin-bad-request"},
		{"empty key", recordsURL("route", "orders", "owner", "h:a", "key", ""), http.StatusBadRequest, "admin-bad-request"},
		{"no owner", recordsURL("route", "orders", "key", "k"), http.StatusBadRequest, "admin-bad-request"},
		{"owner and authorization", recordsURL("route", "payments", "owner", "h:a", "authorization", "Bearer x", "key", "k"), http.StatusBadRequest, "admin-bad-request"},
		{"empty authorization", recordsURL("route", "payments", "authorization", "", "key", "k"), http.StatusBadRequest, "admin-bad-request"},
		{"authorization on header-owned route", recordsURL("route", "orders", "authorization", "Bearer x", "key", "k"), http.StatusBadRequest, "admin-bad-request"},
		{"unknown route", recordsURL("route", "nope", "owner", "h:a", "key", "k"), http.StatusNotFound, "admin-unknown-route"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, m := range []string{http.MethodGet, http.MethodDelete} {
				assertProblem(t, f.do(t, m, tc.target, authed()), tc.status, tc.kind)
			}
		})
	}
	rec := f.do(t, http.MethodPost, recordsURL("route", "orders", "owner", "h:a", "key", "k"), authed())
	assertProblem(t, rec, http.StatusMethodNotAllowed, "method-not-allowed")
	if got := rec.Header().Get("Allow"); got != "GET, HEAD, DELETE" {
		t.Errorf("Allow = %q, want GET, HEAD, DELETE", got)
	}
}

func TestRecordsInspect(t *testing.T) {
	// The handler's clock is the store's, so each record's age is known.
	var f *fixture
	f = newFixture(t, func(o *Options) { o.Now = func() time.Time { return f.clock.Now() } })
	running := store.Identity{Owner: "h:alice", Scope: "orders", Key: "order-1"}
	const holderToken = "secret-holder-token"
	f.claim(t, running, "hs1:running", holderToken, 30*time.Second, 24*time.Hour)
	stale := store.Identity{Owner: "h:alice", Scope: "orders", Key: "stale"}
	f.claim(t, stale, "hs1:stale", "t-stale", time.Second, 24*time.Hour)
	completed := store.Identity{Owner: userTokenOwner, Scope: "payments", Key: "pay 1/é"}
	f.claim(t, completed, "hs1:done", "t-done", 30*time.Second, 24*time.Hour)
	global := store.Identity{Owner: "", Scope: "default", Key: "g"}
	f.claim(t, global, "hs1:big", "t-big", 30*time.Second, 0)
	f.clock.Advance(1500 * time.Millisecond)
	f.complete(t, completed, "t-done", store.Response{
		Status: 201,
		Header: http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"}},
		Body:   []byte(`{"id":1}`),
	})
	f.complete(t, global, "t-big", store.Response{Status: 200, Omitted: true})

	get := func(target string) map[string]any {
		t.Helper()
		rec := f.do(t, http.MethodGet, target, authed())
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s = %d %s", target, rec.Code, rec.Body)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q", ct)
		}
		if cc := rec.Header().Get("Cache-Control"); cc != "no-store" {
			t.Errorf("Cache-Control = %q, want no-store", cc)
		}
		var m map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	want := func(got map[string]any, want map[string]any) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("fields = %v, want exactly %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %#v, want %#v", k, got[k], v)
			}
		}
	}

	want(get(recordsURL("route", "orders", "owner", "h:alice", "key", "order-1")), map[string]any{
		"scope": "orders", "owner": "h:alice", "key": "order-1", "state": "running",
		"fingerprint": "hs1:running", "created_at": "2026-03-01T12:00:00.125Z", "lease_end": "2026-03-01T12:00:30.125Z",
		"retention_end": "2026-03-02T12:00:00.125Z", "age_seconds": 1.5,
	})
	// Running past its lease end: the holder is presumed dead.
	want(get(recordsURL("route", "orders", "owner", "h:alice", "key", "stale")), map[string]any{
		"scope": "orders", "owner": "h:alice", "key": "stale", "state": "abandoned",
		"fingerprint": "hs1:stale", "created_at": "2026-03-01T12:00:00.125Z", "lease_end": "2026-03-01T12:00:01.125Z",
		"retention_end": "2026-03-02T12:00:00.125Z", "age_seconds": 1.5,
	})
	// The operator gives the raw Authorization value; the handler derives the
	// owner.
	wantCompleted := map[string]any{
		"scope": "payments", "owner": userTokenOwner, "key": "pay 1/é", "state": "completed",
		"fingerprint": "hs1:done", "status": float64(201),
		"response_header_bytes": float64(len("Content-Type: application/json\r\n") + len("Set-Cookie: a=1\r\n") + len("Set-Cookie: b=2\r\n")),
		"response_body_bytes":   float64(8), "omitted": false,
		"created_at": "2026-03-01T12:00:00.125Z", "retention_end": "2026-03-02T12:00:01.625Z", "stored_at": "2026-03-01T12:00:01.625Z", "age_seconds": 1.5,
	}
	want(get(recordsURL("route", "payments", "authorization", "Bearer user-token", "key", "pay 1/é")), wantCompleted)
	want(get(recordsURL("route", "payments", "owner", userTokenOwner, "key", "pay 1/é")), wantCompleted)
	// owner= present but empty is the global scope, not a missing parameter.
	want(get("/admin/records?route=default&owner=&key=g"), map[string]any{
		"scope": "default", "owner": "", "key": "g", "state": "completed", "fingerprint": "hs1:big",
		"status": float64(200), "response_header_bytes": float64(0), "response_body_bytes": float64(0), "omitted": true,
		"created_at": "2026-03-01T12:00:00.125Z", "stored_at": "2026-03-01T12:00:01.625Z", "age_seconds": 1.5,
	})

	// Scoping: another owner, route or key does not see the record.
	for _, target := range []string{
		recordsURL("route", "orders", "owner", "h:bob", "key", "order-1"),
		recordsURL("route", "default", "owner", "h:alice", "key", "order-1"),
		recordsURL("route", "orders", "owner", "h:alice", "key", "order-2"),
		recordsURL("route", "payments", "authorization", "Bearer other-token", "key", "pay 1/é"),
	} {
		assertProblem(t, f.do(t, http.MethodGet, target, authed()), http.StatusNotFound, "admin-record-not-found")
	}
	// A hung store cannot hold an admin request forever.
	if dl, ok := f.store.getCtx.Deadline(); !ok || time.Until(dl) > StoreTimeout {
		t.Errorf("Get context deadline = %v (set %v), want within %v", dl, ok, StoreTimeout)
	}
	// The holder token is never exposed.
	rec := f.do(t, http.MethodGet, recordsURL("route", "orders", "owner", "h:alice", "key", "order-1"), authed())
	if strings.Contains(rec.Body.String(), holderToken) {
		t.Error("record view leaks the holder token")
	}
}

func TestRecordsPurge(t *testing.T) {
	f := newFixture(t, nil)
	id := store.Identity{Owner: "h:alice", Scope: "orders", Key: "very-secret-key"}
	f.claim(t, id, "fp", "t", time.Minute, time.Hour)
	other := store.Identity{Owner: "h:bob", Scope: "orders", Key: "very-secret-key"}
	f.claim(t, other, "fp", "t-bob", time.Minute, time.Hour)
	changed, stop := f.store.Watch(id)
	defer stop()
	otherChanged, stopOther := f.store.Watch(other)
	defer stopOther()
	target := recordsURL("route", "orders", "owner", "h:alice", "key", id.Key)

	// A record within its lease is not purged without force: its request
	// may still be at the backend.
	assertProblem(t, f.do(t, http.MethodDelete, target, authed()), http.StatusConflict, "admin-record-running")
	if got, _ := f.store.Get(context.Background(), id); got == nil || got.State != store.Running {
		t.Fatalf("refused purge changed the record: %+v", got)
	}
	select {
	case <-changed:
		t.Fatal("refused purge woke the record's watchers")
	default:
	}

	rec := f.do(t, http.MethodDelete, target+"&force=true", authed())
	if rec.Code != http.StatusNoContent || rec.Body.Len() != 0 {
		t.Fatalf("DELETE force = %d %q, want 204 and no body", rec.Code, rec.Body)
	}
	select {
	case <-changed:
	default:
		t.Error("purge did not wake the record's watchers")
	}
	select {
	case <-otherChanged:
		t.Error("purge woke another owner's watcher")
	default:
	}
	assertProblem(t, f.do(t, http.MethodGet, target, authed()), http.StatusNotFound, "admin-record-not-found")
	assertProblem(t, f.do(t, http.MethodDelete, target, authed()), http.StatusNotFound, "admin-record-not-found")
	if got, _ := f.store.Get(context.Background(), other); got == nil {
		t.Error("purge removed another owner's record")
	}
	// A woken waiter re-claims and gets the key afresh; the purged holder
	// can no longer complete it with its old token.
	f.claim(t, id, "fp2", "t2", time.Minute, time.Hour)
	if ok, err := f.store.Complete(context.Background(), id, "t", store.Response{Status: 200}); err != nil || ok {
		t.Errorf("purged holder's Complete = %v, %v; want false", ok, err)
	}

	// Completed and abandoned records purge without force.
	f.complete(t, id, "t2", store.Response{Status: 201})
	if rec := f.do(t, http.MethodDelete, target, authed()); rec.Code != http.StatusNoContent {
		t.Errorf("DELETE completed = %d %s, want 204", rec.Code, rec.Body)
	}
	f.clock.Advance(2 * time.Minute) // bob's lease ends: abandoned
	bobTarget := recordsURL("route", "orders", "owner", "h:bob", "key", other.Key)
	if rec := f.do(t, http.MethodDelete, bobTarget, authed()); rec.Code != http.StatusNoContent {
		t.Errorf("DELETE abandoned = %d %s, want 204", rec.Code, rec.Body)
	}
	select {
	case <-otherChanged:
	default:
		t.Error("purge of the abandoned record did not wake its watchers")
	}

	logs := f.logs.String()
	if !strings.Contains(logs, "admin purge") || !strings.Contains(logs, "route=orders") || !strings.Contains(logs, "force=true") {
		t.Errorf("purge not logged with its route and force:\n%s", logs)
	}
	// The digest names one operation (owner, scope and key), as the
	// proxy's lines do: alice and bob share the key name.
	for _, purged := range []store.Identity{id, other} {
		if !strings.Contains(logs, "key_hash="+sha256Hex(fmt.Sprintf("%d:%s%d:%s%s", len(purged.Owner), purged.Owner, len(purged.Scope), purged.Scope, purged.Key))[:12]) {
			t.Errorf("purge log lacks the digest of %s's record:\n%s", purged.Owner, logs)
		}
	}
	for _, secret := range []string{id.Key, "h:alice", "alice", "bob"} {
		if strings.Contains(logs, secret) {
			t.Errorf("log contains raw %q:\n%s", secret, logs)
		}
	}
}

func TestRecordsStoreFailureFailsClosed(t *testing.T) {
	f := newFixture(t, nil)
	f.store.opErr = fmt.Errorf("read tcp: i/o timeout: %w", store.ErrUnavailable)
	target := recordsURL("route", "orders", "owner", "h:alice", "key", "k")
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		assertProblem(t, f.do(t, m, target, authed()), http.StatusServiceUnavailable, "store-unavailable")
	}
	f.store.opErr = errors.New("decode: corrupt record")
	assertProblem(t, f.do(t, http.MethodGet, target, authed()), http.StatusInternalServerError, "admin-internal")
}

func TestRecordsWithoutPolicy(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Policy = func() *policy.Policy { return nil } })
	assertProblem(t, f.do(t, http.MethodGet, recordsURL("route", "orders", "owner", "h:a", "key", "k"), authed()),
		http.StatusServiceUnavailable, "policy-not-loaded")
}

func TestUnknownPath(t *testing.T) {
	f := newFixture(t, nil)
	assertProblem(t, f.do(t, http.MethodGet, "/nothing", nil), http.StatusNotFound, "not-found")
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// catalogTitle is the title problem.Catalog gives the kind named slug.
func catalogTitle(slug string) string {
	for _, k := range problem.Catalog() {
		if k.Slug == slug {
			return k.Title
		}
	}
	return ""
}

// TestRecordsPerHost: with upstream.pass_host (Options.Scoping) a route
// whose pattern names no host keeps a record per host, and /admin/records
// derives its identity as the proxy does (identity.Scoping.Identity): host=
// is required there (a 400 that says so), the host's case, trailing dot
// and the listener scheme's default port do not matter, and a purge takes
// only that host's record.
func TestRecordsPerHost(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Scoping = identity.Scoping{PassHost: true} })
	pol := testPolicy(t)
	var orders *policy.Route
	for _, r := range pol.Routes() {
		if r.Name == "orders" {
			orders = r
		}
	}
	t1 := store.Identity{Owner: "h:alice", Scope: orders.Scope + "@t1.example", Key: "k1"}
	t2 := store.Identity{Owner: "h:alice", Scope: orders.Scope + "@t2.example", Key: "k1"}
	for _, id := range []store.Identity{t1, t2} {
		f.claim(t, id, "fp", "tok", time.Minute, time.Hour)
		f.complete(t, id, "tok", store.Response{Status: 201})
	}
	target := recordsURL("route", "orders", "owner", "h:alice", "key", "k1")

	detail := assertProblem(t, f.do(t, http.MethodGet, target, authed()), http.StatusBadRequest, "admin-bad-request")
	if !strings.Contains(detail, "missing query parameter: host") || !strings.Contains(detail, "pass_host") {
		t.Errorf("detail %q, want it to say host is needed and why", detail)
	}
	assertProblem(t, f.do(t, http.MethodGet, target+"&host=https://t1.example/", authed()), http.StatusBadRequest, "admin-bad-request")
	for _, host := range []string{"t1.example", "T1.Example.", "t1.example:80"} {
		rec := f.do(t, http.MethodGet, target+"&host="+url.QueryEscape(host), authed())
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"scope":"`+t1.Scope+`"`) {
			t.Errorf("GET host=%s = %d %s, want t1.example's record", host, rec.Code, rec.Body)
		}
	}
	// :443 is the default port only when the proxy listener serves TLS.
	assertProblem(t, f.do(t, http.MethodGet, target+"&host=t1.example:443", authed()), http.StatusNotFound, "admin-record-not-found")
	if rec := f.do(t, http.MethodDelete, target+"&host=t1.example", authed()); rec.Code != http.StatusNoContent {
		t.Fatalf("DELETE host=t1.example = %d %s", rec.Code, rec.Body)
	}
	if got, _ := f.store.Get(context.Background(), t1); got != nil {
		t.Errorf("purge left t1.example's record: %+v", got)
	}
	if got, _ := f.store.Get(context.Background(), t2); got == nil {
		t.Error("purge of t1.example's record removed t2.example's")
	}

	tls := newFixture(t, func(o *Options) { o.Scoping, o.ProxyHTTPS = identity.Scoping{PassHost: true}, true })
	tls.claim(t, t1, "fp", "tok", time.Minute, time.Hour)
	if rec := tls.do(t, http.MethodGet, target+"&host=t1.example:443", authed()); rec.Code != http.StatusOK {
		t.Errorf("GET host=t1.example:443 on a TLS proxy = %d %s, want t1.example's record", rec.Code, rec.Body)
	}

	// Without pass_host the host is not part of any scope and is ignored.
	off := newFixture(t, nil)
	shared := store.Identity{Owner: "h:alice", Scope: orders.Scope, Key: "k1"}
	off.claim(t, shared, "fp", "tok", time.Minute, time.Hour)
	for _, q := range []string{"", "&host=t1.example"} {
		if rec := off.do(t, http.MethodGet, target+q, authed()); rec.Code != http.StatusOK {
			t.Errorf("GET%s without pass_host = %d %s, want the shared record", q, rec.Code, rec.Body)
		}
	}
}
