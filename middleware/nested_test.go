package middleware_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestNestedMiddlewaresRunOnce: two middlewares on one store, one inside
// the other, around one handler. The inner one finds itself inside the
// outer one's call and passes the request through (claiming it again
// would wait on the outer claim until wait_timeout, and the handler would
// never run): the handler runs once and the retry is replayed.
func TestNestedMiddlewaresRunOnce(t *testing.T) {
	vk := valkeytest.Start(t)
	cfgYAML := strings.Replace(testConfig(vk.Addr(), "nested:"), "wait_timeout: 5s", "wait_timeout: 1s", 1)
	h := newOrders()
	inner := serve(t, cfgYAML, h).Config.Handler // the middleware around h
	gate := serve(t, cfgYAML, inner)

	first := mustPost(t, gate.URL, "alice", "k-nested", `{"item":1}`)
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s; want 201", first.status, first.body)
	}
	retry := mustPost(t, gate.URL, "alice", "k-nested", `{"item":1}`)
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" || retry.body != first.body {
		t.Fatalf("retry: %d replayed=%q %s; want the first answer replayed", retry.status, retry.header.Get("Idempotent-Replayed"), retry.body)
	}
	if n := h.runsOf("k-nested"); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}
