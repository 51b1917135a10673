// Package exampleapi is a small orders API that counts what it executes, used by the quickstart, the e2e tests and the benchmark.
package exampleapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// API is an in-memory orders service. Every POST /v1/orders creates a new
// order, so a duplicate that reaches it is visible as a second order.
type API struct {
	mu      sync.Mutex
	orders  map[string]json.RawMessage
	next    atomic.Int64
	creates atomic.Int64
}

// New returns an empty API.
func New() *API { return &API{orders: make(map[string]json.RawMessage)} }

// Creates returns how many POST /v1/orders requests the API executed.
func (a *API) Creates() int64 { return a.creates.Load() }

// Handler serves:
//
//	POST /v1/orders       create an order from the JSON body: 201, Location, ETag
//	                      and the order as JSON. ?delay=DURATION sleeps first,
//	                      ?status=CODE answers that status instead (no order).
//	GET  /v1/orders/{id}  the order, or 404
//	GET  /stats           {"creates": N}
//	GET  /healthz         200
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/orders", a.create)
	mux.HandleFunc("GET /v1/orders/{id}", a.get)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"creates\":%d}\n", a.Creates())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return mux
}

func (a *API) create(w http.ResponseWriter, r *http.Request) {
	if d, err := time.ParseDuration(r.URL.Query().Get("delay")); err == nil && d > 0 {
		time.Sleep(min(d, time.Minute))
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	if code, err := strconv.Atoi(r.URL.Query().Get("status")); err == nil && code >= 200 && code <= 599 {
		a.creates.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, "{\"status\":%d}\n", code)
		return
	}
	if len(body) == 0 || !json.Valid(body) {
		body = []byte("{}")
	}
	a.creates.Add(1)
	id := "ord_" + strconv.FormatInt(a.next.Add(1), 10)
	order, _ := json.Marshal(map[string]any{"id": id, "request": json.RawMessage(body), "created_at": time.Now().UTC().Format(time.RFC3339Nano)})
	a.mu.Lock()
	a.orders[id] = order
	a.mu.Unlock()
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Location", "/v1/orders/"+id)
	h.Set("ETag", `"`+id+`"`)
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(append(order, '\n'))
}

func (a *API) get(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	order, ok := a.orders[r.PathValue("id")]
	a.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_, _ = w.Write(append(order, '\n'))
}
