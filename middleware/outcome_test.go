package middleware_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// backend is an API behind httputil.ReverseProxy that counts the POSTs
// it executes; die makes it act and then cut the connection before it
// answers (a crash mid-call).
type backend struct {
	execs atomic.Int64
	die   atomic.Bool
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := b.execs.Add(1)
	if b.die.Load() {
		gatetest.Die(w)
		return
	}
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"order":%d}`, n)
}

// proxyTo is httputil.ReverseProxy to target with
// middleware.ReverseProxyErrorHandler and middleware.ReverseProxyTransport.
func proxyTo(target string) http.Handler {
	u, _ := url.Parse(target)
	return &httputil.ReverseProxy{
		Rewrite:      func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport:    middleware.ReverseProxyTransport(nil),
		ErrorHandler: middleware.ReverseProxyErrorHandler(nil),
	}
}

// TestReverseProxyBackendDiesMidCall: the middleware in front of
// httputil.ReverseProxy, whose backend acts and dies before answering.
// ReverseProxy only sees a broken exchange after the request was sent;
// its ErrorHandler reports the outcome unknown, so the first answer is
// 502 upstream-failed, the retry is refused 409 and the backend runs
// once, as behind the standalone proxy.
func TestReverseProxyBackendDiesMidCall(t *testing.T) {
	vk := valkeytest.Start(t)
	b := &backend{}
	b.die.Store(true)
	up := httptest.NewServer(b)
	t.Cleanup(up.Close)
	gate := serve(t, testConfig(vk.Addr(), "rp-dies:"), proxyTo(up.URL))

	first := mustPost(t, gate.URL, "alice", "k", `{}`)
	b.die.Store(false)
	retry := mustPost(t, gate.URL, "alice", "k", `{}`)
	if n := b.execs.Load(); n != 1 {
		t.Fatalf("backend executed %d times, want 1 (first: %d %s; retry: %d %s)", n, first.status, first.body, retry.status, retry.body)
	}
	if first.status != http.StatusBadGateway || !strings.Contains(first.body, "upstream-failed") {
		t.Fatalf("first: %d %s; want 502 upstream-failed", first.status, first.body)
	}
	if retry.status != http.StatusConflict {
		t.Fatalf("retry: %d %s; want 409 (outcome unknown)", retry.status, retry.body)
	}
}

// TestReverseProxyBackendDownReleases: a backend that cannot be reached
// (connection refused: the request was never sent) releases the key, the
// client gets what the standalone proxy answers then (502
// upstream-unreachable, problem details), and the retry runs once the
// backend is up.
func TestReverseProxyBackendDownReleases(t *testing.T) {
	vk := valkeytest.Start(t)
	port := valkeytest.FreePort(t) // nothing listens there yet
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	gate := serve(t, testConfig(vk.Addr(), "rp-down:"), proxyTo("http://"+addr))

	if a := mustPost(t, gate.URL, "alice", "k", `{}`); a.status != http.StatusBadGateway ||
		!strings.HasSuffix(gatetest.ProblemType([]byte(a.body)), "upstream-unreachable") || a.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("backend down: %d %q %s; want 502 upstream-unreachable", a.status, a.header.Get("Content-Type"), a.body)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on the reserved port: %v", err)
	}
	b := &backend{}
	up := httptest.NewUnstartedServer(b)
	up.Listener.Close()
	up.Listener = ln
	up.Start()
	t.Cleanup(up.Close)
	retry := mustPost(t, gate.URL, "alice", "k", `{}`)
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("retry with the backend up: %d %s; want a fresh 201", retry.status, retry.body)
	}
	if n := b.execs.Load(); n != 1 {
		t.Fatalf("backend executed %d times, want 1", n)
	}
}

// TestOutcomeUnknownOutsideACall: the reports count only on a keyed call
// the engine runs; elsewhere they say so and change nothing.
func TestOutcomeUnknownOutsideACall(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/v1/orders", nil)
	if middleware.OutcomeUnknown(r, errors.New("x")) || middleware.NothingDone(r) || middleware.Unreachable(r, nil) {
		t.Fatal("a report outside the engine counted")
	}
}

// TestHijackNotSupportedOnEnforcedRoutes: a handler's response on an
// enforced route is captured, so there is no connection to hand over:
// Hijack returns http.ErrNotSupported and the handler's own answer
// decides (here a 201, stored and replayed).
func TestHijackNotSupportedOnEnforcedRoutes(t *testing.T) {
	vk := valkeytest.Start(t)
	var runs atomic.Int64
	gate := serve(t, testConfig(vk.Addr(), "hijack:"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		_, _, err := http.NewResponseController(w).Hijack()
		if !errors.Is(err, http.ErrNotSupported) {
			http.Error(w, fmt.Sprintf("Hijack: %v, want http.ErrNotSupported", err), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "hijack: not supported")
	}))
	checkStoredOnce(t, gate.URL, &runs, "")
}

// TestInProcessLateSuccessIsStored: a handler that ignores its context
// and answers 201 after upstream.timeout ran to its end under the claim:
// its outcome is known, so it is stored and replayed, and it runs once
// (e2e TestFaultLateSuccessAfterTimeout puts this beside the proxy's 504).
func TestInProcessLateSuccessIsStored(t *testing.T) {
	vk := valkeytest.Start(t)
	yaml := strings.Replace(testConfig(vk.Addr(), "late:"), "wait_timeout: 5s", "wait_timeout: 300ms", 1) + "upstream: {timeout: 300ms}\n"
	var runs atomic.Int64
	gate := serve(t, yaml, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		time.Sleep(900 * time.Millisecond) // ignores r.Context()
		if r.Context().Err() == nil {
			http.Error(w, "the engine's deadline did not end the context", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"order":1}`)
	}))
	checkStoredOnce(t, gate.URL, &runs, "; want the late 201 stored and replayed")
}

