package proxy_test

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
)

// timeoutErr is a net.Error that is a timeout, as a response header
// timeout of the backend a handler calls.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "timeout awaiting response headers" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestInProcessOutcomeUnknown: a handler that reports its outcome unknown
// has nothing stored, whatever it wrote (here a 201), and its claim kept:
// the client gets the proxy's answer for an upstream that failed after the
// send (502 upstream-failed; 504 upstream-timeout for a timeout), the
// retry 409, and the handler runs once.
func TestInProcessOutcomeUnknown(t *testing.T) {
	for _, tc := range []struct {
		cause   error
		status  int
		problem string
	}{
		{errors.New("backend connection reset"), http.StatusBadGateway, "upstream-failed"},
		{timeoutErr{}, http.StatusGatewayTimeout, "upstream-timeout"},
		{nil, http.StatusBadGateway, "upstream-failed"},
	} {
		var runs atomic.Int64
		h := newHarness(t, created, func(o *proxy.Options, d *policy.Route, _ *[]policy.Route) {
			o.Next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				if !proxy.OutcomeUnknown(r, tc.cause) {
					t.Error("OutcomeUnknown did not count on a keyed call")
				}
				w.WriteHeader(http.StatusCreated)
			})
			d.Lease = 5 * time.Second
			d.Concurrent = policy.ConcurrentConflict
		})
		if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != tc.status || !strings.Contains(r.body, tc.problem) {
			t.Fatalf("cause %v: first %d %s, want %d %s", tc.cause, r.status, r.body, tc.status, tc.problem)
		}
		if r := h.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != http.StatusConflict {
			t.Fatalf("cause %v: retry %d %s, want 409", tc.cause, r.status, r.body)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("cause %v: handler ran %d times, want 1", tc.cause, n)
		}
	}
}

// TestInProcessReportAfterReturnIgnored: a report made after the handler
// returned (a goroutine it left running) decides nothing: the answer was
// decided and stored when the handler returned.
func TestInProcessReportAfterReturnIgnored(t *testing.T) {
	kept := make(chan *http.Request, 1)
	h := newHarness(t, created, func(o *proxy.Options, _ *policy.Route, _ *[]policy.Route) {
		o.Next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			kept <- r
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte("order"))
		})
	})
	first := h.do("POST", "/v1/orders", "alice", "k", "{}")
	if proxy.OutcomeUnknown(<-kept, nil) {
		t.Fatal("a report after the handler returned counted")
	}
	retry := h.do("POST", "/v1/orders", "alice", "k", "{}")
	if first.status != 201 || retry.status != 201 || retry.body != first.body {
		t.Fatalf("first %d %q, retry %d %q: want the 201 stored and replayed", first.status, first.body, retry.status, retry.body)
	}
}
