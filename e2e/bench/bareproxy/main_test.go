package main

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/idemgate/idemgate/internal/earlyanswer"
)

// TestFullBodyAfterEarlyAnswer streams a 1 MiB body through the bare
// proxy to an upstream that answers as soon as it has read it, in the
// order that a loaded machine produces now and then (earlyanswer.Check):
// the client must still get the whole answer.
func TestFullBodyAfterEarlyAnswer(t *testing.T) {
	earlyanswer.Check(t, func(upstream string, transport http.RoundTripper) string {
		u, err := url.Parse(upstream)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(newHandler(u, transport))
		t.Cleanup(srv.Close)
		return srv.URL
	}, newTransport(), "/v1/big", nil)
}