// TestReverseProxyEmptyBodyNotResentOnReusedConnection: a keyed POST with
// no body behind httputil.ReverseProxy, on a keep-alive connection to the
// backend that an earlier request left idle. The backend acts and closes
// the connection without an answer. ReverseProxy sends a request of
// length 0 with a nil body, and net/http's transport re-sends a request
// with a nil body and an Idempotency-Key field on a new connection when a
// reused one breaks before the answer (Request.isReplayable): the backend
// would run it twice, behind the engine's back. With
// middleware.ReverseProxyTransport it runs once, and the outcome is
// unknown.
func TestReverseProxyEmptyBodyNotResentOnReusedConnection(t *testing.T) {
	vk := valkeytest.Start(t)
	var execs atomic.Int64
	// The GET leaves the connection idle for reuse.
	up := gatetest.CountingUpstream(t, &execs, func(w http.ResponseWriter, _ *http.Request, _ int64) { gatetest.HangUp(w) })
	u, _ := url.Parse(up.URL)
	rp := &httputil.ReverseProxy{
		Rewrite:      func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport:    middleware.ReverseProxyTransport(&http.Transport{}),
		ErrorHandler: middleware.ReverseProxyErrorHandler(nil),
	}
	gate := serve(t, testConfig(vk.Addr(), "rp-reuse:"), rp)
	resp, err := http.Get(gate.URL + "/v1/orders")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	first := mustPost(t, gate.URL, "alice", "k", "")
	retry := mustPost(t, gate.URL, "alice", "k", "")
	if n := execs.Load(); n != 1 {
		t.Fatalf("backend executed %d times, want 1 (first: %d %s; retry: %d %s)", n, first.status, first.body, retry.status, retry.body)
	}
	if retry.status != http.StatusConflict {
		t.Fatalf("retry: %d %s; want 409 (outcome unknown)", retry.status, retry.body)
	}
}

// TestReverseProxyRewindableBodyNotResentOnReusedConnection: as
// TestReverseProxyEmptyBodyNotResentOnReusedConnection, with a body that
// ReverseProxy's Rewrite made rewindable (GetBody: a Rewrite that reads
// the body to sign it): net/http re-sends such a request too when it
// carries Idempotency-Key. It runs once, and the outcome is unknown.
func TestReverseProxyRewindableBodyNotResentOnReusedConnection(t *testing.T) {
	vk := valkeytest.Start(t)
	var execs atomic.Int64
	// The GET leaves the connection idle for reuse.
	up := gatetest.CountingUpstream(t, &execs, func(w http.ResponseWriter, _ *http.Request, _ int64) { gatetest.HangUp(w) })
	u, _ := url.Parse(up.URL)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			if pr.Out.Body == nil {
				return
			}
			b, _ := io.ReadAll(pr.Out.Body)
			pr.Out.Body = io.NopCloser(bytes.NewReader(b))
			pr.Out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		},
		Transport:    middleware.ReverseProxyTransport(&http.Transport{}),
		ErrorHandler: middleware.ReverseProxyErrorHandler(nil),
	}
	gate := serve(t, testConfig(vk.Addr(), "rp-rewind:"), rp)
	resp, err := http.Get(gate.URL + "/v1/orders")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	first := mustPost(t, gate.URL, "alice", "k", `{"amount":1}`)
	retry := mustPost(t, gate.URL, "alice", "k", `{"amount":1}`)
	if n := execs.Load(); n != 1 {
		t.Fatalf("backend executed %d times, want 1 (first: %d %s; retry: %d %s)", n, first.status, first.body, retry.status, retry.body)
	}
	if retry.status != http.StatusConflict {
		t.Fatalf("retry: %d %s; want 409 (outcome unknown)", retry.status, retry.body)
	}
}

