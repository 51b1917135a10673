package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"math"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store/memory"
)

// atkUpstream records the request line of everything that reaches it, so an
// attack test can tell "refused at the edge" from "executed by the backend".
type atkUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
	auth []string // Authorization values received
}

func (u *atkUpstream) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

// atkProxy starts an upstream that answers 201 to everything and idemgate in
// front of it with defaults (mode passthrough unless a test changes it) and
// routes; it returns the proxy's address for raw requests.
func atkProxy(t *testing.T, defaults policy.Route, routes ...policy.Route) (*atkUpstream, string) {
	t.Helper()
	u := &atkUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, r.Method+" "+r.RequestURI)
		u.auth = append(u.auth, r.Header.Values("Authorization")...)
		u.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "created")
	}))
	t.Cleanup(u.Close)
	pol, err := policy.New(defaults, routes)
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	target, _ := url.Parse(u.URL)
	p, err := proxy.New(proxy.Options{Upstream: target, Store: st, Timeout: 5 * time.Second,
		Policy: func() *policy.Policy { return pol }})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	return u, front.Listener.Addr().String()
}

// atkRoute is a route that requires a key on POST, owned by X-User.
func atkRoute(name, match string) policy.Route {
	r := baseRoute()
	r.Name, r.Match, r.Required = name, match, true
	return r
}

// atkSend writes one raw HTTP/1.1 request (head lines without the final
// CRLF pair, body appended) and returns the status and body of the answer.
func atkSend(t *testing.T, addr, head, body string) (int, string) {
	t.Helper()
	if body != "" && !strings.Contains(strings.ToLower(head), "content-length") {
		head += "\r\nContent-Length: " + itoa(len(body))
	}
	c := dialWrite(t, addr, head+"\r\nConnection: close\r\n\r\n"+body)
	defer c.Close()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: reading the response: %v", head, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// TestAttackNonCanonicalRequestsCannotSkipEnforcement sends, without an
// idempotency key, requests that a backend (or a normalizing hop in front
// of it such as nginx, or a framework that ignores case, trailing slashes or
// method case, or honours X-HTTP-Method-Override) may treat as the
// protected POST /v1/orders, while ServeMux matching on the raw form would
// put them on the passthrough defaults. Each must be answered at the edge
// with a 4xx, never forwarded without its route's enforcement: refused as
// ambiguous-request (method variants, a variant of another route as
// strict), or, since policy.Decide, enforced under the stricter route its
// path variant belongs to (400 missing-key here, as no key is sent).
func TestAttackNonCanonicalRequestsCannotSkipEnforcement(t *testing.T) {
	defaults := baseRoute()
	defaults.Mode = policy.ModePassthrough
	host := atkRoute("host-orders", "POST api.example.com/v2/orders")
	uploads := atkRoute("uploads", "/v1/uploads/")
	uploads.Mode = policy.ModePassthrough
	up, addr := atkProxy(t, defaults, atkRoute("orders", "POST /v1/orders"), host,
		atkRoute("items", "POST /v1/items/{id}"), uploads)

	attacks := []struct{ name, head string }{
		{"encoded dot segment", "POST /v1/%2e/orders HTTP/1.1\r\nHost: x\r\nX-User: u"},
		{"encoded dot-dot", "POST /v1/x/%2E%2E/orders HTTP/1.1\r\nHost: x\r\nX-User: u"},
		{"encoded slash", "POST /v1%2Forders HTTP/1.1\r\nHost: x\r\nX-User: u"},
		{"encoded slash out of a wildcard", "POST /v1/items/..%2F..%2Forders HTTP/1.1\r\nHost: x\r\nX-User: u"},
		{"encoded slash out of a passthrough subtree", "POST /v1/uploads/..%2F..%2Fv1%2Forders HTTP/1.1\r\nHost: x\r\nX-User: u"},
		{"backslash", "POST /v1\\orders HTTP/1.1\r\nHost: x\r\nX-User: u"},
		{"trailing slash", "POST /v1/orders/ HTTP/1.1\r\nHost: x\r\nX-User: u"},
		{"upper-case path", "POST /V1/Orders HTTP/1.1\r\nHost: x\r\nX-User: u"},
		{"lower-case method", "post /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: u"},
		{"mixed-case method", "Post /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: u"},
		{"method override on GET", "GET /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: u\r\nX-HTTP-Method-Override: POST"},
		{"method override on PUT", "PUT /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: u\r\nX-Method-Override: post"},
		{"upper-case host", "POST /v2/orders HTTP/1.1\r\nHost: API.Example.COM\r\nX-User: u"},
		{"host with trailing dot", "POST /v2/orders HTTP/1.1\r\nHost: api.example.com.\r\nX-User: u"},
		{"absolute form, upper-case host", "POST http://API.EXAMPLE.COM/v2/orders HTTP/1.1\r\nHost: api.example.com\r\nX-User: u"},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			before := len(up.requests())
			status, body := atkSend(t, addr, a.head, `{"amount":1}`)
			if got := up.requests()[before:]; len(got) > 0 || status < 400 || status >= 500 {
				t.Errorf("%s: got %d %s and the upstream received %q; want a 4xx problem and nothing forwarded", a.name, status, body, got)
			}
		})
	}

	// The canonical forms still work: refused without a key, forwarded with one.
	if status, body := atkSend(t, addr, "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: u", "{}"); status != http.StatusBadRequest || !strings.Contains(body, "missing-key") {
		t.Errorf("canonical request without key: %d %s, want 400 missing-key", status, body)
	}
	for _, head := range []string{
		"POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: u\r\nIdempotency-Key: \"k1\"",
		"POST /v2/orders HTTP/1.1\r\nHost: api.example.com\r\nX-User: u\r\nIdempotency-Key: \"k2\"",
		"POST /v1/uploads/a/b HTTP/1.1\r\nHost: x\r\nX-User: u",
		"POST /v1/uploads/ HTTP/1.1\r\nHost: x\r\nX-User: u",
		"GET /v1/orders/ HTTP/1.1\r\nHost: x",
		"GET /V1/Orders?x=%2F HTTP/1.1\r\nHost: x",
		"POST /v1/items/a%2Fb HTTP/1.1\r\nHost: x\r\nX-User: u\r\nIdempotency-Key: \"k3\"",
	} {
		if status, body := atkSend(t, addr, head, "{}"); status != http.StatusCreated {
			t.Errorf("%q: %d %s, want 201 from the upstream", head, status, body)
		}
	}
}

