package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/memory"
)

// baseRoute is the defaults route the tests start from.
func baseRoute() policy.Route {
	return policy.Route{
		Header:           "Idempotency-Key",
		Methods:          []string{"POST", "PATCH"},
		Owner:            identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-User"},
		Fingerprint:      fingerprint.Spec{Headers: []string{"Content-Type"}, Query: true, Body: fingerprint.BodyRaw},
		Lease:            2 * time.Second,
		Retention:        time.Hour,
		Concurrent:       policy.ConcurrentWait,
		WaitTimeout:      5 * time.Second,
		ReplayStatuses:   []policy.StatusRange{{Min: 200, Max: 299}},
		MaxRequestBytes:  1 << 10,
		MaxResponseBytes: 1 << 10,
		OnStoreError:     policy.FailClosed,
		OnAbandoned:      policy.AbandonedTakeover,
	}
}

// upstream is a backend that counts the requests it receives per path.
type upstream struct {
	*httptest.Server
	mu      sync.Mutex
	hits    map[string]int
	last    *http.Request
	handler http.HandlerFunc
}

func (u *upstream) count(path string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hits[path]
}

func newUpstream(t *testing.T, h http.HandlerFunc) *upstream {
	u := &upstream{hits: map[string]int{}, handler: h}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		u.mu.Lock()
		u.hits[r.URL.Path]++
		u.last = r.Clone(context.Background())
		u.mu.Unlock()
		u.handler(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

// created answers like an API that creates something: 201 with headers a
// replay must repeat exactly.
func created(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Location", "/v1/orders/1")
	h.Set("ETag", `"v1"`)
	h.Add("Set-Cookie", "a=1; Path=/")
	h.Add("Set-Cookie", "b=2; Path=/; HttpOnly")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"echo":%q}`, body)
}

type harness struct {
	t     *testing.T
	up    *upstream
	store store.Store
	front *httptest.Server
	logs  *bytes.Buffer
	logMu *sync.Mutex
}

// logText returns the log so far, under the lock the handler writes with.
func (h *harness) logText() string {
	h.logMu.Lock()
	defer h.logMu.Unlock()
	return h.logs.String()
}

type option func(*proxy.Options, *policy.Route, *[]policy.Route)

func newHarness(t *testing.T, h http.HandlerFunc, opts ...option) *harness {
	t.Helper()
	up := newUpstream(t, h)
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	target, _ := url.Parse(up.URL)
	logs := &bytes.Buffer{}
	logMu := &sync.Mutex{}
	o := proxy.Options{Upstream: target, Store: st, Timeout: 5 * time.Second,
		Logger: slog.New(slog.NewJSONHandler(lockedWriter{logMu, logs}, nil))}
	defaults := baseRoute()
	var routes []policy.Route
	for _, opt := range opts {
		opt(&o, &defaults, &routes)
	}
	pol, err := policy.New(defaults, routes)
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	o.Policy = func() *policy.Policy { return pol }
	p, err := proxy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	return &harness{t: t, up: up, store: o.Store, front: front, logs: logs, logMu: logMu}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

type result struct {
	status int
	header http.Header
	body   string
}

func (h *harness) do(method, path, user, key, body string, extra ...string) result {
	h.t.Helper()
	req, err := http.NewRequest(method, h.front.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.Header.Set("X-User", user)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Add(extra[i], extra[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("reading body: %v", err)
	}
	return result{resp.StatusCode, resp.Header, string(b)}
}

func problemType(t *testing.T, r result) string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json (status %d, body %s)", ct, r.status, r.body)
	}
	var p problem.Details
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if p.Status != r.status || p.Title == "" {
		t.Fatalf("problem %+v does not match status %d", p, r.status)
	}
	return strings.TrimPrefix(p.Type, problem.Base)
}

func TestForwardOnceAndReplayExactly(t *testing.T) {
	h := newHarness(t, created)
	first := h.do("POST", "/v1/orders", "alice", "k1", `{"amount":5}`)
	if first.status != 201 || first.header.Get(proxy.ReplayedHeader) != "" {
		t.Fatalf("first = %d %v", first.status, first.header)
	}
	for i := 0; i < 3; i++ {
		again := h.do("POST", "/v1/orders", "alice", "k1", `{"amount":5}`)
		if again.status != 201 || again.body != first.body {
			t.Fatalf("replay = %d %q, want 201 %q", again.status, again.body, first.body)
		}
		if again.header.Get(proxy.ReplayedHeader) != "true" {
			t.Fatalf("replay lacks %s: %v", proxy.ReplayedHeader, again.header)
		}
		for _, name := range []string{"Content-Type", "Location", "Etag", "Set-Cookie", "Date", "Content-Length"} {
			if got, want := again.header.Values(name), first.header.Values(name); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("replayed %s = %q, want %q", name, got, want)
			}
		}
		if got := again.header.Values("Set-Cookie"); len(got) != 2 {
			t.Errorf("Set-Cookie lines = %q, want two separate lines", got)
		}
	}
	if n := h.up.count("/v1/orders"); n != 1 {
		t.Fatalf("upstream saw %d requests, want 1", n)
	}
}

func TestKeyReusedWithDifferentRequestIs422(t *testing.T) {
	h := newHarness(t, created)
	h.do("POST", "/v1/orders", "alice", "k1", `{"amount":5}`)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/orders", `{"amount":6}`},
		{"POST", "/v1/orders?x=1", `{"amount":5}`},
		{"PATCH", "/v1/orders", `{"amount":5}`},
		{"POST", "/v1/other", `{"amount":5}`},
	} {
		r := h.do(c.method, c.path, "alice", "k1", c.body)
		if r.status != 422 || problemType(t, r) != "key-reused" {
			t.Fatalf("%+v: got %d %s, want 422 key-reused", c, r.status, r.body)
		}
	}
	if n := h.up.count("/v1/orders") + h.up.count("/v1/other"); n != 1 {
		t.Fatalf("upstream saw %d requests, want 1", n)
	}
}

func TestOwnersAreIsolated(t *testing.T) {
	h := newHarness(t, created)
	a := h.do("POST", "/v1/orders", "alice", "same", `{"who":"a"}`)
	b := h.do("POST", "/v1/orders", "bob", "same", `{"who":"b"}`)
	if a.status != 201 || b.status != 201 || b.header.Get(proxy.ReplayedHeader) != "" {
		t.Fatalf("a=%d b=%d %v: bob must get his own forward", a.status, b.status, b.header)
	}
	if !strings.Contains(b.body, "b") || strings.Contains(b.body, `\"a\"`) {
		t.Fatalf("bob got %q", b.body)
	}
	if n := h.up.count("/v1/orders"); n != 2 {
		t.Fatalf("upstream saw %d, want 2 (one per owner)", n)
	}
	// Concurrently too: neither blocks nor replays the other.
	var wg sync.WaitGroup
	results := make([]result, 20)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = h.do("POST", "/v1/orders", fmt.Sprintf("user-%d", i), "shared", fmt.Sprintf(`{"who":"%d"}`, i))
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.status != 201 || r.header.Get(proxy.ReplayedHeader) != "" || !strings.Contains(r.body, fmt.Sprintf(`\"%d\"`, i)) {
			t.Fatalf("user-%d got %d %q", i, r.status, r.body)
		}
	}
}

