package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCaddyAuthInsideABlockIsNotBypassed: a site whose handle block
// authenticates with forward_auth (copy_headers X-User, the owner's
// field) and proxies, below a top-level idempotency: the Caddyfile an API
// with per-path authentication has. Ordered before the block,
// idempotency would read the owner before the block's authentication
// sets it, and answer Mallory, who sends X-User: alice with her own token
// and Alice's key, Alice's record before forward_auth runs; ordered after
// it, it would never see the block's requests. Caddy refuses the site
// instead, saying to put idempotency inside the block, after the
// authentication.
func TestCaddyAuthInsideABlockIsNotBypassed(t *testing.T) {
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-User", "alice")
	}))
	t.Cleanup(auth.Close)
	up := startUpstream(t)
	_, err := tryRunCaddy(t, caddySite{
		After: fmt.Sprintf("handle /orders* {\n\t\tforward_auth %s {\n\t\t\turi /check\n\t\t\tcopy_headers X-User\n\t\t}\n\t\treverse_proxy %s\n\t}",
			strings.TrimPrefix(auth.URL, "http://"), strings.TrimPrefix(up.URL, "http://")),
	})
	if err == nil || !strings.Contains(err.Error(), "put idempotency inside the block (after any authentication there)") {
		t.Fatalf("Caddy ran (or refused without saying where to put it) a top-level idempotency above a block that authenticates: %v", err)
	}
}