// TestAttackConnectionNamedFieldsDoNotSplitFingerprintFromUpstream: a field
// the Connection field names is hop-by-hop and never reaches the upstream
// (RFC 9110 section 7.6.1), so it must not enter the fingerprint or the
// owner either. "Connection: Content-Type" made a request that the upstream
// saw without its Content-Type share the fingerprint of the same request
// with it, and the second got the first's response replayed although the
// upstream would have treated it differently.
func TestAttackConnectionNamedFieldsDoNotSplitFingerprintFromUpstream(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	u := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen = append(seen, r.Header.Get("Content-Type"))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "content-type seen: "+r.Header.Get("Content-Type"))
	}))
	t.Cleanup(u.Close)
	pol, err := policy.New(baseRoute(), nil)
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	target, _ := url.Parse(u.URL)
	p, err := proxy.New(proxy.Options{Upstream: target, Store: st, Policy: func() *policy.Policy { return pol }})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	addr := front.Listener.Addr().String()

	head := "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: u\r\nIdempotency-Key: \"k\"\r\nContent-Type: application/json"
	status, body := atkSend(t, addr, head+"\r\nConnection: Content-Type", "{}")
	if status != http.StatusCreated {
		t.Fatalf("first request: %d %s", status, body)
	}
	status, body = atkSend(t, addr, head, "{}")
	if status != http.StatusUnprocessableEntity {
		t.Errorf("same key, request the upstream would see with a Content-Type: %d %q, want 422 (the upstream saw the first without one: %q)", status, body, seen)
	}
}