func TestNonReplayableStatusReleasesTheKey(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		created(w, r)
	})
	if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != 500 || r.body != "boom\n" {
		t.Fatalf("got %d %q, want the upstream's 500 passed through", r.status, r.body)
	}
	fail.Store(false)
	if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != 201 || r.header.Get(proxy.ReplayedHeader) != "" {
		t.Fatalf("retry got %d, want a fresh forward", r.status)
	}
	if n := h.up.count("/v1/orders"); n != 2 {
		t.Fatalf("upstream saw %d, want 2", n)
	}
}

func TestInvalidRequestsNeverReachUpstream(t *testing.T) {
	h := newHarness(t, created, func(_ *proxy.Options, d *policy.Route, routes *[]policy.Route) {
		r := *d
		r.Name, r.Match, r.Required = "orders", "POST /v1/orders", true
		*routes = append(*routes, r)
	})
	cases := []struct {
		name, user, key, body string
		extra                 []string
		status                int
		problem               string
	}{
		{"missing key on required route", "alice", "", "{}", nil, 400, "missing-key"},
		{"list syntax", "alice", `"a", "b"`, "{}", nil, 400, "invalid-key"},
		{"too long", "alice", strings.Repeat("k", 256), "{}", nil, 400, "invalid-key"},
		{"twice", "alice", "a", "{}", []string{"Idempotency-Key", "b"}, 400, "invalid-key"},
		{"no owner", "", "k", "{}", nil, 400, "missing-owner"},
		{"body too large", "alice", "k", strings.Repeat("x", 2000), nil, 413, "request-too-large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.do("POST", "/v1/orders", c.user, c.key, c.body, c.extra...)
			if r.status != c.status || problemType(t, r) != c.problem {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, c.status, c.problem)
			}
		})
	}
	// A chunked body over the limit is caught while reading.
	req, _ := http.NewRequest("POST", h.front.URL+"/v1/orders", io.MultiReader(strings.NewReader(strings.Repeat("y", 1500))))
	req.ContentLength = -1
	req.Header.Set("X-User", "alice")
	req.Header.Set("Idempotency-Key", "chunked")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("chunked oversized body: %d, want 413", resp.StatusCode)
	}
	if n := h.up.count("/v1/orders"); n != 0 {
		t.Fatalf("upstream saw %d requests, want 0", n)
	}
}

