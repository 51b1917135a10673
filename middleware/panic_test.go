package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// panicConfig is the configuration of the panic tests: one route on the
// Valkey at addr, a lease long enough for the retry to find the claim;
// defaults are more lines of the defaults section ("  key: value").
func panicConfig(t *testing.T, addr, prefix string, defaults ...string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`store:
  driver: valkey
  valkey: {addrs: [%q], key_prefix: %q}
log:
  access: false
defaults:
  owner: header:X-User
  lease: 5s
  concurrent: conflict
%sroutes:
  - name: orders
    match: "POST /v1/orders"
`, addr, prefix, strings.Join(defaults, ""))), nil, config.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// servePanicking wraps a handler that runs fail on its first call and
// answers 201 after, counting its calls.
func servePanicking(t *testing.T, cfg *config.Config, fail func(w http.ResponseWriter, r *http.Request)) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	idem, err := middleware.New(ctx, middleware.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	srv := httptest.NewServer(idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			fail(w, r)
		}
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"order":2}`))
	})))
	t.Cleanup(srv.Close)
	return srv, &runs
}

// TestPanicKeepsTheClaim: a panic says nothing of what the handler did
// before it, whether or not it had begun its answer: an index out of
// range while building the answer, after the INSERT, is a panic with
// nothing written. So the claim is kept until its lease ends (then
// on_abandoned decides), as the proxy keeps it for an upstream that
// took the request and cut the connection. A retry within the lease is
// refused as in progress and the handler runs once.
func TestPanicKeepsTheClaim(t *testing.T) {
	vk := valkeytest.Start(t)
	cases := map[string]func(w http.ResponseWriter, r *http.Request){
		"acted, then panicked with nothing written": func(http.ResponseWriter, *http.Request) {
			var rows []int
			_ = rows[1] // after the INSERT: index out of range
		},
		"partial body then panic": func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"order":`))
			panic("encoding the order failed")
		},
		"ErrAbortHandler after the status": func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusCreated)
			panic(http.ErrAbortHandler)
		},
	}
	i := 0
	for name, fail := range cases {
		i++
		t.Run(name, func(t *testing.T) {
			srv, runs := servePanicking(t, panicConfig(t, vk.Addr(), fmt.Sprintf("panic-%d:", i)), fail)
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

// TestNothingDoneReleases: a handler that says it did nothing
// (middleware.NothingDone) before it panics, or before it answers a
// status the route would store, has the key released: the retry runs.
func TestNothingDoneReleases(t *testing.T) {
	vk := valkeytest.Start(t)
	cases := map[string]func(w http.ResponseWriter, r *http.Request){
		"then panics": func(_ http.ResponseWriter, r *http.Request) {
			if !middleware.NothingDone(r) {
				panic("NothingDone did not count on a keyed call")
			}
			panic("the dependency it checks first is away")
		},
		"then answers 200": func(w http.ResponseWriter, r *http.Request) {
			middleware.NothingDone(r)
			w.Write([]byte(`{"queued":false}`)) // a 200 the route would store
		},
	}
	i := 0
	for name, fail := range cases {
		i++
		t.Run(name, func(t *testing.T) {
			srv, runs := servePanicking(t, panicConfig(t, vk.Addr(), fmt.Sprintf("nothing-%d:", i)), fail)
			_, _ = postWith(t, noRetry, context.Background(), srv.URL, "alice", "k", `{}`)
			a, err := postWith(t, noRetry, context.Background(), srv.URL, "alice", "k", `{}`)
			if err != nil {
				t.Fatal(err)
			}
			if a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") == "true" {
				t.Fatalf("retry: %d %s; want it run (201)", a.status, a.body)
			}
			if n := runs.Load(); n != 2 {
				t.Fatalf("handler ran %d times, want 2", n)
			}
		})
	}
}
