package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// countingOrders answers POST /v1/orders with 201 and the order's number,
// counting the calls per idempotency key.
type countingOrders struct {
	mu   sync.Mutex
	n    int
	runs map[string]int
}

func (o *countingOrders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	o.mu.Lock()
	o.n++
	n := o.n
	o.runs[r.Header.Get("Idempotency-Key")]++
	o.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Order", fmt.Sprint(n))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"order":%d,"user":%q,"echo":%s}`, n, r.Header.Get("X-User"), body)
}

func (o *countingOrders) runsOf(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.runs[key]
}

// TestInProcessAndProxyShareRecords: the middleware in a Go service and the
// standalone proxy in front of the same handler, on one Valkey with one
// configuration, are one idempotency layer: a record written by either is
// replayed by the other, byte for byte, and a key reused with another body
// is 422 across them; the handler runs once per key.
func TestInProcessAndProxyShareRecords(t *testing.T) {
	srv := valkeytest.Start(t)
	common := fmt.Sprintf(`store:
  driver: valkey
  valkey: {addrs: [%q], key_prefix: "shapes:"}
defaults:
  owner: header:X-User
routes:
  - name: orders
    match: "POST /v1/orders"
`, srv.Addr())
	h := &countingOrders{runs: map[string]int{}}

	cfg, err := config.Parse([]byte(common), nil, config.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	idem, err := middleware.New(ctx, middleware.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	inApp := httptest.NewServer(idem(h))
	t.Cleanup(inApp.Close)
	upstream := httptest.NewServer(h)
	t.Cleanup(upstream.Close)
	edge := startGateYAML(t, fmt.Sprintf("upstream: {url: %q}\n", upstream.URL)+common)

	for _, c := range []struct{ name, first, retry string }{
		{"in-app then proxy", inApp.URL, edge.URL},
		{"proxy then in-app", edge.URL, inApp.URL},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := `"` + strings.ReplaceAll(c.name, " ", "-") + `"`
			first := mustPost(t, c.first+"/v1/orders", "alice", key, `{"item":1}`)
			retry := mustPost(t, c.retry+"/v1/orders", "alice", key, `{"item":1}`)
			if first.Status != 201 || retry.Status != 201 || !retry.replayed() || string(retry.Body) != string(first.Body) {
				t.Fatalf("first %d %s; retry on the other shape %d replayed=%v %s", first.Status, first.Body, retry.Status, retry.replayed(), retry.Body)
			}
			if retry.Header.Get("X-Order") != first.Header.Get("X-Order") || retry.Header.Get("Content-Type") != "application/json" {
				t.Errorf("replayed fields differ: first %v, retry %v", first.Header, retry.Header)
			}
			reused := mustPost(t, c.retry+"/v1/orders", "alice", key, `{"item":2}`)
			if reused.Status != 422 {
				t.Errorf("same key, other body on the other shape: %d %s, want 422", reused.Status, reused.Body)
			}
			bob := mustPost(t, c.retry+"/v1/orders", "bob", key, `{"item":1}`)
			if bob.Status != 201 || bob.replayed() || !strings.Contains(string(bob.Body), `"bob"`) {
				t.Errorf("another owner with the same key: %d replayed=%v %s", bob.Status, bob.replayed(), bob.Body)
			}
			if n := h.runsOf(key); n != 2 {
				t.Errorf("handler ran %d times for the key, want 2 (alice once, bob once)", n)
			}
		})
	}
}
