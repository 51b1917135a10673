package e2e

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyHeaderDirectiveOnReplays: Caddy's deferred `header >Set-Cookie
// "^(.*)$" "$1; Secure"` around the idempotency handler edits the
// Set-Cookie values of each answer in place. With the replay cache on
// (the default), the first answer and every replay carry the cookie with
// one "; Secure", and the upstream runs once. Before, each replay was
// handed the cached record's own values, so the directive rewrote the
// record: "sid=1; Secure; Secure; …", one more on every replay.
func TestCaddyHeaderDirectiveOnReplays(t *testing.T) {
	vk := valkeytest.Start(t)
	up := startUpstream(t)
	c := runCaddy(t, caddySite{
		Idempotency: "store_addrs " + vk.Addr() + "\n\t\tkey_prefix caddy-header:",
		After: `header >Set-Cookie "^(.*)$" "$1; Secure"
	reverse_proxy ` + strings.TrimPrefix(up.URL, "http://") + ` {
		header_down Set-Cookie sid=1
	}`,
	})
	want := []string{"sid=1; Secure"}
	first := post(t, c.URL, "alice", "cookie", `{"amount":1}`)
	if first.Status != http.StatusCreated || !slices.Equal(first.Header["Set-Cookie"], want) {
		t.Fatalf("first: %d Set-Cookie %q, want 201 %q\n%s", first.Status, first.Header["Set-Cookie"], want, c.out.String())
	}
	for i := range 6 {
		retry := post(t, c.URL, "alice", "cookie", `{"amount":1}`)
		if !slices.Equal(retry.Header["Set-Cookie"], want) {
			t.Errorf("replay %d: Set-Cookie %q, want %q", i+1, retry.Header["Set-Cookie"], want)
		}
		sameResponse(t, first, retry)
	}
	if n := up.execs.Load(); n != 1 {
		t.Errorf("upstream executed %d times, want 1", n)
	}
}
