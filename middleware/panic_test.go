package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/store/memory"
)

// TestPanicAfterAnswerBegunKeepsTheClaim: a handler that panics once it
// has begun its answer (a status written, part of a body, or
// http.ErrAbortHandler, which httputil.ReverseProxy raises when its
// upstream's body breaks after the upstream acted) got past whatever it
// does before answering: it may have acted, so the claim is kept until its
// lease ends, as the proxy keeps it for an upstream that cut its answer
// short. A retry within the lease is refused as in progress and the
// handler runs once.
func TestPanicAfterAnswerBegunKeepsTheClaim(t *testing.T) {
	cases := map[string]func(w http.ResponseWriter){
		"partial body then panic": func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"order":`))
			panic("encoding the order failed")
		},
		"ErrAbortHandler after the status": func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			panic(http.ErrAbortHandler)
		},
	}
	for name, fail := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(`store:
  driver: memory
log:
  access: false
defaults:
  owner: header:X-User
  lease: 5s
  concurrent: conflict
routes:
  - name: orders
    match: "POST /v1/orders"
`), nil, config.InProcess())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			idem, err := middleware.New(ctx, middleware.Options{Config: cfg, Store: memory.New()})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			srv := httptest.NewServer(idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					fail(w)
				}
				w.WriteHeader(http.StatusCreated)
				w.Write([]byte(`{"order":2}`))
			})))
			t.Cleanup(srv.Close)
			if a, err := postWith(t, noRetry, context.Background(), srv.URL, "alice", "k", `{}`); err == nil && a.status < 500 {
				t.Fatalf("first: %d %s; want the connection cut or a 5xx", a.status, a.body)
			}
			a, err := postWith(t, noRetry, context.Background(), srv.URL, "alice", "k", `{}`)
			if err != nil {
				t.Fatal(err)
			}
			if a.status != http.StatusConflict {
				t.Fatalf("retry: %d %s; want 409 while the claim runs out", a.status, a.body)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times, want 1", n)
			}
		})
	}
}
