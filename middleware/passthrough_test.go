package middleware_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestKeylessRequestReachesTheHandlerAsItCame: a request the route passes
// through for want of a key (the key is optional) reaches the handler with
// its header as it came, "Te: trailers" included, as a request the route
// does not enforce does; only an enforced request's handler gets the
// upstream's view, without hop-by-hop fields.
func TestKeylessRequestReachesTheHandlerAsItCame(t *testing.T) {
	vk := valkeytest.Start(t)
	te := make(chan string, 1)
	gate := serve(t, testConfig(vk.Addr(), "keyless:"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		te <- r.Header.Get("Te")
	}))
	for _, method := range []string{"GET", "POST"} {
		req, _ := http.NewRequest(method, gate.URL+"/v1/orders", strings.NewReader("{}"))
		req.Header.Set("X-User", "alice")
		req.Header.Set("Te", "trailers")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := <-te; resp.StatusCode != http.StatusOK || got != "trailers" {
			t.Errorf("%s without a key: status %d, the handler got Te %q, want 200 and %q", method, resp.StatusCode, got, "trailers")
		}
	}
}
