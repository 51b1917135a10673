package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// http1Upstream is gatetest.CountingUpstream's address for reverse_proxy.
func http1Upstream(t *testing.T, execs *atomic.Int64, handle gatetest.Counted) string {
	t.Helper()
	return strings.TrimPrefix(gatetest.CountingUpstream(t, execs, handle).URL, "http://")
}

// postExpect is post with Expect: 100-continue, as curl sends a body
// over 1 KiB.
func postExpect(t *testing.T, url, user, key, body string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, b, err := gatetest.Post(ctx, nil, url+"/orders", "", http.Header{"Idempotency-Key": {key}, "X-User": {user}, "Expect": {"100-continue"}}, body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}