// TestAttackOwnerFieldNamedByConnectionIsNoOwner: with owner: header:X-User,
// "Connection: X-User" keeps the owner from the upstream; idemgate must not
// scope the key by a value the upstream never sees.
func TestAttackOwnerFieldNamedByConnectionIsNoOwner(t *testing.T) {
	up, addr := atkProxy(t, baseRoute())
	status, body := atkSend(t, addr, "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: u\r\nIdempotency-Key: \"k\"\r\nConnection: X-User", "{}")
	if status != http.StatusBadRequest || !strings.Contains(body, "missing-owner") || len(up.requests()) != 0 {
		t.Errorf("got %d %s, upstream saw %q; want 400 missing-owner and nothing forwarded", status, body, up.requests())
	}
}

// TestAttackWaitersThatLeaveLeakNothing: duplicates wait while the first
// request runs; some of their clients give up. The operation must still run
// once, the waiters that stayed get the replay, a request of another owner
// with the same key is never held by that wait, and once everything is
// answered no goroutine (waits, heartbeats, timers) is left behind.
func TestAttackWaitersThatLeaveLeakNothing(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	hits := map[string]int{}
	u := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		owner := r.Header.Get("X-User")
		mu.Lock()
		hits[owner]++
		mu.Unlock()
		if owner == "a" {
			<-release
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "done for "+owner)
	}))
	t.Cleanup(u.Close)
	d := baseRoute()
	d.Lease = 300 * time.Millisecond // several heartbeats while the first request runs
	pol, err := policy.New(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	target, _ := url.Parse(u.URL)
	p, err := proxy.New(proxy.Options{Upstream: target, Store: st, Policy: func() *policy.Policy { return pol }})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	send := func(ctx context.Context, owner string) (int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", front.URL+"/v1/orders", strings.NewReader("{}"))
		req.Header.Set("X-User", owner)
		req.Header.Set("Idempotency-Key", `"same"`)
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			runtime.Gosched()
			time.Sleep(5 * time.Millisecond)
		}
	}

	first := make(chan string, 1)
	go func() { _, b, _ := send(context.Background(), "a"); first <- b }()
	waitFor("the first request upstream", func() bool { mu.Lock(); defer mu.Unlock(); return hits["a"] == 1 })

	var wg, left sync.WaitGroup
	stayed := make(chan string, 3)
	for i := 0; i < 6; i++ {
		if i%2 == 0 {
			left.Add(1)
		} else {
			wg.Add(1)
		}
		go func(i int) {
			if i%2 == 0 {
				defer left.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				if _, _, err := send(ctx, "a"); err == nil {
					t.Errorf("waiter %d: answered before the first request finished", i)
				}
				return
			}
			defer wg.Done()
			status, b, err := send(context.Background(), "a")
			if err != nil || status != http.StatusCreated {
				t.Errorf("waiter %d: %d %q %v", i, status, b, err)
			}
			stayed <- b
		}(i)
	}
	// Another owner with the same key is another identity: not held.
	if status, b, err := send(context.Background(), "b"); err != nil || status != http.StatusCreated || b != "done for b" {
		t.Errorf("owner b: %d %q %v, want its own 201 while owner a's request runs", status, b, err)
	}
	left.Wait()
	if len(proxyGoroutines()) == 0 {
		t.Fatal("no goroutine runs idemgate code while requests wait: the leak check below would prove nothing")
	}
	close(release)
	wg.Wait()
	close(stayed)
	for b := range stayed {
		if b != "done for a" {
			t.Errorf("waiter got %q, want the replay of owner a's response", b)
		}
	}
	if b := <-first; b != "done for a" {
		t.Errorf("first request got %q", b)
	}
	mu.Lock()
	if hits["a"] != 1 || hits["b"] != 1 {
		t.Errorf("upstream executions per owner: %v, want one each", hits)
	}
	mu.Unlock()
	// Idle upstream connections may stay pooled; what must end is every
	// goroutine running idemgate code: waits, heartbeats, handlers. A
	// completion that met the store timeout on a stalled machine retries
	// in the background (completeLater) and ends with its next attempt:
	// the wait is long for such a machine, and ends as soon as they do.
	var stuck []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if stuck = proxyGoroutines(); len(stuck) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(stuck) > 0 {
		t.Errorf("%d goroutines still run idemgate code after every request was answered:\n%s", len(stuck), strings.Join(stuck, "\n\n"))
	}
}

