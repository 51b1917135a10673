package proxy_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
)

// TestBrokenUpstreamStreamIsCut pins a defect that was: on an
// enforced route, a chunked response that idemgate passes on without
// storing (a status it does not store, or one over max_response_bytes)
// and whose upstream body breaks mid-stream must reach the client as a cut
// connection, not as a short body ended by a clean final chunk that looks
// complete. The upstream aborts its handler after a flush, so the proxy's
// transport sees the chunked body end without its last chunk.
func TestBrokenUpstreamStreamIsCut(t *testing.T) {
	cases := map[string]struct {
		status int
		size   int
	}{
		// Sizes past net/http's 4 KiB write buffer, so the proxy has sent the
		// header and part of the body when the stream breaks.
		"status not stored":  {http.StatusInternalServerError, 16 << 10},
		"too large to store": {http.StatusCreated, 16 << 10}, // over the 1 KiB max_response_bytes
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, strings.Repeat("x", c.size))
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler) // no final chunk: the stream breaks
			}, func(o *proxy.Options, _ *policy.Route, _ *[]policy.Route) {
				// The proxy logs the cut stream; quiet it here.
				o.Logger = nil
			})
			req, _ := http.NewRequest("POST", h.front.URL+"/v1/orders", strings.NewReader("{}"))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-User", "alice")
			req.Header.Set("Idempotency-Key", "k-"+strings.ReplaceAll(name, " ", "-"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.status)
			}
			body, err := io.ReadAll(resp.Body)
			if err == nil {
				t.Fatalf("the client read a complete-looking body of %d bytes (upstream sent %d before breaking); want a cut stream", len(body), c.size)
			}
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("read error %v, want unexpected EOF", err)
			}
		})
	}
}
