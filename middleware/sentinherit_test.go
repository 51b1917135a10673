package middleware_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestItemRequestsOfAStrippedBatchKeepTheirOwnURL: a batch endpoint
// mounted under http.StripPrefix ("/a") runs each item, with the item's
// key, through the orders service's middleware, as a request it builds
// under its own request's context. The item's fingerprint is its own
// URL, not the batch's as its client sent it: the same item key sent
// for order 2 after order 1 is another operation (422 key-reused), never
// answered order 1's stored response.
func TestItemRequestsOfAStrippedBatchKeepTheirOwnURL(t *testing.T) {
	vk := valkeytest.Start(t)
	h := newOrders()
	orders := engine(t, testConfig(vk.Addr(), "items-svc:"))(h)
	items := make(chan *httptest.ResponseRecorder, 2)
	batch := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		item, err := http.NewRequestWithContext(r.Context(), http.MethodPost, "/v1/orders?id="+r.Header.Get("X-Item"), strings.NewReader(`{"item":1}`))
		if err != nil {
			t.Error(err)
			return
		}
		item.Header.Set("Content-Type", "application/json")
		item.Header.Set("X-User", r.Header.Get("X-User"))
		item.Header.Set("Idempotency-Key", `"item-k"`)
		rec := httptest.NewRecorder()
		orders.ServeHTTP(rec, item)
		items <- rec
		w.WriteHeader(http.StatusCreated)
	})
	batchYAML := strings.Replace(testConfig(vk.Addr(), "batch-svc:"), `"POST /v1/orders"`, `"POST /v1/batch"`, 1)
	mux := http.NewServeMux()
	mux.Handle("/a/", http.StripPrefix("/a", engine(t, batchYAML)(batch)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	checkItemsKeepTheirOwnURL(t, srv.URL+"/a/v1/batch", items)
}

// TestItemRequestsClonedFromABatchKeepTheirOwnURL: as
// TestItemRequestsOfAStrippedBatchKeepTheirOwnURL, with each item built
// as a clone of the batch's request (r.Clone, its URL and key replaced),
// which keeps the batch's RequestURI: the item is not the call's own
// request, so its fingerprint is its own URL, not the RequestURI of the
// batch it was cloned from.
func TestItemRequestsClonedFromABatchKeepTheirOwnURL(t *testing.T) {
	vk := valkeytest.Start(t)
	h := newOrders()
	orders := engine(t, testConfig(vk.Addr(), "clone-items:"))(h)
	items := make(chan *httptest.ResponseRecorder, 2)
	batch := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		item := r.Clone(r.Context())
		u := *r.URL
		u.Path, u.RawPath, u.RawQuery = "/v1/orders", "", "id="+r.Header.Get("X-Item")
		item.URL = &u
		item.Body = io.NopCloser(strings.NewReader(`{"item":1}`))
		item.ContentLength = int64(len(`{"item":1}`))
		item.Header.Set("Idempotency-Key", `"item-k"`)
		rec := httptest.NewRecorder()
		orders.ServeHTTP(rec, item)
		items <- rec
		w.WriteHeader(http.StatusCreated)
	})
	batchYAML := strings.Replace(testConfig(vk.Addr(), "clone-batch:"), `"POST /v1/orders"`, `"POST /v1/batch"`, 1)
	srv := httptest.NewServer(engine(t, batchYAML)(batch))
	t.Cleanup(srv.Close)
	checkItemsKeepTheirOwnURL(t, srv.URL+"/v1/batch", items)
}

// checkItemsKeepTheirOwnURL sends alice's two batches to url, b-1 for
// item 1 then b-2 for item 2, whose handler sends an item of its own with
// one key, "item-k", for each, and reads the item's answer from items:
// the first is run (201), the second, another item URL under that key, is
// 422 key-reused, never the first one's replay.
func checkItemsKeepTheirOwnURL(t *testing.T, url string, items <-chan *httptest.ResponseRecorder) {
	t.Helper()
	send := func(batchKey, item string) *httptest.ResponseRecorder {
		t.Helper()
		resp, b, err := gatetest.Post(context.Background(), nil, url, "",
			http.Header{"X-User": {"alice"}, "X-Item": {item}, "Idempotency-Key": {`"` + batchKey + `"`}}, `{}`)
		if err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("batch %s: %v %v %s", batchKey, err, resp, b)
		}
		return <-items
	}
	if first := send("b-1", "1"); first.Code != http.StatusCreated {
		t.Fatalf("item of order 1: %d %s", first.Code, first.Body)
	}
	second := send("b-2", "2")
	if second.Header().Get("Idempotent-Replayed") == "true" {
		t.Fatalf("item of order 2 was answered order 1's stored response: %d %s", second.Code, second.Body)
	}
	if second.Code != http.StatusUnprocessableEntity {
		t.Fatalf("item of order 2 with order 1's key: %d %s, want 422 key-reused", second.Code, second.Body)
	}
}
