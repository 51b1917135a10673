package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestTimeoutHandlerOutsideRunsOnce: http.TimeoutHandler bounds a call
// from outside the middleware (docs/in-process.md, "Timeouts"): at its
// deadline the client gets its 503 while the engine's call goes on with
// the claim held, so a retry sent meanwhile does not run the handler
// again (it waits, then is refused or answered 503 by TimeoutHandler in
// turn), and once the first call ends its response is stored and
// replayed. Inside the middleware, the same 503 would come from a
// handler that is still acting and read as a refusal written before
// acting: the key released and the retry run beside the first call.
func TestTimeoutHandlerOutsideRunsOnce(t *testing.T) {
	vk := valkeytest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	idem, err := middleware.New(ctx, middleware.Options{Config: panicConfig(t, vk.Addr(), "timeouthandler:")})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	acting := make(chan struct{})
	h := http.TimeoutHandler(idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			<-acting // the first call acts past TimeoutHandler's deadline
		}
		w.WriteHeader(http.StatusCreated)
	})), 200*time.Millisecond, "timeout")
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	var once atomic.Bool
	release := func() {
		if once.CompareAndSwap(false, true) {
			close(acting)
		}
	}
	t.Cleanup(release)

	first, err := postWith(t, noRetry, context.Background(), srv.URL, "alice", "k", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if first.status != http.StatusServiceUnavailable {
		t.Fatalf("first: %d %q, want TimeoutHandler's 503", first.status, first.body)
	}
	retry, err := postWith(t, noRetry, context.Background(), srv.URL, "alice", "k", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times for one key (retry: %d while the first call still ran), want 1", n, retry.status)
	}
	release()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, err := postWith(t, noRetry, context.Background(), srv.URL, "alice", "k", `{}`)
		if err == nil && a.status == http.StatusCreated {
			if a.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("after the first call ended: %d without Idempotent-Replayed, want its replay", a.status)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replay 10 s after the first call ended: last %d %v", a.status, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times for one key, want 1", n)
	}
}

// TestTimeoutHandlerInsideWithUnknownStatus: http.TimeoutHandler between
// the middleware and a handler that is still acting, on a route that
// lists its 503 in unknown_statuses: the 503 is passed on with the claim
// kept, so the retry, sent while the first call still acts, does not run
// the handler a second time. Without the setting the 503 reads as a
// refusal written before acting and releases the key (docs/in-process.md,
// "Timeouts").
func TestTimeoutHandlerInsideWithUnknownStatus(t *testing.T) {
	vk := valkeytest.Start(t)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`store:
  driver: valkey
  valkey: {addrs: [%q], key_prefix: "timeouthandler-inside:"}
log:
  access: false
defaults:
  owner: header:X-User
  lease: 5s
  concurrent: conflict
  unknown_statuses: [503]
routes:
  - name: orders
    match: "POST /v1/orders"
`, vk.Addr())), nil, config.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	idem, err := middleware.New(ctx, middleware.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	acting := make(chan struct{})
	h := http.TimeoutHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			<-acting // the first call acts past TimeoutHandler's deadline
		}
		w.WriteHeader(http.StatusCreated)
	}), 200*time.Millisecond, "timeout")
	srv := httptest.NewServer(idem(h))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(acting) })

	first, err := postWith(t, noRetry, context.Background(), srv.URL, "alice", "k", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if first.status != http.StatusServiceUnavailable || first.body != "timeout" {
		t.Fatalf("first: %d %q, want TimeoutHandler's 503 as it came", first.status, first.body)
	}
	retry, err := postWith(t, noRetry, context.Background(), srv.URL, "alice", "k", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if retry.status != http.StatusConflict {
		t.Fatalf("retry while the first call still acts: %d %q, want 409", retry.status, retry.body)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times for one key, want 1", n)
	}
}