func TestNotEnforcedRequestsPassThrough(t *testing.T) {
	h := newHarness(t, created, func(_ *proxy.Options, d *policy.Route, routes *[]policy.Route) {
		r := *d
		r.Name, r.Match, r.Mode = "uploads", "/v1/uploads/", policy.ModePassthrough
		*routes = append(*routes, r)
	})
	// No key on an optional route, a passthrough route, a method not listed.
	h.do("POST", "/v1/orders", "alice", "", "{}")
	h.do("POST", "/v1/orders", "alice", "", "{}")
	h.do("POST", "/v1/uploads/x", "alice", "k", "{}")
	h.do("POST", "/v1/uploads/x", "alice", "k", "{}")
	h.do("PUT", "/v1/orders", "alice", "k", "{}")
	h.do("PUT", "/v1/orders", "alice", "k", "{}")
	if n := h.up.count("/v1/orders"); n != 4 {
		t.Fatalf("orders hits = %d, want 4", n)
	}
	if n := h.up.count("/v1/uploads/x"); n != 2 {
		t.Fatalf("uploads hits = %d, want 2", n)
	}
}

func TestForwardedHeadersAreSetByTheProxy(t *testing.T) {
	h := newHarness(t, created)
	h.do("POST", "/v1/orders", "alice", "k", "{}", "X-Forwarded-For", "6.6.6.6", "Connection", "X-Secret", "X-Secret", "s")
	h.up.mu.Lock()
	last := h.up.last
	h.up.mu.Unlock()
	if got := last.Header.Get("X-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want only the client address", got)
	}
	if got := last.Header.Get("X-Secret"); got != "" {
		t.Errorf("a field named in Connection reached the upstream: %q", got)
	}
	target, _ := url.Parse(h.up.URL)
	if last.Host != target.Host {
		t.Errorf("Host = %q, want the upstream's %q", last.Host, target.Host)
	}
	if last.Header.Get("Idempotency-Key") != "k" {
		t.Errorf("the idempotency key must reach the upstream")
	}
}

