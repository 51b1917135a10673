package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// timeoutCase is http.TimeoutHandler (200 ms) around the middleware
// (outside) or between it and the handler (inside), on a loopback
// server; the handler's first call acts until release.
type timeoutCase struct {
	srv     *httptest.Server
	runs    atomic.Int64
	release func()
}

func newTimeoutCase(t *testing.T, cfg *config.Config, inside bool) *timeoutCase {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	idem, err := middleware.New(ctx, middleware.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	tc := &timeoutCase{}
	acting := make(chan struct{})
	tc.release = sync.OnceFunc(func() { close(acting) })
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tc.runs.Add(1) == 1 {
			<-acting // the first call acts past TimeoutHandler's deadline
		}
		w.WriteHeader(http.StatusCreated)
	})
	if inside {
		h = idem(http.TimeoutHandler(h, 200*time.Millisecond, "timeout"))
	} else {
		h = http.TimeoutHandler(idem(h), 200*time.Millisecond, "timeout")
	}
	tc.srv = httptest.NewServer(h)
	t.Cleanup(tc.srv.Close)
	t.Cleanup(tc.release)
	return tc
}

// firstTwo sends one key twice, the second while the first call still
// acts: the first must be TimeoutHandler's 503 as it came, and the
// handler must have run once; it returns the retry's answer.
func (tc *timeoutCase) firstTwo(t *testing.T) answer {
	t.Helper()
	first, err := postWith(t, noRetry, context.Background(), tc.srv.URL, "alice", "k", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if first.status != http.StatusServiceUnavailable || first.body != "timeout" {
		t.Fatalf("first: %d %q, want TimeoutHandler's 503 as it came", first.status, first.body)
	}
	retry, err := postWith(t, noRetry, context.Background(), tc.srv.URL, "alice", "k", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if n := tc.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times for one key (retry: %d %q while the first call still acted), want 1", n, retry.status, retry.body)
	}
	return retry
}

// TestTimeoutHandlerOutsideRunsOnce: http.TimeoutHandler bounds a call
// from outside the middleware (docs/in-process.md, "Timeouts"): at its
// deadline the client gets its 503 while the engine's call goes on with
// the claim held, so a retry sent meanwhile does not run the handler
// again (it is refused, or answered 503 by TimeoutHandler in turn), and
// once the first call ends its response is stored and replayed. Inside
// the middleware, the same 503 would come from a handler that is still
// acting and read as a refusal written before acting: the key released
// and the retry run beside the first call.
func TestTimeoutHandlerOutsideRunsOnce(t *testing.T) {
	vk := valkeytest.Start(t)
	tc := newTimeoutCase(t, panicConfig(t, vk.Addr(), "timeouthandler:"), false)
	tc.firstTwo(t)
	tc.release()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, err := postWith(t, noRetry, context.Background(), tc.srv.URL, "alice", "k", `{}`)
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
	if n := tc.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times for one key, want 1", n)
	}
}

// TestTimeoutHandlerInsideWithUnknownStatus: http.TimeoutHandler between
// the middleware and a handler that is still acting, on a route that
// lists its 503 in unknown_statuses: the 503 is passed on with the claim
// kept, so the retry, sent while the first call still acts, is refused
// and does not run the handler a second time. Without the setting the
// 503 reads as a refusal written before acting and releases the key
// (docs/in-process.md, "Timeouts").
func TestTimeoutHandlerInsideWithUnknownStatus(t *testing.T) {
	vk := valkeytest.Start(t)
	tc := newTimeoutCase(t, panicConfig(t, vk.Addr(), "timeouthandler-inside:", "  unknown_statuses: [503]\n"), true)
	if retry := tc.firstTwo(t); retry.status != http.StatusConflict {
		t.Fatalf("retry while the first call still acts: %d %q, want 409", retry.status, retry.body)
	}
}
