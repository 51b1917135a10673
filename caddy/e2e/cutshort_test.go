package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyUpstreamAnswerCutShortKeepsTheClaim: the Caddy module's shape
// of the binary's TestFaultUpstreamAmbiguousFailure for the answers cut
// short: the upstream acts and answers 201, but its body ends before its
// Content-Length, or its chunked body before the last chunk, and the
// connection closes. reverse_proxy has written the 201 when its copy of
// the body fails, and aborts: that 201 is not an outcome. The client's
// connection is cut (the standalone proxy answers 502 upstream-failed),
// and the call is neither stored (a retry replaying a truncated body) nor
// released (a retry running the operation again): the retry is refused
// 409 while the claim runs, and the upstream ran once.
func TestCaddyUpstreamAnswerCutShortKeepsTheClaim(t *testing.T) {
	vk := valkeytest.Start(t)
	for name, answer := range gatetest.CutShortAnswers() {
		t.Run(name, func(t *testing.T) {
			var execs atomic.Int64
			up := gatetest.CutShortUpstream(t, &execs, answer)
			c := runCaddy(t, caddySite{
				YAML:        fmt.Sprintf(conflictYAML, "10s"),
				Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-cut-%s:", vk.Addr(), name),
				After:       "reverse_proxy " + strings.TrimPrefix(up.URL, "http://"),
			})
			// Not on a reused connection: Go's transport sends a keyed
			// request again when one breaks before the answer, which
			// would hide the first answer behind its resend's.
			noRetry := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			resp, body, err := gatetest.Post(context.Background(), noRetry, c.URL+"/orders", "",
				http.Header{"Idempotency-Key": {"k"}, "X-User": {"alice"}}, `{"amount":1}`)
			if err == nil && (resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusConflict) {
				t.Fatalf("first: %d %q; want the answer cut, or a 502, as the proxy answers", resp.StatusCode, body)
			}
			if err == nil {
				t.Logf("first: %d %s", resp.StatusCode, body)
			} else {
				t.Logf("first: %v", err)
			}
			retry := post(t, c.URL, "alice", "k", `{"amount":1}`)
			if n := execs.Load(); n != 1 {
				t.Fatalf("upstream executed %d times, want 1 (retry: %d %q)", n, retry.Status, retry.Body)
			}
			if retry.Status != http.StatusConflict || retry.replayed() {
				t.Fatalf("retry: %d replayed=%v %q; want 409 while the outcome is unknown", retry.Status, retry.replayed(), retry.Body)
			}
		})
	}
}
