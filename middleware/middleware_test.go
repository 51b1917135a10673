package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/internal/middlewaretest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// orders is the handler the scenarios wrap: POST /v1/orders runs once per
// call (counted per idempotency key), sleeps when the body asks, panics
// when it says so (once per key), and answers 201 with the order. Any other
// request is echoed with 200.
type orders struct {
	mu       sync.Mutex
	runs     map[string]int
	panicked map[string]bool
	total    atomic.Int64
}

func newOrders() *orders {
	return &orders{runs: map[string]int{}, panicked: map[string]bool{}}
}

func (o *orders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/orders" {
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, "passthrough %s %s", r.Method, r.URL.Path)
		return
	}
	body, _ := io.ReadAll(r.Body)
	key := strings.Trim(r.Header.Get("Idempotency-Key"), `"`)
	var in struct {
		Sleep string `json:"sleep"`
		Panic bool   `json:"panic"`
		Big   int    `json:"big"`
	}
	_ = json.Unmarshal(body, &in)
	o.mu.Lock()
	if in.Panic && !o.panicked[key] {
		o.panicked[key] = true
		o.mu.Unlock()
		panic("handler failed")
	}
	o.runs[key]++
	n := o.total.Add(1)
	o.mu.Unlock()
	if d, err := time.ParseDuration(in.Sleep); err == nil {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			// The engine detaches the call from the client: never here.
			http.Error(w, "cancelled", http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Order", strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusCreated)
	if in.Big > 0 {
		w.Write(bytes.Repeat([]byte("x"), in.Big))
		return
	}
	fmt.Fprintf(w, `{"order":%d,"user":%q}`, n, r.Header.Get("X-User"))
}

func (o *orders) runsOf(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.runs[key]
}

// testConfig is the configuration every shape shares in these tests.
func testConfig(valkeyAddr, prefix string) string {
	return fmt.Sprintf(`store:
  driver: valkey
  valkey:
    addrs: [%q]
    key_prefix: %q
log:
  access: false
defaults:
  owner: header:X-User
  lease: 3s
  wait_timeout: 5s
routes:
  - name: orders
    match: "POST /v1/orders"
    max_response_bytes: 4KiB
`, valkeyAddr, prefix)
}

// serve wraps h in the middleware on a loopback server.
func serve(t *testing.T, yaml string, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(engine(t, yaml)(h))
	t.Cleanup(srv.Close)
	return srv
}

// engine returns the middleware of the configuration yaml, its store
// closed at the test's end.
func engine(t *testing.T, yaml string) func(http.Handler) http.Handler {
	t.Helper()
	return middlewaretest.Engine(t, yaml)
}

type answer struct {
	status int
	header http.Header
	body   string
}

// noRetry is a client whose requests never go again on their own: Go's
// transport resends a request with an Idempotency-Key that failed on a
// reused connection, which would hide a cut connection.
var noRetry = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func post(t *testing.T, ctx context.Context, url, user, key, body string) (answer, error) {
	return postWith(t, http.DefaultClient, ctx, url, user, key, body)
}

func postWith(t *testing.T, c *http.Client, ctx context.Context, url, user, key, body string) (answer, error) {
	t.Helper()
	return postHost(t, c, ctx, url, "", user, key, body)
}

// postHost is postWith with the Host field host (the URL's when empty):
// instances that share records must see one Host, as behind a load
// balancer, since the host joins the key scope in process.
func postHost(t *testing.T, c *http.Client, ctx context.Context, url, host, user, key, body string) (answer, error) {
	t.Helper()
	h := http.Header{"X-User": {user}}
	if key != "" {
		h.Set("Idempotency-Key", `"`+key+`"`)
	}
	resp, b, err := gatetest.Post(ctx, c, url+"/v1/orders", host, h, body)
	if resp == nil {
		return answer{}, err
	}
	return answer{resp.StatusCode, resp.Header, string(b)}, err
}

func mustPost(t *testing.T, url, user, key, body string) answer {
	t.Helper()
	a, err := post(t, context.Background(), url, user, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestMiddlewareScenarios runs the proxy's contract scenarios against the
// middleware around a real handler on a real Valkey.
func TestMiddlewareScenarios(t *testing.T) {
	srv := valkeytest.Start(t)
	h := newOrders()
	gate := serve(t, testConfig(srv.Addr(), "mw:"), h)

	t.Run("forward once, replay byte for byte", func(t *testing.T) {
		first := mustPost(t, gate.URL, "alice", "k-replay", `{"item":1}`)
		second := mustPost(t, gate.URL, "alice", "k-replay", `{"item":1}`)
		if first.status != 201 || second.status != 201 || first.body != second.body {
			t.Fatalf("first %d %q, retry %d %q", first.status, first.body, second.status, second.body)
		}
		if second.header.Get("Idempotent-Replayed") != "true" || first.header.Get("Idempotent-Replayed") == "true" {
			t.Errorf("Idempotent-Replayed: first %q, retry %q", first.header.Get("Idempotent-Replayed"), second.header.Get("Idempotent-Replayed"))
		}
		if first.header.Get("X-Order") != second.header.Get("X-Order") || second.header.Get("Content-Type") != "application/json" {
			t.Errorf("replayed header differs: %v vs %v", first.header, second.header)
		}
		if n := h.runsOf(`k-replay`); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})

	t.Run("same key, other body: 422", func(t *testing.T) {
		mustPost(t, gate.URL, "alice", "k-422", `{"item":1}`)
		a := mustPost(t, gate.URL, "alice", "k-422", `{"item":2}`)
		if a.status != 422 || !strings.Contains(a.body, "key-reused") {
			t.Fatalf("%d %s", a.status, a.body)
		}
		if n := h.runsOf("k-422"); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})

	t.Run("owners never share a record", func(t *testing.T) {
		a := mustPost(t, gate.URL, "alice", "k-owner", `{"item":1}`)
		b := mustPost(t, gate.URL, "bob", "k-owner", `{"item":1}`)
		if !strings.Contains(a.body, `"alice"`) || !strings.Contains(b.body, `"bob"`) || b.header.Get("Idempotent-Replayed") == "true" {
			t.Fatalf("alice got %s, bob got %s (replayed %q)", a.body, b.body, b.header.Get("Idempotent-Replayed"))
		}
		if n := h.runsOf("k-owner"); n != 2 {
			t.Errorf("handler ran %d times, want 2 (one per owner)", n)
		}
	})

	t.Run("50 concurrent duplicates run once", func(t *testing.T) {
		var wg sync.WaitGroup
		bodies := make([]string, 50)
		statuses := make([]int, 50)
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := post(t, context.Background(), gate.URL, "alice", "k-storm", `{"sleep":"300ms"}`)
				if err != nil {
					t.Error(err)
					return
				}
				bodies[i], statuses[i] = a.body, a.status
			}()
		}
		wg.Wait()
		for i := range 50 {
			if statuses[i] != 201 || bodies[i] != bodies[0] {
				t.Fatalf("answer %d: %d %q, want 201 %q", i, statuses[i], bodies[i], bodies[0])
			}
		}
		if n := h.runsOf("k-storm"); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})

	t.Run("a client that leaves does not cancel the call", func(t *testing.T) {
		// The client leaves once the handler runs, not after a fixed
		// 100 ms: on a loaded machine the request could still be on its
		// way then, so nothing ran and the retry was the first call.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		gone := make(chan error, 1)
		go func() {
			_, err := post(t, ctx, gate.URL, "alice", "k-gone", `{"sleep":"2s"}`)
			gone <- err
		}()
		gatetest.Eventually(t, 10*time.Second, "the handler to run the first request", func() bool { return h.runsOf("k-gone") > 0 })
		cancel()
		if err := <-gone; err == nil {
			t.Fatal("the client's cancel did not end its request")
		}
		a := mustPost(t, gate.URL, "alice", "k-gone", `{"sleep":"2s"}`) // waits for the first, then replays
		if a.status != 201 || a.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: %d replayed=%q %s", a.status, a.header.Get("Idempotent-Replayed"), a.body)
		}
		if n := h.runsOf("k-gone"); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})

	t.Run("a handler that panics keeps its claim", func(t *testing.T) {
		// The panic comes before the handler counts a run, but nothing
		// tells the engine so: it may have acted.
		if a, err := postWith(t, noRetry, context.Background(), gate.URL, "alice", "k-panic", `{"panic":true}`); err == nil {
			t.Fatalf("a panicking handler answered %d %s; want the connection cut, as net/http does", a.status, a.body)
		}
		a := mustPost(t, gate.URL, "alice", "k-panic", `{"panic":true}`)
		if a.status != 409 {
			t.Fatalf("retry after the panic: %d replayed=%q %s; want 409 (the outcome is unknown)", a.status, a.header.Get("Idempotent-Replayed"), a.body)
		}
		if n := h.runsOf("k-panic"); n != 0 {
			t.Errorf("handler ran %d times after the panic, want 0", n)
		}
	})

	t.Run("a response too large to store is sent once, not retained", func(t *testing.T) {
		a := mustPost(t, gate.URL, "alice", "k-big", `{"big":10000}`)
		if a.status != 201 || len(a.body) != 10000 {
			t.Fatalf("first: %d, %d bytes", a.status, len(a.body))
		}
		b := mustPost(t, gate.URL, "alice", "k-big", `{"big":10000}`)
		if !strings.Contains(b.body, "response-not-retained") {
			t.Fatalf("retry: %d %s", b.status, b.body)
		}
		if n := h.runsOf("k-big"); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})

	t.Run("requests no route enforces reach the handler as they came", func(t *testing.T) {
		resp, err := http.Get(gate.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "passthrough GET /health" {
			t.Fatalf("%d %q", resp.StatusCode, b)
		}
	})

	t.Run("store down: 503, nothing runs", func(t *testing.T) {
		before := h.total.Load()
		srv.Kill()
		a := mustPost(t, gate.URL, "alice", "k-down", `{"item":1}`)
		if a.status != 503 || !strings.Contains(a.body, "store-unavailable") {
			t.Fatalf("%d %s", a.status, a.body)
		}
		if h.total.Load() != before {
			t.Errorf("the handler ran while the store was down")
		}
	})
}