func TestConcurrentDuplicatesForwardOnce(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		created(w, r)
	})
	const n = 50
	var wg sync.WaitGroup
	results := make([]result, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = h.do("POST", "/v1/orders", "alice", "dup", `{"amount":1}`)
		}()
	}
	// Let the first claim reach the upstream before it answers.
	deadline := time.Now().Add(5 * time.Second)
	for h.up.count("/v1/orders") == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	for i, r := range results {
		if r.status != 201 || r.body != results[0].body {
			t.Fatalf("answer %d = %d %q, want 201 %q", i, r.status, r.body, results[0].body)
		}
	}
	if got := h.up.count("/v1/orders"); got != 1 {
		t.Fatalf("upstream saw %d, want 1", got)
	}
}

func TestConflictModeAndWaitTimeout(t *testing.T) {
	for _, mode := range []policy.Concurrent{policy.ConcurrentConflict, policy.ConcurrentWait} {
		t.Run(string(mode), func(t *testing.T) {
			release := make(chan struct{})
			h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
				<-release
				created(w, r)
			}, func(_ *proxy.Options, d *policy.Route, _ *[]policy.Route) {
				d.Concurrent, d.WaitTimeout = mode, 300*time.Millisecond
			})
			done := make(chan result)
			go func() { done <- h.do("POST", "/v1/orders", "alice", "slow", "{}") }()
			for h.up.count("/v1/orders") == 0 {
				time.Sleep(5 * time.Millisecond)
			}
			r := h.do("POST", "/v1/orders", "alice", "slow", "{}")
			if r.status != 409 || problemType(t, r) != "request-in-progress" || r.header.Get("Retry-After") == "" {
				t.Fatalf("duplicate got %d %v %s, want 409 with Retry-After", r.status, r.header, r.body)
			}
			close(release)
			if first := <-done; first.status != 201 {
				t.Fatalf("first = %d", first.status)
			}
			if r := h.do("POST", "/v1/orders", "alice", "slow", "{}"); r.header.Get(proxy.ReplayedHeader) != "true" {
				t.Fatalf("after completion: %d, want a replay", r.status)
			}
			if got := h.up.count("/v1/orders"); got != 1 {
				t.Fatalf("upstream saw %d, want 1", got)
			}
		})
	}
}

func TestWaiterClaimsAfterRelease(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			<-release
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		created(w, r)
	})
	first := make(chan result)
	go func() { first <- h.do("POST", "/v1/orders", "alice", "k", "{}") }()
	for h.up.count("/v1/orders") == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	second := make(chan result)
	go func() { second <- h.do("POST", "/v1/orders", "alice", "k", "{}") }()
	time.Sleep(50 * time.Millisecond) // let it start waiting; the test is correct either way
	close(release)
	if r := <-first; r.status != 503 {
		t.Fatalf("first = %d, want the upstream's 503", r.status)
	}
	if r := <-second; r.status != 201 || r.header.Get(proxy.ReplayedHeader) != "" {
		t.Fatalf("waiter = %d, want its own forward after the release", r.status)
	}
}

// failingStore answers every operation with an unavailable error.
type failingStore struct{ store.Store }

func (failingStore) Claim(context.Context, store.ClaimParams) (store.ClaimResult, error) {
	return store.ClaimResult{}, fmt.Errorf("%w: connection refused", store.ErrUnavailable)
}

func TestStoreFailureFailsClosedOrOpen(t *testing.T) {
	withFailingStore := func(o *proxy.Options, _ *policy.Route, _ *[]policy.Route) {
		o.Store = failingStore{memory.New()}
	}
	h := newHarness(t, created, withFailingStore)
	r := h.do("POST", "/v1/orders", "alice", "k", "{}")
	if r.status != 503 || problemType(t, r) != "store-unavailable" || r.header.Get("Retry-After") == "" {
		t.Fatalf("got %d %s, want 503 store-unavailable with Retry-After", r.status, r.body)
	}
	if n := h.up.count("/v1/orders"); n != 0 {
		t.Fatalf("fail closed forwarded %d requests", n)
	}
	if r := h.do("POST", "/v1/orders", "alice", "", "{}"); r.status != 201 {
		t.Fatalf("a request without a key is not enforced and must still pass: %d", r.status)
	}

	open := newHarness(t, created, withFailingStore, func(_ *proxy.Options, d *policy.Route, _ *[]policy.Route) {
		d.OnStoreError = policy.FailOpen
	})
	if r := open.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != 201 {
		t.Fatalf("fail_open got %d, want forwarded", r.status)
	}
}

