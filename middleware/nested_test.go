package middleware_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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

// TestInnerEngineEnforcesAnotherRequest: a handler under one middleware
// (a batch endpoint) runs, in process and under its own request's
// context, a request of another key through another middleware on
// another store (an orders service that brings its own). That request is
// not the outer call's: the inner engine enforces it. The batch acts on
// its first item, then fails (500: its key is released); the client's
// retry of the batch runs the item again, with the item's key, and the
// orders handler's record replays it: the item runs once.
func TestInnerEngineEnforcesAnotherRequest(t *testing.T) {
	vk := valkeytest.Start(t)
	h := newOrders()
	ordersYAML := testConfig(vk.Addr(), "orders-svc:")
	orders := serve(t, ordersYAML, h).Config.Handler // the orders service's own middleware
	var batches atomic.Int64
	batch := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		item, err := http.NewRequestWithContext(r.Context(), http.MethodPost, "/v1/orders", strings.NewReader(`{"item":1}`))
		if err != nil {
			t.Error(err)
			return
		}
		item.Header.Set("Content-Type", "application/json")
		item.Header.Set("X-User", r.Header.Get("X-User"))
		item.Header.Set("Idempotency-Key", `"item-1"`)
		orders.ServeHTTP(httptest.NewRecorder(), item)
		if batches.Add(1) == 1 {
			http.Error(w, "second item failed", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	batchYAML := strings.Replace(testConfig(vk.Addr(), "batch-svc:"), `"POST /v1/orders"`, `"POST /v1/batch"`, 1)
	gate := serve(t, batchYAML, batch)
	send := func() answer {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, gate.URL+"/v1/batch", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User", "alice")
		req.Header.Set("Idempotency-Key", `"b-1"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header, string(b)}
	}
	first, retry := send(), send()
	if first.status != http.StatusInternalServerError || retry.status != http.StatusCreated {
		t.Fatalf("batch: first %d %s, retry %d %s; want 500 then 201", first.status, first.body, retry.status, retry.body)
	}
	if n := h.runsOf("item-1"); n != 1 {
		t.Fatalf("the batch's item ran %d times, want 1", n)
	}
}
