package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/internal/middlewaretest"
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
// configuration, are one idempotency layer for requests sent to the same
// host: a record written by either is replayed by the other, byte for
// byte, and a key reused with another body is 422 across them; the handler
// runs once per key. In process the host is in the scope of a route whose
// pattern names none, so the proxy shares those records with upstream.pass_host:
// true (api.example), and any proxy shares the records of a route whose
// pattern names the host (shop.example), whose scope is that host in every
// shape.
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
  - name: shop
    match: "POST shop.example/v1/orders"
`, srv.Addr())
	h := &countingOrders{runs: map[string]int{}}

	idem := middlewaretest.Engine(t, common)
	inApp := httptest.NewServer(idem(h))
	t.Cleanup(inApp.Close)
	upstream := httptest.NewServer(h)
	t.Cleanup(upstream.Close)
	edge := startGateYAML(t, fmt.Sprintf("upstream: {url: %q}\n", upstream.URL)+common)
	passing := startGateYAML(t, fmt.Sprintf("upstream: {url: %q, pass_host: true}\n", upstream.URL)+common)

	for _, c := range []struct{ name, host, first, retry string }{
		{"in-app then pass_host proxy", "api.example", inApp.URL, passing.URL},
		{"pass_host proxy then in-app", "api.example", passing.URL, inApp.URL},
		{"in-app then proxy, host route", "shop.example", inApp.URL, edge.URL},
		{"proxy then in-app, host route", "shop.example", edge.URL, inApp.URL},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := `"` + strings.ReplaceAll(c.name, " ", "-") + `"`
			send := func(url, owner, body string) Answer {
				return sendHost(t, http.DefaultClient, "POST", url+"/v1/orders", c.host, owner, key, body)
			}
			first := send(c.first, "alice", `{"item":1}`)
			retry := send(c.retry, "alice", `{"item":1}`)
			if first.Status != 201 || retry.Status != 201 || !retry.replayed() || string(retry.Body) != string(first.Body) {
				t.Fatalf("first %d %s; retry on the other shape %d replayed=%v %s", first.Status, first.Body, retry.Status, retry.replayed(), retry.Body)
			}
			if retry.Header.Get("X-Order") != first.Header.Get("X-Order") || retry.Header.Get("Content-Type") != "application/json" {
				t.Errorf("replayed fields differ: first %v, retry %v", first.Header, retry.Header)
			}
			reused := send(c.retry, "alice", `{"item":2}`)
			if reused.Status != 422 {
				t.Errorf("same key, other body on the other shape: %d %s, want 422", reused.Status, reused.Body)
			}
			bob := send(c.retry, "bob", `{"item":1}`)
			if bob.Status != 201 || bob.replayed() || !strings.Contains(string(bob.Body), `"bob"`) {
				t.Errorf("another owner with the same key: %d replayed=%v %s", bob.Status, bob.replayed(), bob.Body)
			}
			if n := h.runsOf(key); n != 2 {
				t.Errorf("handler ran %d times for the key, want 2 (alice once, bob once)", n)
			}
		})
	}
}

// TestSecurityInProcessHostsNeverShareRecords: the middleware over a ServeMux that
// serves two tenants by host (t1.example/, t2.example/) on one Valkey and
// one configuration whose route names no host. The same user sends the
// same key and body to both: each tenant's handler runs once and answers
// its own order, and each retry replays its own host's record (the host in
// its canonical form: t2.example:80 is t2.example). Before, the host was
// not in the scope in process, and t2 got t1's stored response while its
// handler never ran.
func TestSecurityInProcessHostsNeverShareRecords(t *testing.T) {
	srv := valkeytest.Start(t)
	idem := middlewaretest.Engine(t, fmt.Sprintf(`store:
  driver: valkey
  valkey: {addrs: [%q], key_prefix: "hosts:"}
defaults:
  owner: header:X-User
routes:
  - name: orders
    match: "POST /v1/orders"
`, srv.Addr()))
	tenants := map[string]*countingOrders{"t1": {runs: map[string]int{}}, "t2": {runs: map[string]int{}}}
	mux := http.NewServeMux()
	for name, h := range tenants {
		mux.Handle(name+".example/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Tenant", name)
			h.ServeHTTP(w, r)
		}))
	}
	app := httptest.NewServer(idem(mux))
	t.Cleanup(app.Close)

	const key, body = `"same-key"`, `{"item":1}`
	first := map[string]Answer{}
	for _, name := range []string{"t1", "t2"} {
		a := sendHost(t, app.Client(), "POST", app.URL+"/v1/orders", name+".example", "alice", key, body)
		if a.Status != 201 || a.replayed() || a.Header.Get("X-Tenant") != name {
			t.Errorf("first order on %s.example: %d replayed=%v X-Tenant=%q %s, want its own handler's 201",
				name, a.Status, a.replayed(), a.Header.Get("X-Tenant"), a.Body)
		}
		first[name] = a
	}
	for _, name := range []string{"t1", "t2"} {
		retry := sendHost(t, app.Client(), "POST", app.URL+"/v1/orders", name+".example:80", "alice", key, body)
		if retry.Status != 201 || !retry.replayed() || retry.Header.Get("X-Tenant") != name || string(retry.Body) != string(first[name].Body) {
			t.Errorf("retry on %s.example:80: %d replayed=%v X-Tenant=%q %s, want the replay of %s", name, retry.Status, retry.replayed(), retry.Header.Get("X-Tenant"), retry.Body, first[name].Body)
		}
		if n := tenants[name].runsOf(key); n != 1 {
			t.Errorf("%s's handler ran %d times for the key, want 1", name, n)
		}
	}
}