// checkStoredOnce posts one keyed call to gate twice as alice: the first
// answer is a 201, the retry its replay, and the handler counted in runs
// ran once. want ends the message of a wrong answer.
func checkStoredOnce(t *testing.T, gate string, runs *atomic.Int64, want string) {
	t.Helper()
	first := mustPost(t, gate, "alice", "k", `{}`)
	retry := mustPost(t, gate, "alice", "k", `{}`)
	if first.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" || retry.body != first.body {
		t.Fatalf("first %d %s, retry %d %s%s", first.status, first.body, retry.status, retry.body, want)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// TestUnreachableReleasesAndAnswersAsTheProxy: a handler that reports
// Unreachable (its backend could not be reached) has its own answer
// replaced by the standalone proxy's, 502 upstream-unreachable, and the
// key released: the retry runs. Reported with OutcomeUnknown as well, the
// unknown outcome wins (the safe side): 502 upstream-failed, then 409.
func TestUnreachableReleasesAndAnswersAsTheProxy(t *testing.T) {
	vk := valkeytest.Start(t)
	var runs atomic.Int64 // of key "down"
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch strings.Trim(r.Header.Get("Idempotency-Key"), `"`) {
		case "down":
			if runs.Add(1) == 1 {
				middleware.Unreachable(r, errors.New("dial tcp: connection refused"))
				http.Error(w, "backend down", http.StatusServiceUnavailable)
				return
			}
		case "both":
			middleware.Unreachable(r, nil)
			middleware.OutcomeUnknown(r, errors.New("the backend broke off"))
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	gate := serve(t, testConfig(vk.Addr(), "unreachable:"), h)

	first := mustPost(t, gate.URL, "alice", "down", `{}`)
	if first.status != http.StatusBadGateway || !strings.HasSuffix(gatetest.ProblemType([]byte(first.body)), "upstream-unreachable") {
		t.Fatalf("unreachable: %d %s; want 502 upstream-unreachable", first.status, first.body)
	}
	if retry := mustPost(t, gate.URL, "alice", "down", `{}`); retry.status != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("retry: %d %s after %d runs; want the key released and a fresh 201", retry.status, retry.body, runs.Load())
	}

	both := mustPost(t, gate.URL, "alice", "both", `{}`)
	if both.status != http.StatusBadGateway || !strings.HasSuffix(gatetest.ProblemType([]byte(both.body)), "upstream-failed") {
		t.Fatalf("unreachable and unknown: %d %s; want 502 upstream-failed", both.status, both.body)
	}
	if retry := mustPost(t, gate.URL, "alice", "both", `{}`); retry.status != http.StatusConflict {
		t.Fatalf("retry after an unknown outcome: %d %s; want 409", retry.status, retry.body)
	}
}

// TestReverseProxyDialFailureAfterTheHandlerReachedABackend: a handler
// that calls a backend of its own (which acts) and then hands the request
// to httputil.ReverseProxy, whose backend cannot be dialed. The last
// failure is a dial, but the call did reach a backend before it: the
// outcome is unknown, the retry is refused 409, and the first backend
// runs once, as in Caddy (TestCaddyDialFailureAfterAnUpstreamActedKeepsTheClaim).
func TestReverseProxyDialFailureAfterTheHandlerReachedABackend(t *testing.T) {
	vk := valkeytest.Start(t)
	b := &backend{}
	up := httptest.NewServer(b)
	t.Cleanup(up.Close)
	next := proxyTo("http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(valkeytest.FreePort(t)))) // nothing listens there
	gate := serve(t, testConfig(vk.Addr(), "rp-reached:"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, up.URL, strings.NewReader(`{}`))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp, err := up.Client().Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp.Body.Close()
		next.ServeHTTP(w, r)
	}))

	first := mustPost(t, gate.URL, "alice", "k", `{}`)
	retry := mustPost(t, gate.URL, "alice", "k", `{}`)
	if n := b.execs.Load(); n != 1 {
		t.Fatalf("backend executed %d times, want 1 (first: %d %s; retry: %d %s)", n, first.status, first.body, retry.status, retry.body)
	}
	if first.status != http.StatusBadGateway || !strings.Contains(first.body, "upstream-failed") || retry.status != http.StatusConflict {
		t.Fatalf("first: %d %s; retry: %d %s; want 502 upstream-failed, then 409 (outcome unknown)", first.status, first.body, retry.status, retry.body)
	}
}