// proxyGoroutines returns the stacks of the goroutines that run code of
// package proxy or a singleflight wait, other than the caller's.
func proxyGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "proxyGoroutines") {
			continue
		}
		if strings.Contains(g, "idemgate/proxy.") || strings.Contains(g, "singleflight") {
			out = append(out, g)
		}
	}
	return out
}

// TestAttackLargestSizeLimitsKeepTheBody: max_request_bytes validates up to
// math.MaxInt64 bytes, where reading "limit+1 bytes" overflowed to a
// negative count: the request body (sent chunked, or longer than 64 KiB)
// reached the upstream empty and the operation ran and was stored as a
// success. (max_response_bytes had the same overflow; it is now bounded by
// policy, and TestAttackDeclaredLengthDoesNotPreallocate covers the reader.)
func TestAttackLargestSizeLimitsKeepTheBody(t *testing.T) {
	d := baseRoute()
	d.MaxRequestBytes, d.MaxResponseBytes = math.MaxInt64, 256<<20
	var mu sync.Mutex
	var got []int
	u := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, len(b))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(b)
	}))
	t.Cleanup(u.Close)
	pol, err := policy.New(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	target, _ := url.Parse(u.URL)
	p, err := proxy.New(proxy.Options{Upstream: target, Store: st, Policy: func() *policy.Policy { return pol }})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	body := strings.Repeat("z", 100<<10)
	for i, key := range []string{`"a"`, `"a"`} {
		req, _ := http.NewRequest("POST", front.URL+"/v1/orders", io.MultiReader(strings.NewReader(body))) // unknown length: chunked
		req.Header.Set("X-User", "u")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || string(b) != body {
			t.Errorf("request %d: %d with %d bytes, want 201 echoing the %d bytes sent", i, resp.StatusCode, len(b), len(body))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != len(body) {
		t.Errorf("upstream received bodies of %v bytes, want one of %d", got, len(body))
	}
}

// TestAttackAbsoluteFormUserinfoAddsNoCredential: an absolute-form target
// "http://alice:secret@host/..." must not become an Authorization field on
// the way upstream (net/http's transport turns URL userinfo into Basic
// credentials), or a client would reach the upstream as a principal that
// idemgate never saw as the owner.
func TestAttackAbsoluteFormUserinfoAddsNoCredential(t *testing.T) {
	up, addr := atkProxy(t, baseRoute())
	for _, head := range []string{
		"POST http://alice:secret@x/v1/orders HTTP/1.1\r\nHost: x\r\nX-User: u\r\nIdempotency-Key: \"k1\"",
		"POST http://alice:secret@x/v1/orders HTTP/1.1\r\nHost: x\r\nX-User: u",
		"GET http://alice:secret@x/v1/orders HTTP/1.1\r\nHost: x",
	} {
		atkSend(t, addr, head, "{}")
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.seen) == 0 || len(up.auth) > 0 {
		t.Errorf("upstream saw %q with Authorization %q; want requests without credentials", up.seen, up.auth)
	}
}

// variantUpstream counts what it executes per request line and keeps the
// last body it received, as an API behind Express (non-strict trailing
// slash, case-insensitive routing) or Tomcat (";jsessionid=" stripped)
// would execute /v1/orders/, /v1/Orders and /v1/orders;jsessionid=1 as
// /v1/orders.
type variantUpstream struct {
	*httptest.Server
	mu    sync.Mutex
	total int
	lines []string
	body  string
}

func (u *variantUpstream) executed() (int, []string, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.total, append([]string(nil), u.lines...), u.body
}

// variantProxy starts a variantUpstream and idemgate in front of it with
// defaults (baseRoute: POST and PATCH enforced, key optional, owner X-User)
// and routes.
func variantProxy(t *testing.T, routes ...policy.Route) (*variantUpstream, string) {
	t.Helper()
	u := &variantUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.total++
		u.lines = append(u.lines, r.Method+" "+r.RequestURI)
		u.body = string(b)
		n := u.total
		u.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "execution "+itoa(n))
	}))
	t.Cleanup(u.Close)
	pol, err := policy.New(baseRoute(), routes)
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	target, _ := url.Parse(u.URL)
	p, err := proxy.New(proxy.Options{Upstream: target, Store: st, Timeout: 5 * time.Second,
		Policy: func() *policy.Policy { return pol }})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	return u, front.Listener.Addr().String()
}

