package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyUnknownStatusKeepsTheClaim: behind reverse_proxy, an upstream
// that is a gateway answering 504 at its own timeout while the application
// goes on. With 504 in unknown_statuses the answer is passed on as it
// came and the claim kept, so the retry is refused, never sent; without
// it, the key is released and the retry runs the operation again, as the
// standalone proxy and the middleware do (TestUnknownStatusKeepsTheClaim,
// TestTimeoutHandlerInsideWithUnknownStatus).
func TestCaddyUnknownStatusKeepsTheClaim(t *testing.T) {
	vk := valkeytest.Start(t)
	for i, tc := range []struct {
		name    string
		setting string
		execs   int64
		retry   int
	}{
		{name: "listed", setting: "  unknown_statuses: [504]\n", execs: 1, retry: http.StatusConflict},
		{name: "not listed", execs: 2, retry: http.StatusGatewayTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var execs atomic.Int64
			up := gatetest.CountingUpstream(t, &execs, func(w http.ResponseWriter, _ *http.Request, _ int64) {
				http.Error(w, "upstream request timeout", http.StatusGatewayTimeout)
			})
			c := runCaddy(t, caddySite{
				YAML:        fmt.Sprintf(conflictYAML, "10s") + tc.setting,
				Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-unknown-status-%d:", vk.Addr(), i),
				After:       "reverse_proxy " + strings.TrimPrefix(up.URL, "http://"),
			})
			first := post(t, c.URL, "alice", "k", `{"amount":1}`)
			if first.Status != http.StatusGatewayTimeout || first.Body != "upstream request timeout\n" {
				t.Fatalf("first: %d %q, want the upstream's 504 as it came\n%s", first.Status, first.Body, c.out.String())
			}
			retry := post(t, c.URL, "alice", "k", `{"amount":1}`)
			if n := execs.Load(); n != tc.execs || retry.Status != tc.retry {
				t.Fatalf("upstream executed %d times and the retry got %d %q; want %d and %d", n, retry.Status, retry.Body, tc.execs, tc.retry)
			}
		})
	}
}

// TestCaddyRetryAfterUnknownStatusNeverRunsTwice: reverse_proxy's
// lb_retry_match on the upstream's status (Caddy's response-based retry)
// sends the request to the next upstream after the first one answered
// 504, a status the route lists in unknown_statuses: the first one is a
// gateway whose application may go on. The second send is cut, as after
// an upstream that died (TestCaddyRetryAfterSendNeverRunsTwice): the
// upstreams run once between them, and the retry is refused 409.
func TestCaddyRetryAfterUnknownStatusNeverRunsTwice(t *testing.T) {
	vk := valkeytest.Start(t)
	for i, tc := range []struct {
		name     string
		upstream func(t *testing.T, execs *atomic.Int64, handle gatetest.Counted) string
	}{
		{"http1", http1Upstream},
		{"h2c", h2cUpstream},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var execs atomic.Int64
			gateway := tc.upstream(t, &execs, func(w http.ResponseWriter, _ *http.Request, _ int64) {
				http.Error(w, "upstream request timeout", http.StatusGatewayTimeout)
			})
			answers := tc.upstream(t, &execs, func(w http.ResponseWriter, _ *http.Request, _ int64) {
				w.WriteHeader(http.StatusCreated)
			})
			c := runCaddy(t, caddySite{
				YAML:        fmt.Sprintf(conflictYAML, "10s") + "  unknown_statuses: [504]\n",
				Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-status-retry-%d:", vk.Addr(), i),
				After: fmt.Sprintf("reverse_proxy %s %s {\n\t\tlb_policy first\n\t\tlb_retries 1\n\t\tlb_retry_match {\n\t\t\texpression `{rp.status_code} == 504`\n\t\t}\n\t}",
					gateway, answers),
			})
			first := post(t, c.URL, "alice", "k", `{"amount":1}`)
			retry := post(t, c.URL, "alice", "k", `{"amount":1}`)
			checkRanOnceThenRefused(t, c, execs.Load(), first, retry)
		})
	}
}
