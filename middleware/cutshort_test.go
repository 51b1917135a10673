package middleware_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestReverseProxyAnswerCutShortKeepsTheClaim: the middleware's shape of
// the binary's TestFaultUpstreamAmbiguousFailure for the answers cut
// short, in front of httputil.ReverseProxy (proxyTo). The backend acts and
// answers 201, but its body ends before its Content-Length, or its
// chunked body before the last chunk, and the connection closes.
// ReverseProxy has written the 201 when its copy of the body fails, and
// aborts the handler: that 201 is not an outcome. The call is neither
// stored (a retry replaying a truncated body) nor released (a retry
// running the operation again): the retry is refused 409 while the claim
// runs, and the backend ran once.
func TestReverseProxyAnswerCutShortKeepsTheClaim(t *testing.T) {
	vk := valkeytest.Start(t)
	for name, answer := range gatetest.CutShortAnswers() {
		t.Run(name, func(t *testing.T) {
			var execs atomic.Int64
			be := gatetest.CutShortUpstream(t, &execs, answer)
			gate := serve(t, testConfig(vk.Addr(), "mw-cut-"+name+":")+"    concurrent: conflict\n", proxyTo(be.URL))
			first, err := postWith(t, noRetry, context.Background(), gate.URL, "alice", "k", `{"n":1}`)
			if err == nil && (first.status == http.StatusCreated || first.status == http.StatusConflict) {
				t.Fatalf("first: %d %q; want the answer cut, or a 502, as the proxy answers", first.status, first.body)
			}
			t.Logf("first: %d %s (%v)", first.status, first.body, err)
			retry, err := postWith(t, noRetry, context.Background(), gate.URL, "alice", "k", `{"n":1}`)
			if err != nil {
				t.Fatal(err)
			}
			if n := execs.Load(); n != 1 {
				t.Fatalf("backend executed %d times, want 1 (retry: %d %q)", n, retry.status, retry.body)
			}
			if retry.status != http.StatusConflict || retry.header.Get("Idempotent-Replayed") == "true" {
				t.Fatalf("retry: %d %q; want 409 while the outcome is unknown", retry.status, retry.body)
			}
		})
	}
}
