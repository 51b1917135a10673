package proxy

import (
	"math"
	"net/url"
	"testing"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/store/memory"
)

// TestMaxWaitersZeroMeansNoLimit: Options.MaxWaiters has the meaning of
// server.max_waiters, whose value the binary passes as it is: 0 is no cap
// (as is a negative value), a positive value is the cap. The default cap is
// not the proxy's to choose: config.Load writes config.DefaultMaxWaiters()
// into server.max_waiters when the file leaves it out.
func TestMaxWaitersZeroMeansNoLimit(t *testing.T) {
	up, _ := url.Parse("http://127.0.0.1:1")
	for _, tc := range []struct {
		maxWaiters int
		want       int64
	}{
		{0, math.MaxInt64},
		{-1, math.MaxInt64},
		{1, 1},
		{4096, 4096},
	} {
		st := memory.New()
		t.Cleanup(func() { st.Close() })
		p, err := New(Options{Upstream: up, Store: st, Policy: func() *policy.Policy { return nil }, MaxWaiters: tc.maxWaiters})
		if err != nil {
			t.Fatal(err)
		}
		if p.slots.max != tc.want {
			t.Errorf("MaxWaiters %d: cap %d, want %d", tc.maxWaiters, p.slots.max, tc.want)
		}
	}
}
