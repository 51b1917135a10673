package middleware_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// shutdownYAML is a configuration on the Valkey at %q, with a lease (1 s)
// shorter than the call the test holds, and on_abandoned %s.
const shutdownYAML = `store:
  driver: valkey
  valkey:
    addrs: [%q]
    key_prefix: "shutdown:"
log:
  access: false
defaults:
  owner: header:X-User
  lease: 1s
  wait_timeout: 5s
  concurrent: conflict
  on_abandoned: %s
routes:
  - name: orders
    match: "POST /v1/orders"
`

// service is one process of a Go service as the README shows it: the
// middleware built on the signal's context, and an http.Server that the
// same signal shuts down gracefully.
type service struct {
	url  string
	stop context.CancelFunc // the signal (SIGINT)
	done chan struct{}      // closed when Shutdown has returned
}

// startService runs the README's service on yaml with h behind the
// middleware, on a loopback listener; t.Cleanup stops it.
func startService(t *testing.T, yaml string, h http.Handler) *service {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), nil, config.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	idem, err := middleware.New(ctx, middleware.Options{Config: cfg})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		stop()
		t.Fatal(err)
	}
	srv := &http.Server{Handler: idem(h)}
	s := &service{url: "http://" + ln.Addr().String(), stop: stop, done: make(chan struct{})}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
		close(s.done)
	}()
	t.Cleanup(func() {
		stop()
		<-s.done
	})
	return s
}

// TestGracefulShutdownRecordsTheCallInFlight: a Go service wired as the
// README shows (middleware.New on the signal's context, srv.Shutdown on
// the signal) gets its signal while the handler runs a call longer than
// the lease. Shutdown waits for the handler, which succeeds: the client
// gets its answer, the response is recorded, and a retry to the next
// process on the same Valkey is its replay; the handler runs once. On a
// takeover route the claim must not be taken over meanwhile, its holder
// being alive, nor after, its outcome being known.
func TestGracefulShutdownRecordsTheCallInFlight(t *testing.T) {
	vk := valkeytest.Start(t)
	for _, onAbandoned := range []string{"reject", "takeover"} {
		t.Run(onAbandoned, func(t *testing.T) {
			_, _ = vk.CLI("FLUSHALL")
			yaml := fmt.Sprintf(shutdownYAML, vk.Addr(), onAbandoned)
			var runs atomic.Int64
			entered, hold := make(chan struct{}, 4), make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				n := runs.Add(1)
				entered <- struct{}{}
				if n == 1 {
					<-hold
				}
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"run":%d}`, n)
			})
			old := startService(t, yaml, h)
			first := make(chan answer, 1)
			go func() {
				a, err := postHost(t, noRetry, context.Background(), old.url, "api.example", "alice", "k", `{"n":1}`)
				if err != nil {
					a.status, a.body = 0, err.Error()
				}
				first <- a
			}()
			<-entered
			old.stop() // SIGINT: the store's context ends, Shutdown begins
			// The call outlasts its lease, as a slow one may while the
			// process drains; its heartbeat must keep the claim.
			time.Sleep(2 * time.Second)
			next := startService(t, yaml, h)
			during, _ := postHost(t, noRetry, context.Background(), next.url, "api.example", "alice", "k", `{"n":1}`)
			close(hold)
			a := <-first
			<-old.done
			if a.status != http.StatusCreated {
				t.Fatalf("the client of the service shutting down: %d %s, want the handler's 201", a.status, a.body)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("the handler ran %d times (a retry during the drain got %d %s), want 1: the claim of a call still running was taken over",
					n, during.status, during.body)
			}
			var retry answer
			gatetest.Eventually(t, 10*time.Second, "the retry answered", func() bool {
				retry, _ = postHost(t, noRetry, context.Background(), next.url, "api.example", "alice", "k", `{"n":1}`)
				return retry.status != http.StatusConflict || !strings.Contains(retry.body, "request-in-progress")
			})
			if retry.status != http.StatusCreated || retry.header.Get(proxy.ReplayedHeader) != "true" || retry.body != a.body || runs.Load() != 1 {
				t.Fatalf("retry after the graceful shutdown: %d %s (replayed %q), handler runs %d; want the replay of %s and 1 run",
					retry.status, retry.body, retry.header.Get(proxy.ReplayedHeader), runs.Load(), a.body)
			}
		})
	}
}
