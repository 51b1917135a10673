package proxy_test

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/proxy"
)

// TestNewTransportKeepsEveryIdleConnectionPerHost pins that no limit across
// hosts undercuts the per-host one: with DefaultTransport's MaxIdleConns of
// 100, an upstream with more requests in flight than that lost a
// connection with every answer and dialled a new one for a later request.
func TestNewTransportKeepsEveryIdleConnectionPerHost(t *testing.T) {
	tr := proxy.NewTransport(time.Second)
	if tr.MaxIdleConnsPerHost < 256 {
		t.Fatalf("MaxIdleConnsPerHost %d, want at least 256", tr.MaxIdleConnsPerHost)
	}
	if tr.MaxIdleConns != 0 && tr.MaxIdleConns < tr.MaxIdleConnsPerHost {
		t.Fatalf("MaxIdleConns %d caps MaxIdleConnsPerHost %d", tr.MaxIdleConns, tr.MaxIdleConnsPerHost)
	}
}