func passthroughRoute(name, match string) policy.Route {
	r := baseRoute()
	r.Name, r.Match, r.Mode = name, match, policy.ModePassthrough
	return r
}

// TestAttackPathVariantsAreEnforcedUnderTheStricterRoute: with a required
// "POST /v1/orders" and a "/v1/" passthrough route, /v1/orders/, /v1/Orders
// and /v1/orders;jsessionid=1 without a key all ran (the passthrough route
// governed them while the upstream executed the order), and the same key
// sent twice on /v1/orders/ ran twice. Each form is now governed by the
// orders route: 400 missing-key without a key, one execution per key.
func TestAttackPathVariantsAreEnforcedUnderTheStricterRoute(t *testing.T) {
	up, addr := variantProxy(t, atkRoute("orders", "POST /v1/orders"), passthroughRoute("v1", "/v1/"))
	for _, target := range []string{"/v1/orders/", "/v1/Orders", "/v1/orders;jsessionid=1", "/V1/ORDERS/", "/v1/%6Frders"} {
		status, body := atkSend(t, addr, "POST "+target+" HTTP/1.1\r\nHost: x\r\nX-User: u", `{"amount":1}`)
		if n, lines, _ := up.executed(); status != http.StatusBadRequest || !strings.Contains(body, "missing-key") || n != 0 {
			t.Errorf("POST %s without a key: %d %s, upstream executed %q; want 400 missing-key and nothing executed", target, status, body, lines)
		}
	}
	for i, target := range []string{"/v1/orders/", "/v1/orders/"} {
		status, body := atkSend(t, addr, "POST "+target+" HTTP/1.1\r\nHost: x\r\nX-User: u\r\nIdempotency-Key: \"k1\"", `{"amount":1}`)
		if status != http.StatusCreated || body != "execution 1" {
			t.Errorf("POST %s with key k1, attempt %d: %d %q, want 201 from the first execution", target, i+1, status, body)
		}
	}
	for i, target := range []string{"/v1/orders;jsessionid=1", "/v1/orders;jsessionid=2"} {
		status, body := atkSend(t, addr, "POST "+target+" HTTP/1.1\r\nHost: x\r\nX-User: u\r\nIdempotency-Key: \"k2\"", `{"amount":1}`)
		if i == 0 && (status != http.StatusCreated || body != "execution 2") || i == 1 && status/100 != 4 && body != "execution 2" {
			t.Errorf("POST %s with key k2: %d %q", target, status, body)
		}
	}
	if n, lines, _ := up.executed(); n != 2 {
		t.Errorf("upstream executed %q, want two orders (one per key)", lines)
	}
	// The canonical form and the passthrough tree are unchanged.
	if status, body := atkSend(t, addr, "POST /v1/orders HTTP/1.1\r\nHost: x\r\nX-User: u", "{}"); status != http.StatusBadRequest || !strings.Contains(body, "missing-key") {
		t.Errorf("canonical request without key: %d %s, want 400 missing-key", status, body)
	}
	if status, _ := atkSend(t, addr, "POST /v1/other/ HTTP/1.1\r\nHost: x\r\nX-User: u", "{}"); status != http.StatusCreated {
		t.Errorf("passthrough tree: %d, want 201", status)
	}
}

