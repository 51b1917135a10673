package proxy_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/proxy"
)

// TestReplayRepeatsDateTheUpstreamDidNotSend: an upstream that sends no
// Date (grpc-go's server over HTTP/2 does not) gets one stamped by
// idemgate on the first answer, stored with it, so a replay a second later
// repeats it instead of carrying a new one.
func TestReplayRepeatsDateTheUpstreamDidNotSend(t *testing.T) {
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Date"] = nil // net/http then sends none
		created(w, r)
	})
	first := h.do("POST", "/v1/orders", "alice", "k1", `{"amount":5}`)
	if first.status != http.StatusCreated || first.header.Get("Date") == "" {
		t.Fatalf("first = %d, Date %q", first.status, first.header.Get("Date"))
	}
	// Into the next second, which a Date (whole seconds) can tell apart.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))
	again := h.do("POST", "/v1/orders", "alice", "k1", `{"amount":5}`)
	if again.header.Get(proxy.ReplayedHeader) != "true" {
		t.Fatalf("retry not replayed: %d %v", again.status, again.header)
	}
	if got, want := again.header.Values("Date"), first.header.Values("Date"); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("replay Date %q, first answer's %q", got, want)
	}
}
