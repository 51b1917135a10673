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
	"unicode/utf8"
)

// API is an in-memory orders service. Every POST /v1/orders creates a new
// order, so a duplicate that reaches it is visible as a second order. It
// also accepts a POST to any other path (a stand-in for webhooks, refunds
// and whatever else a trial routes to it) and echoes any request on /echo,
// so trying idemgate's features needs no hand-written upstream.
type API struct {
	mu      sync.Mutex
	orders  map[string]json.RawMessage
	next    atomic.Int64
	creates atomic.Int64
	posts   atomic.Int64 // POSTs to other paths executed
	deletes atomic.Int64
}

// New returns an empty API.
func New() *API { return &API{orders: make(map[string]json.RawMessage)} }

// Creates returns how many POST /v1/orders requests the API executed.
func (a *API) Creates() int64 { return a.creates.Load() }

// Posts returns how many POSTs to paths other than /v1/orders and /echo the
// API executed.
func (a *API) Posts() int64 { return a.posts.Load() }

// Deletes returns how many orders DELETE /v1/orders/{id} deleted.
func (a *API) Deletes() int64 { return a.deletes.Load() }

// Handler serves:
//
//	POST   /v1/orders       create an order from the JSON body: 201, Location, ETag
//	                        and the order as JSON. ?delay=DURATION sleeps first,
//	                        ?status=CODE answers that status instead (no order).
//	GET    /v1/orders/{id}  the order, or 404
//	DELETE /v1/orders/{id}  delete the order: 200 {"id": ID, "deleted": true}, or
//	                        404 (what idemgate's tombstones react to)
//	POST   any other path   200 {"id": "res_N", "path": PATH, "request": BODY}:
//	                        a catch-all for webhooks, refunds, jwt routes; each
//	                        one executed is counted. ?delay and ?status as above
//	ANY    /echo, /echo/... 200 with the request as JSON: its request line
//	                        ("method", "target", "proto", "request_line"),
//	                        "host", "remote_addr", "headers" (name: [values])
//	                        and "body" (a string; "body_base64" if not UTF-8):
//	                        what the upstream receives through idemgate
//	GET    /stats           {"creates": N, "posts": N, "deletes": N}
//	GET    /healthz         200
//
// Other requests get 404.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/orders", a.create)
	mux.HandleFunc("GET /v1/orders/{id}", a.get)
	mux.HandleFunc("DELETE /v1/orders/{id}", a.delete)
	mux.HandleFunc("/echo", echo)
	mux.HandleFunc("/echo/", echo)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"creates\":%d,\"posts\":%d,\"deletes\":%d}\n", a.Creates(), a.Posts(), a.Deletes())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	// "/" rather than "POST /": a method-only pattern would conflict with
	// /echo, which takes every method (net/http ServeMux precedence).
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		a.post(w, r)
	})
	return mux
}

// post is the catch-all POST: it executes (counted) and answers 200 with a
// new id and the request's JSON body.
func (a *API) post(w http.ResponseWriter, r *http.Request) {
	if d, err := time.ParseDuration(r.URL.Query().Get("delay")); err == nil && d > 0 {
		time.Sleep(min(d, time.Minute))
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	n := a.posts.Add(1)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if code, err := strconv.Atoi(r.URL.Query().Get("status")); err == nil && code >= 200 && code <= 599 {
		w.WriteHeader(code)
		fmt.Fprintf(w, "{\"status\":%d}\n", code)
		return
	}
	if len(body) == 0 || !json.Valid(body) {
		body = []byte("{}")
	}
	out, _ := json.Marshal(map[string]any{"id": "res_" + strconv.FormatInt(n, 10), "path": r.URL.Path, "request": json.RawMessage(body)})
	_, _ = w.Write(append(out, '\n'))
}

func (a *API) delete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	a.mu.Lock()
	_, ok := a.orders[id]
	delete(a.orders, id)
	a.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	a.deletes.Add(1)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	out, _ := json.Marshal(map[string]any{"id": id, "deleted": true})
	_, _ = w.Write(append(out, '\n'))
}

// echoed is the JSON /echo answers.
type echoed struct {
	RequestLine string              `json:"request_line"`
	Method      string              `json:"method"`
	Target      string              `json:"target"`
	Proto       string              `json:"proto"`
	Host        string              `json:"host"`
	RemoteAddr  string              `json:"remote_addr"`
	Headers     map[string][]string `json:"headers"`
	Body        *string             `json:"body,omitempty"`
	BodyBase64  []byte              `json:"body_base64,omitempty"`
}

// echo answers the request it got as JSON (see Handler).
func echo(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	e := echoed{
		RequestLine: r.Method + " " + r.RequestURI + " " + r.Proto,
		Method:      r.Method, Target: r.RequestURI, Proto: r.Proto,
		Host: r.Host, RemoteAddr: r.RemoteAddr, Headers: r.Header,
	}
	if len(body) > 0 {
		if utf8.Valid(body) {
			s := string(body)
			e.Body = &s
		} else {
			e.BodyBase64 = body
		}
	}
	out, _ := json.MarshalIndent(e, "", "  ")
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_, _ = w.Write(append(out, '\n'))
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
