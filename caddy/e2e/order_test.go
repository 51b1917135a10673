package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyEnforcesBesideHandleBlocks: idempotency at the top of a site
// whose reverse_proxy sits in a handle, handle_path or route block (the
// usual Caddyfile of an API with more than one backend) runs the upstream
// once for a key and replays the retry. The Caddyfile sorts top-level
// directives by their order, and a block whose reverse_proxy answers ends
// the request: a handler ordered after those blocks would never see a
// request they serve, and every duplicate would reach the upstream with
// nothing to show for it.
func TestCaddyEnforcesBesideHandleBlocks(t *testing.T) {
	vk := valkeytest.Start(t)
	for i, form := range []string{
		"handle /orders* {\n\t\treverse_proxy %s\n\t}\n\thandle {\n\t\trespond 404\n\t}",
		"handle_path /orders* {\n\t\treverse_proxy %s\n\t}",
		"route /orders* {\n\t\treverse_proxy %s\n\t}",
		"invoke orders",
	} {
		block := strings.Fields(form)[0]
		t.Run(block, func(t *testing.T) {
			up := startUpstream(t)
			site := caddySite{
				Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-order-%d:", vk.Addr(), i),
				After:       fmt.Sprintf(form, strings.TrimPrefix(up.URL, "http://")),
			}
			if block == "invoke" {
				site.After = form
				site.Sites = fmt.Sprintf("&(orders) {\n\treverse_proxy %s\n}\n", strings.TrimPrefix(up.URL, "http://"))
			}
			c := runCaddy(t, site)
			first := post(t, c.URL, "alice", "k-1", `{"amount":1}`)
			if first.Status != http.StatusCreated {
				t.Fatalf("first: %d %s\n%s", first.Status, first.Body, c.out.String())
			}
			retry := post(t, c.URL, "alice", "k-1", `{"amount":1}`)
			if n := up.execs.Load(); n != 1 {
				t.Fatalf("idempotency beside a %s block: the upstream ran %d times for one key, want 1 (retry %d, Idempotent-Replayed %q)",
					block, n, retry.Status, retry.Header.Get("Idempotent-Replayed"))
			}
			sameResponse(t, first, retry)
		})
	}
}
