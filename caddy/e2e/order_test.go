package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
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

// TestCaddyRefusalReleasesKey: a handler after a top-level idempotency
// that refuses a keyed request with a 4xx error before any upstream is
// picked (an `error` directive, basic_auth in a handle block, file_server)
// releases the key: the client gets the handler's status, not 502
// upstream-failed, and the same key runs once the refusal no longer
// applies, instead of 409 outcome-unknown forever. Ordered before
// reverse_proxy only, idempotency ran after `error` and never saw the
// handle blocks, and these requests behaved so.
func TestCaddyRefusalReleasesKey(t *testing.T) {
	vk := valkeytest.Start(t)
	send := func(t *testing.T, c *caddyProc, path string, h http.Header) answer {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		h.Set("Idempotency-Key", "k")
		h.Set("X-User", "alice")
		resp, b, err := gatetest.Post(ctx, nil, c.URL+path, "", h, `{"amount":1}`)
		if err != nil {
			t.Fatal(err)
		}
		return answer{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
	}
	for i, tc := range []struct {
		name, site    string
		refusedPath   string
		refusedHeader http.Header
		status        int
		thenPath      string
		// thenPath, thenHeader: the same key, no longer refused; "": the
		// refusal again.
		thenHeader http.Header
	}{
		{"error", "@closed header X-Closed 1\n\terror @closed \"closed\" 403\n\treverse_proxy %s",
			"/orders", http.Header{"X-Closed": {"1"}}, http.StatusForbidden, "/orders", http.Header{}},
		// Bob's password is hiccup (Caddy's basic_auth documentation).
		{"basic_auth", "handle /orders* {\n\t\tbasic_auth {\n\t\t\tBob $2a$14$Zkx19XLiW6VYouLHR5NmfOFU0z2GTNmpkT/5qqR7hx4IjWJPDhjvG\n\t\t}\n\t\treverse_proxy %s\n\t}",
			"/orders", http.Header{"Authorization": {"Basic Qm9iOndyb25n"}}, http.StatusUnauthorized,
			"/orders", http.Header{"Authorization": {"Basic Qm9iOmhpY2N1cA=="}}},
		{"file_server", "handle /orders* {\n\t\treverse_proxy %s\n\t}\n\thandle {\n\t\troot * .\n\t\tfile_server\n\t}",
			"/missing", http.Header{}, http.StatusNotFound, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startUpstream(t)
			c := runCaddy(t, caddySite{
				Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-refused-%d:", vk.Addr(), i),
				After:       fmt.Sprintf(tc.site, strings.TrimPrefix(up.URL, "http://")),
			})
			first := send(t, c, tc.refusedPath, tc.refusedHeader)
			if first.Status != tc.status {
				t.Fatalf("refused: %d %q, want the handler's %d\n%s", first.Status, first.Body, tc.status, c.out.String())
			}
			if tc.status == http.StatusUnauthorized && first.Header.Get("Www-Authenticate") == "" {
				t.Fatalf("refused: %d without basic_auth's challenge (WWW-Authenticate)", first.Status)
			}
			if tc.thenPath == "" {
				// Refused again, not 409 outcome-unknown.
				if again := send(t, c, tc.refusedPath, tc.refusedHeader); again.Status != tc.status {
					t.Fatalf("retry: %d %q, want the handler's %d again\n%s", again.Status, again.Body, tc.status, c.out.String())
				}
				return
			}
			then := send(t, c, tc.thenPath, tc.thenHeader)
			if then.Status != http.StatusCreated || up.execs.Load() != 1 {
				t.Fatalf("the same key once not refused: %d %q, upstream ran %d times; want 201 once\n%s", then.Status, then.Body, up.execs.Load(), c.out.String())
			}
		})
	}
}
