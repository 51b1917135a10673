package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddySitesNeverShareRecords: two Caddy sites, t1.example and
// t2.example, on one idemgate configuration (a route that names no host)
// and one Valkey, each proxying to a backend of its own with the client's
// Host (reverse_proxy's default). The same user sends the same key and body
// to both: each backend runs once and each site's retry replays its own
// backend's answer. Before, the host was not in the key scope in process:
// t2 was answered t1's stored response and its backend never ran.
func TestCaddySitesNeverShareRecords(t *testing.T) {
	vk := valkeytest.Start(t)
	ups := map[string]*upstream{"t1": startUpstream(t), "t2": startUpstream(t)}
	sites := map[string]string{}
	for name, up := range ups {
		sites[name+".example"] = fmt.Sprintf("reverse_proxy %s {\n\t\theader_down X-Backend %s\n\t}",
			strings.TrimPrefix(up.URL, "http://"), name)
	}
	c := runCaddy(t, caddySite{
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-hosts:", vk.Addr()),
		Hosts:       sites,
	})
	port := c.URL[strings.LastIndexByte(c.URL, ':'):]

	first := map[string]answer{}
	for _, name := range []string{"t1", "t2"} {
		a := postHost(t, c.URL, name+".example"+port, "alice", "same-key", `{"amount":1}`)
		if a.Status != http.StatusCreated || a.replayed() || a.Header.Get("X-Backend") != name {
			t.Errorf("first order on %s.example: %d replayed=%v X-Backend=%q %s, want its own backend's 201\n%s",
				name, a.Status, a.replayed(), a.Header.Get("X-Backend"), a.Body, c.out.String())
		}
		first[name] = a
	}
	for _, name := range []string{"t1", "t2"} {
		retry := postHost(t, c.URL, name+".example"+port, "alice", "same-key", `{"amount":1}`)
		if retry.Header.Get("X-Backend") != name {
			t.Errorf("retry on %s.example answered by %q's record", name, retry.Header.Get("X-Backend"))
		}
		sameResponse(t, first[name], retry)
		if n := ups[name].execs.Load(); n != 1 {
			t.Errorf("%s's backend executed %d times, want 1", name, n)
		}
	}
}
