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
	url    string
	stop   context.CancelFunc // the signal (SIGINT)
	done   chan struct{}      // closed when Shutdown has returned
	closed chan struct{}      // Options.Closed: the middleware has closed
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
	closed := make(chan struct{})
	idem, err := middleware.New(ctx, middleware.Options{Config: cfg, Closed: closed})
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
	s := &service{url: "http://" + ln.Addr().String(), stop: stop, done: make(chan struct{}), closed: closed}
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
			h := &heldHandler{entered: make(chan struct{}, 4), hold: make(chan struct{})}
			old := startService(t, yaml, h)
			first := h.postFirst(t, old.url)
			<-h.entered
			old.stop() // SIGINT: the store's context ends, Shutdown begins
			// The call outlasts its lease, as a slow one may while the
			// process drains; its heartbeat must keep the claim.
			time.Sleep(2 * time.Second)
			next := startService(t, yaml, h)
			during, _ := postHost(t, noRetry, context.Background(), next.url, "api.example", "alice", "k", `{"n":1}`)
			close(h.hold)
			a := <-first
			<-old.done
			if a.status != http.StatusCreated {
				t.Fatalf("the client of the service shutting down: %d %s, want the handler's 201", a.status, a.body)
			}
			if n := h.runs.Load(); n != 1 {
				t.Fatalf("the handler ran %d times (a retry during the drain got %d %s), want 1: the claim of a call still running was taken over",
					n, during.status, during.body)
			}
			var retry answer
			gatetest.Eventually(t, 10*time.Second, "the retry answered", func() bool {
				retry, _ = postHost(t, noRetry, context.Background(), next.url, "api.example", "alice", "k", `{"n":1}`)
				return retry.status != http.StatusConflict || !strings.Contains(retry.body, "request-in-progress")
			})
			if retry.status != http.StatusCreated || retry.header.Get(proxy.ReplayedHeader) != "true" || retry.body != a.body || h.runs.Load() != 1 {
				t.Fatalf("retry after the graceful shutdown: %d %s (replayed %q), handler runs %d; want the replay of %s and 1 run",
					retry.status, retry.body, retry.header.Get(proxy.ReplayedHeader), h.runs.Load(), a.body)
			}
		})
	}
}

// pendingYAML is shutdownYAML with a lease (30 s) longer than the store's
// outage in TestGracefulShutdownClosesAfterThePendingResponse, whose
// running record must outlast it.
const pendingYAML = `store:
  driver: valkey
  valkey:
    addrs: [%q]
    key_prefix: "pending:"
log:
  access: false
defaults:
  owner: header:X-User
  lease: 30s
  wait_timeout: 5s
  concurrent: conflict
routes:
  - name: orders
    match: "POST /v1/orders"
`

// TestGracefulShutdownClosesAfterThePendingResponse: the README's service
// gets its signal while a response waits to be recorded (Valkey stopped
// as the handler answered: the client has its 201, the completion timed
// out). Shutdown returns at once, as no request is running, so a main
// that exits then loses the response, and the retry to the next process
// is refused outcome-unknown. Options.Closed, which the README's main
// waits for, must stay open until the response is recorded; once Valkey
// answers again it is, and the retry is its replay; the handler runs once.
func TestGracefulShutdownClosesAfterThePendingResponse(t *testing.T) {
	vk := valkeytest.Start(t)
	t.Cleanup(vk.Resume)
	yaml := fmt.Sprintf(pendingYAML, vk.Addr())
	h := &heldHandler{entered: make(chan struct{}, 4), hold: make(chan struct{})}
	old := startService(t, yaml, h)
	first := h.postFirst(t, old.url)
	<-h.entered
	vk.Pause()
	close(h.hold)
	a := <-first // after the store timeout (2 s): the completion is pending
	if a.status != http.StatusCreated {
		t.Fatalf("the first client: %d %s, want the handler's 201", a.status, a.body)
	}
	old.stop()
	<-old.done
	select {
	case <-old.closed:
		t.Fatal("Options.Closed closed while the response waits to be recorded (Valkey stopped): the README's main exits now and loses it")
	default:
	}
	vk.Resume()
	select {
	case <-old.closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Options.Closed still open 30 s after Valkey answers again")
	}
	next := startService(t, yaml, h)
	retry, _ := postHost(t, noRetry, context.Background(), next.url, "api.example", "alice", "k", `{"n":1}`)
	if retry.status != http.StatusCreated || retry.header.Get(proxy.ReplayedHeader) != "true" || retry.body != a.body || h.runs.Load() != 1 {
		t.Fatalf("retry after the shutdown: %d %s (replayed %q), handler runs %d; want the replay of %s and 1 run",
			retry.status, retry.body, retry.header.Get(proxy.ReplayedHeader), h.runs.Load(), a.body)
	}
}

// heldHandler is a handler that counts its runs and answers 201 with the
// run's number, its first run waiting for hold to close; each run sends
// on entered as it starts.
type heldHandler struct {
	runs    atomic.Int64
	entered chan struct{}
	hold    chan struct{}
}

func (h *heldHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.ReadAll(r.Body)
	n := h.runs.Add(1)
	h.entered <- struct{}{}
	if n == 1 {
		<-h.hold
	}
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"run":%d}`, n)
}

// postFirst sends alice's keyed call to the service at url in the
// background; its answer (status 0 and the error as body when the
// exchange failed) arrives on the channel.
func (h *heldHandler) postFirst(t *testing.T, url string) <-chan answer {
	first := make(chan answer, 1)
	go func() {
		a, err := postHost(t, noRetry, context.Background(), url, "api.example", "alice", "k", `{"n":1}`)
		if err != nil {
			a.status, a.body = 0, err.Error()
		}
		first <- a
	}()
	return first
}
