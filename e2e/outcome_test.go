package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/middlewaretest"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// failingOrders is one handler behind every shape: it counts its
// executions per idempotency key, then does what the body's "mode" says:
// "panic" (it acted, then an index out of range while building the
// answer), "late" (it ignores its context and answers 201 after
// lateBy), or a plain 201.
type failingOrders struct {
	mu     sync.Mutex
	runs   map[string]int
	lateBy time.Duration
}

func (o *failingOrders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var in struct{ Mode string }
	_ = json.Unmarshal(body, &in)
	o.mu.Lock()
	o.runs[r.Header.Get("Idempotency-Key")]++
	o.mu.Unlock()
	switch in.Mode {
	case "panic":
		var lines []string
		_ = lines[len(body)] // the INSERT ran; building the answer fails
	case "late":
		time.Sleep(o.lateBy)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"mode":%q}`, in.Mode)
}

func (o *failingOrders) runsOf(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.runs[key]
}

// outcomeShapes starts the three shapes of idemgate in front of h on one
// Valkey with one configuration: the proxy binary in front of h's server,
// the middleware around h, and the middleware around an
// httputil.ReverseProxy (with middleware.ReverseProxyErrorHandler) in
// front of h's server. It returns each shape's base URL by name.
func outcomeShapes(t *testing.T, h http.Handler, timeout time.Duration) map[string]string {
	t.Helper()
	vk := valkeytest.Start(t)
	common := fmt.Sprintf(`store:
  driver: valkey
  valkey: {addrs: [%q], key_prefix: "outcomes:"}
defaults:
  owner: header:X-User
  lease: 3s
  wait_timeout: %s
  concurrent: conflict
routes:
  - name: orders
    match: "POST /v1/orders"
`, vk.Addr(), timeout)
	backend := httptest.NewServer(h)
	t.Cleanup(backend.Close)
	edge := startGateYAML(t, fmt.Sprintf("upstream: {url: %q, timeout: %s}\n", backend.URL, timeout)+common)

	idem := middlewaretest.Engine(t, fmt.Sprintf("log: {access: false}\nupstream: {timeout: %s}\n", timeout)+common)
	inApp := httptest.NewServer(idem(h))
	t.Cleanup(inApp.Close)
	target, _ := url.Parse(backend.URL)
	rp := &httputil.ReverseProxy{
		Rewrite:      func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		ErrorHandler: middleware.ReverseProxyErrorHandler(nil),
	}
	inAppProxy := httptest.NewServer(idem(rp))
	t.Cleanup(inAppProxy.Close)
	return map[string]string{"proxy": edge.URL, "middleware": inApp.URL, "middleware+ReverseProxy": inAppProxy.URL}
}

// TestFaultHandlerPanicAfterActingRunsOnce: a handler that acted and then
// panicked (before it wrote anything) may have done its work; in every
// shape its claim is kept and the retry is refused, never run. Behind the
// proxy the panic cuts the upstream connection (502 upstream-failed);
// in process the panic goes on up the stack (the client's connection is
// cut) or, behind ReverseProxy, the backend's cut connection is an
// unknown outcome.
func TestFaultHandlerPanicAfterActingRunsOnce(t *testing.T) {
	h := &failingOrders{runs: map[string]int{}}
	for shape, base := range outcomeShapes(t, h, 10*time.Second) {
		t.Run(shape, func(t *testing.T) {
			key := "panic-" + strings.ReplaceAll(shape, "+", "-")
			first := post(context.Background(), base+"/v1/orders", "alice", key, `{"mode":"panic"}`)
			retry := post(context.Background(), base+"/v1/orders", "alice", key, `{"mode":"panic"}`)
			if n := h.runsOf(key); n != 1 {
				t.Fatalf("handler ran %d times, want 1 (first: %v; retry: %v)", n, first, retry)
			}
			if first.Err == nil && first.Status < 500 && first.Status != http.StatusConflict {
				t.Fatalf("first: %v; want a cut connection or a 5xx", first)
			}
			if retry.Status != http.StatusConflict {
				t.Fatalf("retry: %v; want 409: the handler may have acted, so the key stays claimed", retry)
			}
		})
	}
}

// TestFaultLateSuccessAfterTimeout: a handler that ignores its context and
// answers 201 after upstream.timeout runs once in every shape. The proxy
// stops reading its upstream at the deadline and never learns the answer:
// 504 upstream-timeout, then 409 (ReverseProxy in process honours the
// context the same way). A handler in process is waited for, so its
// answer is known: it is stored and the retry replays it.
func TestFaultLateSuccessAfterTimeout(t *testing.T) {
	h := &failingOrders{runs: map[string]int{}, lateBy: 1500 * time.Millisecond}
	shapes := outcomeShapes(t, h, 500*time.Millisecond)
	for shape, base := range shapes {
		t.Run(shape, func(t *testing.T) {
			key := "late-" + strings.ReplaceAll(shape, "+", "-")
			first := mustPost(t, base+"/v1/orders", "alice", key, `{"mode":"late"}`)
			retry := mustPost(t, base+"/v1/orders", "alice", key, `{"mode":"late"}`)
			if shape == "middleware" {
				if first.Status != http.StatusCreated || !retry.replayed() || string(retry.Body) != string(first.Body) {
					t.Fatalf("first %v, retry %v; want the late 201 stored and replayed", first, retry)
				}
			} else {
				if !first.isProblem(http.StatusGatewayTimeout, "upstream-timeout") {
					t.Fatalf("first: %v; want 504 upstream-timeout", first)
				}
				if retry.Status != http.StatusConflict {
					t.Fatalf("retry: %v; want 409 while the outcome is unknown", retry)
				}
			}
			if n := h.runsOf(key); n != 1 {
				t.Fatalf("handler ran %d times, want 1", n)
			}
		})
	}
}
