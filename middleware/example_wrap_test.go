package middleware_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware"
)

// Wrapping an http.Handler: the first POST with a key runs the handler,
// its retry is answered from the store without running it again, and the
// same key on another body is refused. The memory store keeps this
// example self-contained; a service with more than one replica names
// valkey or postgres in store.driver.
func Example_wrapHandler() {
	cfg, err := config.Parse([]byte(`
store:
  driver: memory
routes:
  - name: orders
    match: "POST /v1/orders"
    required: true
`), nil, config.InProcess())
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // closes the store
	idem, err := middleware.New(ctx, middleware.Options{Config: cfg})
	if err != nil {
		log.Fatal(err)
	}
	runs := 0
	orders := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ord_%d"}`, runs)
	})
	h := idem(orders)

	send := func(body string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer alice") // the default owner
		req.Header.Set("Idempotency-Key", "order-123")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Printf("%d replayed=%q %s\n", rec.Code, rec.Header().Get("Idempotent-Replayed"), rec.Header().Get("Content-Type"))
	}
	send(`{"amount":5}`) // runs the handler
	send(`{"amount":5}`) // a retry: replayed
	send(`{"amount":6}`) // the key reused for another request: 422
	fmt.Println("handler runs:", runs)
	// Output:
	// 201 replayed="" application/json
	// 201 replayed="true" application/json
	// 422 replayed="" application/problem+json
	// handler runs: 1
}
