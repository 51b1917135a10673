package middleware_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestNestedInsideAFailOpenCallIsEnforced: an outer middleware (a shared
// router's) whose route chose on_store_error: fail_open, around an inner
// one (the service's) whose route did not. The outer store is down, so
// the outer engine forwards unprotected: it holds no claim, and nothing
// covers the request. The inner engine must enforce it as its own route
// says, not pass it through as it does inside a claimed call: the
// outer route's opt-in is not the inner one's.
//
//   - inner on a store of its own that is up: the handler runs once and
//     the retry is replayed from the inner store;
//   - inner on the same store, down: fail closed, 503 store-unavailable,
//     and the handler never runs.
func TestNestedInsideAFailOpenCallIsEnforced(t *testing.T) {
	failOpen := func(yaml string) string {
		return strings.Replace(yaml, "    max_response_bytes: 4KiB\n",
			"    max_response_bytes: 4KiB\n    on_store_error: fail_open\n", 1)
	}
	t.Run("inner store up", func(t *testing.T) {
		outerVK, innerVK := valkeytest.Start(t), valkeytest.Start(t)
		h := newOrders()
		inner := serve(t, testConfig(innerVK.Addr(), "inner:"), h).Config.Handler
		gate := serve(t, failOpen(testConfig(outerVK.Addr(), "outer:")), inner)
		outerVK.Kill()

		first := mustPost(t, gate.URL, "alice", "k-open", `{"item":1}`)
		if first.status != http.StatusCreated {
			t.Fatalf("first: %d %s; want 201", first.status, first.body)
		}
		retry := mustPost(t, gate.URL, "alice", "k-open", `{"item":1}`)
		if n := h.runsOf("k-open"); n != 1 {
			t.Fatalf("handler ran %d times, want 1: the inner route did not opt into fail_open and its store is up (retry: %d replayed=%q)",
				n, retry.status, retry.header.Get("Idempotent-Replayed"))
		}
		if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" || retry.body != first.body {
			t.Fatalf("retry: %d replayed=%q %s; want the inner store's replay of %s", retry.status, retry.header.Get("Idempotent-Replayed"), retry.body, first.body)
		}
	})
	t.Run("same store down", func(t *testing.T) {
		vk := valkeytest.Start(t)
		h := newOrders()
		inner := serve(t, testConfig(vk.Addr(), "shared:"), h).Config.Handler
		gate := serve(t, failOpen(testConfig(vk.Addr(), "shared:")), inner)
		vk.Kill()

		a := mustPost(t, gate.URL, "alice", "k-down", `{"item":1}`)
		if n := h.total.Load(); n != 0 {
			t.Fatalf("handler ran %d times with the store down, want 0: the inner route fails closed (answer: %d %s)", n, a.status, a.body)
		}
		if a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, "store-unavailable") {
			t.Fatalf("answer: %d %s; want the inner engine's 503 store-unavailable", a.status, a.body)
		}
	})
}
