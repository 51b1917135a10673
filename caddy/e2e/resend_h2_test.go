package e2e

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/internal/gatetest"
)

// h2cUpstream starts an upstream that speaks HTTP/2 without TLS only,
// stopped in t.Cleanup, and returns its address for reverse_proxy
// (h2c://host:port). As gatetest.CountingUpstream, it counts each POST
// in execs and hands it to handle, and answers any other method 200.
func h2cUpstream(t *testing.T, execs *atomic.Int64, handle gatetest.Counted) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusOK)
			return
		}
		handle(w, r, execs.Add(1))
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return "h2c://" + strings.TrimPrefix(srv.URL, "http://")
}