func TestUpstreamUnreachableReleasesTheKey(t *testing.T) {
	h := newHarness(t, created)
	// Point the proxy at a port nobody listens on.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	target, _ := url.Parse("http://" + dead)
	pol, _ := policy.New(baseRoute(), nil)
	p, _ := proxy.New(proxy.Options{Upstream: target, Store: h.store, Policy: func() *policy.Policy { return pol }})
	front := httptest.NewServer(p)
	defer front.Close()
	req, _ := http.NewRequest("POST", front.URL+"/v1/orders", strings.NewReader("{}"))
	req.Header.Set("X-User", "alice")
	req.Header.Set("Idempotency-Key", "k")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 502 {
		t.Fatalf("got %d, want 502", resp.StatusCode)
	}
	// The key was released: the same request through a healthy proxy forwards.
	if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != 201 || r.header.Get(proxy.ReplayedHeader) != "" {
		t.Fatalf("retry = %d, want a fresh forward", r.status)
	}
}

func TestAmbiguousUpstreamFailureKeepsTheClaim(t *testing.T) {
	cases := map[string]http.HandlerFunc{
		"reset after request": func(w http.ResponseWriter, r *http.Request) {
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		},
		"body cut short": func(w http.ResponseWriter, r *http.Request) {
			conn, buf, _ := w.(http.Hijacker).Hijack()
			buf.WriteString("HTTP/1.1 201 Created\r\nContent-Length: 100\r\nContent-Type: text/plain\r\n\r\npartial")
			buf.Flush()
			conn.Close()
		},
		"timeout": func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(1500 * time.Millisecond)
			created(w, r)
		},
	}
	for name, handler := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, handler, func(o *proxy.Options, d *policy.Route, _ *[]policy.Route) {
				o.Timeout = 500 * time.Millisecond
				d.Lease = 3 * time.Second
				d.Concurrent = policy.ConcurrentConflict
			})
			r := h.do("POST", "/v1/orders", "alice", "k", "{}")
			if r.status != 502 && r.status != 504 {
				t.Fatalf("got %d %s, want 502 or 504", r.status, r.body)
			}
			// Not stored as success, not released: a retry within the lease conflicts.
			r = h.do("POST", "/v1/orders", "alice", "k", "{}")
			if r.status != 409 {
				t.Fatalf("retry got %d %s, want 409 while the claim runs out", r.status, r.body)
			}
			if n := h.up.count("/v1/orders"); n != 1 {
				t.Fatalf("upstream saw %d, want 1", n)
			}
		})
	}
}

func TestOversizedResponseIsStreamedOnceNotRetained(t *testing.T) {
	big := strings.Repeat("z", 5000)
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		io.WriteString(w, big)
	})
	if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != 201 || r.body != big {
		t.Fatalf("first got %d with %d bytes, want 201 with the whole body", r.status, len(r.body))
	}
	r := h.do("POST", "/v1/orders", "alice", "k", "{}")
	if r.status != 409 || problemType(t, r) != "response-not-retained" {
		t.Fatalf("retry got %d %s, want response-not-retained", r.status, r.body)
	}
	if n := h.up.count("/v1/orders"); n != 1 {
		t.Fatalf("upstream saw %d, want 1", n)
	}
}

