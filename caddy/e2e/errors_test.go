package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// handledStatus is the status the handle_errors route of
// TestCaddyHandleErrorsOnRequestsNotEnforced answers with: one no handler
// on the way sends, so that a response with it came from handle_errors.
const handledStatus = 599

// TestCaddyHandleErrorsOnRequestsNotEnforced: on a site with handle_errors
// and its upstream stopped, the requests the engine does not enforce (a
// GET, a POST without a key on a route that does not require one) reach
// Caddy's handle_errors with reverse_proxy's error, as they do on a site
// without idempotency, and the module logs nothing for them. A keyed POST
// is answered by the engine, as by the standalone proxy: 502
// upstream-unreachable, the key released, and its retry runs once the
// upstream is up.
func TestCaddyHandleErrorsOnRequestsNotEnforced(t *testing.T) {
	vk := valkeytest.Start(t)
	port := valkeytest.FreePort(t) // nothing listens there yet
	c := runCaddy(t, caddySite{
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-errors:", vk.Addr()),
		After: fmt.Sprintf(`reverse_proxy 127.0.0.1:%d
	handle_errors {
		respond "handled {err.status_code}" %d
	}`, port, handledStatus),
	})

	for _, req := range []struct{ method, path string }{
		{http.MethodGet, "/stats"},
		{http.MethodPost, "/other"},
	} {
		r, err := http.NewRequest(req.method, c.URL+req.path, strings.NewReader(`{"amount":1}`))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("X-User", "alice")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != handledStatus || string(body) != "handled 502" {
			t.Fatalf("%s %s without a key, upstream down: %d %q, want handle_errors' %d %q\n%s",
				req.method, req.path, resp.StatusCode, body, handledStatus, "handled 502", c.out.String())
		}
	}
	if log := c.out.String(); strings.Contains(log, "keyed request") {
		t.Fatalf("the module logged a keyed-request failure for requests without a key:\n%s", log)
	}

	a := post(t, c.URL, "alice", "k-5", `{"amount":5}`)
	if a.Status != http.StatusBadGateway || !strings.HasSuffix(problemType(a), "upstream-unreachable") || a.replayed() {
		t.Fatalf("keyed POST, upstream down: %d %q (replayed %v), want 502 upstream-unreachable", a.Status, a.Body, a.replayed())
	}
	up := serveOn(t, port)
	retry := post(t, c.URL, "alice", "k-5", `{"amount":5}`)
	if retry.Status != http.StatusCreated || retry.replayed() {
		t.Fatalf("retry with the upstream up: %d %s (replayed %v), want a fresh 201", retry.Status, retry.Body, retry.replayed())
	}
	sameResponse(t, retry, post(t, c.URL, "alice", "k-5", `{"amount":5}`))
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}