// TestAttackVariantsWithoutAPassthroughRoute: with only a required
// "POST /v1/orders" (the defaults enforce with an optional key), the
// ";jsessionid" form fell to the defaults and ran without a key; and a
// route declared as the subtree "POST /v1/payments/" let POST /v1/payments
// (which ServeMux only redirects) run without a key.
func TestAttackVariantsWithoutAPassthroughRoute(t *testing.T) {
	up, addr := variantProxy(t, atkRoute("orders", "POST /v1/orders"), atkRoute("payments", "POST /v1/payments/"))
	for _, target := range []string{"/v1/orders;jsessionid=1", "/v1/payments", "/v1/Payments/", "/v1/payments;x=1/"} {
		status, body := atkSend(t, addr, "POST "+target+" HTTP/1.1\r\nHost: x\r\nX-User: u", "{}")
		if n, lines, _ := up.executed(); status != http.StatusBadRequest || !strings.Contains(body, "missing-key") || n != 0 {
			t.Errorf("POST %s without a key: %d %s, upstream executed %q; want 400 missing-key and nothing executed", target, status, body, lines)
		}
	}
	for i := 0; i < 2; i++ {
		status, body := atkSend(t, addr, "POST /v1/payments HTTP/1.1\r\nHost: x\r\nX-User: u\r\nIdempotency-Key: \"p\"", "{}")
		if status != http.StatusCreated || body != "execution 1" {
			t.Errorf("POST /v1/payments with a key, attempt %d: %d %q, want the first execution", i+1, status, body)
		}
	}
}

// TestAttackMethodParameterIsAnOverride: Rails, Laravel and Symfony run a
// POST carrying _method=PATCH (query parameter or form field) as a PATCH.
// With a required "PATCH /v1/orders/{id}" and a "/v1/" passthrough route,
// such a POST ran the update without a key. Now it is refused as
// ambiguous-request, the form body having been read once within the
// route's max_request_bytes; a form without _method passes through with
// its bytes intact.
func TestAttackMethodParameterIsAnOverride(t *testing.T) {
	update := atkRoute("update-order", "PATCH /v1/orders/{id}")
	update.Methods = []string{"PATCH"}
	up, addr := variantProxy(t, update, passthroughRoute("v1", "/v1/"))
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	_ = mw.WriteField("status", "paid")
	_ = mw.WriteField("_method", "patch")
	_ = mw.Close()
	for _, a := range []struct{ name, head, body string }{
		{"query", "POST /v1/orders/7?_method=PATCH HTTP/1.1\r\nHost: x\r\nX-User: u", "{}"},
		{"urlencoded form", "POST /v1/orders/7 HTTP/1.1\r\nHost: x\r\nX-User: u\r\nContent-Type: application/x-www-form-urlencoded", "status=paid&_method=patch"},
		{"chunked form", "POST /v1/orders/7 HTTP/1.1\r\nHost: x\r\nX-User: u\r\nContent-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked", "19\r\nstatus=paid&_method=patch\r\n0\r\n\r\n"},
		{"multipart form", "POST /v1/orders/7 HTTP/1.1\r\nHost: x\r\nX-User: u\r\nContent-Type: " + mw.FormDataContentType(), mp.String()},
		{"header", "POST /v1/Orders/7 HTTP/1.1\r\nHost: x\r\nX-User: u\r\nX-HTTP-Method-Override: PATCH", "{}"},
	} {
		status, body := atkSend(t, addr, a.head, a.body)
		if n, lines, _ := up.executed(); status != http.StatusBadRequest || !strings.Contains(body, "ambiguous-request") || n != 0 {
			t.Errorf("%s: %d %s, upstream executed %q; want 400 ambiguous-request and nothing executed", a.name, status, body, lines)
		}
	}
	form := "status=paid&note=" + strings.Repeat("n", 200)
	status, _ := atkSend(t, addr, "POST /v1/orders/7 HTTP/1.1\r\nHost: x\r\nX-User: u\r\nContent-Type: application/x-www-form-urlencoded", form)
	if n, _, got := up.executed(); status != http.StatusCreated || n != 1 || got != form {
		t.Errorf("form without _method: %d, upstream executed %d with body %q; want it passed through once, body intact", status, n, got)
	}
	status, body := atkSend(t, addr, "POST /v1/orders/7 HTTP/1.1\r\nHost: x\r\nX-User: u\r\nContent-Type: application/x-www-form-urlencoded", "a="+strings.Repeat("x", 2<<10))
	if n, _, _ := up.executed(); status != http.StatusRequestEntityTooLarge || n != 1 {
		t.Errorf("form too large to check: %d %s, upstream executed %d; want 413 and nothing more executed", status, body, n)
	}
}