func TestClientDisconnectStillRecords(t *testing.T) {
	entered := make(chan struct{}, 1)
	proceed := make(chan struct{})
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-proceed
		created(w, r)
	})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", h.front.URL+"/v1/orders", strings.NewReader(`{"a":1}`))
	req.Header.Set("X-User", "alice")
	req.Header.Set("Idempotency-Key", "gone")
	req.Header.Set("Content-Type", "application/json")
	errc := make(chan error)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-entered
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client error = %v, want canceled", err)
	}
	close(proceed)
	// The upstream call finishes and is recorded; the retry replays it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := h.do("POST", "/v1/orders", "alice", "gone", `{"a":1}`)
		if r.status == 201 {
			if r.header.Get(proxy.ReplayedHeader) != "true" {
				t.Fatalf("retry was forwarded again")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retry still %d", r.status)
		}
	}
	if n := h.up.count("/v1/orders"); n != 1 {
		t.Fatalf("upstream saw %d, want 1", n)
	}
}

func TestHeartbeatKeepsSlowClaim(t *testing.T) {
	// The upstream answers when the test has sent its duplicate, not after
	// a fixed time: a duplicate delayed by a loaded machine past a fixed
	// upstream delay found the call completed and was answered with its
	// replay.
	release := make(chan struct{})
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		created(w, r)
	}, func(_ *proxy.Options, d *policy.Route, _ *[]policy.Route) {
		d.Lease = 300 * time.Millisecond
		d.Concurrent = policy.ConcurrentConflict
	})
	done := make(chan result)
	go func() { done <- h.do("POST", "/v1/orders", "alice", "slow", "{}") }()
	for h.up.count("/v1/orders") == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	// Well past the first lease end, the duplicate must still find it running.
	time.Sleep(600 * time.Millisecond)
	r := h.do("POST", "/v1/orders", "alice", "slow", "{}")
	close(release)
	if r.status != 409 {
		t.Fatalf("duplicate past the lease got %d, want 409 (the heartbeat keeps the claim)", r.status)
	}
	if first := <-done; first.status != 201 {
		t.Fatalf("first = %d, want 201", first.status)
	}
	if n := h.up.count("/v1/orders"); n != 1 {
		t.Fatalf("upstream saw %d, want 1", n)
	}
}

func TestStreamingPassthroughIsFlushed(t *testing.T) {
	step := make(chan struct{})
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-step
		io.WriteString(w, "second\n")
	})
	resp, err := http.Get(h.front.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	close(step)
	if err != nil || line != "first\n" {
		t.Fatalf("first line = %q, %v: not flushed before the response ended", line, err)
	}
}

func TestLogsNeverContainSecrets(t *testing.T) {
	h := newHarness(t, created, func(_ *proxy.Options, d *policy.Route, _ *[]policy.Route) {
		d.Owner = identity.OwnerSource{Kind: identity.OwnerAuthorization}
	})
	const key, auth = "secret-key-123456", "Bearer top-secret-token"
	h.do("POST", "/v1/orders", "", key, "{}", "Authorization", auth, "Cookie", "session=cookie-secret")
	h.do("POST", "/v1/orders", "", key, "{}", "Authorization", auth, "Cookie", "session=cookie-secret")
	h.do("POST", "/v1/orders", "", key, `{"x":1}`, "Authorization", auth)
	logs := h.logs.String()
	if !strings.Contains(logs, `"outcome":"replayed"`) {
		t.Fatalf("expected request log lines, got %s", logs)
	}
	for _, secret := range []string{key, "top-secret-token", "cookie-secret"} {
		if strings.Contains(logs, secret) {
			t.Fatalf("logs contain %q:\n%s", secret, logs)
		}
	}
}

func TestUpstreamCannotClaimAReplay(t *testing.T) {
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(proxy.ReplayedHeader, "true")
		created(w, r)
	})
	if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); r.header.Get(proxy.ReplayedHeader) != "" {
		t.Fatalf("original response carries %s from the upstream", proxy.ReplayedHeader)
	}
	if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); len(r.header.Values(proxy.ReplayedHeader)) != 1 {
		t.Fatalf("replay has %q, want one marker", r.header.Values(proxy.ReplayedHeader))
	}
}
