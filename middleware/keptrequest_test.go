package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestKeptRequestServedAgainAfterItsCallIsEnforced: a handler keeps its
// request and, once its call has returned (a job queued for later, a
// goroutine), serves it again through the middleware. That call's claim
// ended with it and covers nothing any more: the engine enforces the
// request as any, and the operation the first call recorded is replayed,
// never run a second time.
func TestKeptRequestServedAgainAfterItsCallIsEnforced(t *testing.T) {
	vk := valkeytest.Start(t)
	h := newOrders()
	mw := engine(t, strings.Replace(testConfig(vk.Addr(), "kept:"), "wait_timeout: 5s", "wait_timeout: 1s", 1))
	kept := make(chan *http.Request, 1)
	wrapped := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		select {
		case kept <- r:
		default:
		}
	}))
	srv := httptest.NewServer(wrapped)
	t.Cleanup(srv.Close)
	if first := mustPost(t, srv.URL, "alice", "k-kept", `{"item":1}`); first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	r := <-kept
	rec := httptest.NewRecorder()
	wrapped.ServeHTTP(rec, r)
	if n := h.runsOf("k-kept"); n != 1 {
		t.Fatalf("the kept request served again after its call ran the handler %d times, want 1 (answered %d replayed=%q)",
			n, rec.Code, rec.Header().Get("Idempotent-Replayed"))
	}
}