// TestAttackSecondRoundVariants: with a required "POST /v1/orders", a
// required "PATCH /v1/orders/{id}" and a "/v1/" passthrough route, these
// forms ran the order or the update without a key: a format extension
// (Rails), a double-encoded slash (a hop that decodes twice), a trailing
// space or dot (IIS), an override field spelled with underscores (Rack,
// WSGI), a form body without Content-Type (Rack), a _method member of a
// JSON body (Laravel, Express) and PHP's spellings of _method. Now nothing
// reaches the upstream without a key, a key on the extension form runs
// once, and a JSON body without _method passes through intact.
func TestAttackSecondRoundVariants(t *testing.T) {
	update := atkRoute("update-order", "PATCH /v1/orders/{id}")
	update.Methods = []string{"PATCH"}
	up, addr := variantProxy(t, atkRoute("orders", "POST /v1/orders"), update, passthroughRoute("v1", "/v1/"))
	const json = "\r\nContent-Type: application/json"
	for _, a := range []struct{ name, head, body, problem string }{
		{"format extension", "POST /v1/orders.json HTTP/1.1", "{}", "missing-key"},
		{"format extension, case", "POST /v1/Orders.XML HTTP/1.1", "{}", "missing-key"},
		{"double-encoded slash", "POST /v1%252Forders HTTP/1.1", "{}", "missing-key"},
		{"trailing space", "POST /v1/orders%20 HTTP/1.1", "{}", "missing-key"},
		{"trailing dot", "POST /v1/orders. HTTP/1.1", "{}", "missing-key"},
		{"override field with underscores", "POST /v1/orders/7 HTTP/1.1\r\nX-HTTP_Method_Override: PATCH", "{}", "ambiguous-request"},
		{"form without Content-Type", "POST /v1/orders/7 HTTP/1.1", "status=paid&_method=PATCH", "ambiguous-request"},
		{"JSON _method", "POST /v1/orders/7 HTTP/1.1" + json, `{"status":"paid","_method":"PATCH"}`, "ambiguous-request"},
		{"chunked JSON _method", "POST /v1/orders/7 HTTP/1.1\r\nTransfer-Encoding: chunked" + json, "13\r\n{\"_method\":\"patch\"}\r\n0\r\n\r\n", "ambiguous-request"},
		{"PHP name, dot", "POST /v1/orders/7?.method=PATCH HTTP/1.1", "{}", "ambiguous-request"},
		{"PHP name, space", "POST /v1/orders/7?%20method=PATCH HTTP/1.1", "{}", "ambiguous-request"},
		{"PHP name in a form", "POST /v1/orders/7 HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded", "status=paid&.method=PATCH", "ambiguous-request"},
	} {
		status, body := atkSend(t, addr, strings.Replace(a.head, " HTTP/1.1", " HTTP/1.1\r\nHost: x\r\nX-User: u", 1), a.body)
		if n, lines, _ := up.executed(); status != http.StatusBadRequest || !strings.Contains(body, a.problem) || n != 0 {
			t.Errorf("%s: %d %s, upstream executed %q; want 400 %s and nothing executed", a.name, status, body, lines, a.problem)
		}
	}
	for i := 0; i < 2; i++ {
		status, body := atkSend(t, addr, "POST /v1/orders.json HTTP/1.1\r\nHost: x\r\nX-User: u\r\nIdempotency-Key: \"k1\"", `{"amount":1}`)
		if status != http.StatusCreated || body != "execution 1" {
			t.Errorf("POST /v1/orders.json with key k1, attempt %d: %d %q, want 201 from the first execution", i+1, status, body)
		}
	}
	const doc = `{"status":"paid","note":{"_method":"PATCH"}}`
	status, _ := atkSend(t, addr, "POST /v1/orders/7 HTTP/1.1\r\nHost: x\r\nX-User: u"+json, doc)
	if n, _, got := up.executed(); status != http.StatusCreated || n != 2 || got != doc {
		t.Errorf("JSON without a top-level _method: %d, upstream executed %d with body %q; want it passed through, body intact", status, n, got)
	}
}
