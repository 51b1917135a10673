package proxy_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
)

// grpcAnswer answers HTTP 200 with grpc-status code, in the trailers or,
// with trailersOnly, in the headers.
func grpcAnswer(code string, trailersOnly bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		if trailersOnly {
			w.Header().Set("Grpc-Status", code)
			w.WriteHeader(200)
			return
		}
		w.Header().Set("Trailer", "Grpc-Status")
		w.WriteHeader(200)
		_, _ = w.Write([]byte{0, 0, 0, 0, 0})
		w.Header().Set("Grpc-Status", code)
	}
}

// TestGRPCStatusDecidesWhatIsStored: for a gRPC call, HTTP 200 is not
// enough: OK and the answer codes are stored and replayed, transient
// codes are passed on and the key released (the retry runs again), and
// DEADLINE_EXCEEDED or CANCELLED leave the claim held (outcome unknown);
// replay_grpc_codes overrides the stored list.
func TestGRPCStatusDecidesWhatIsStored(t *testing.T) {
	for _, c := range []struct {
		name, code   string
		trailersOnly bool
		codes        []int
		wantCalls    int
		wantSecond   int // status of the retry
	}{
		{"OK stored", "0", false, nil, 1, 200},
		{"NOT_FOUND stored", "5", false, nil, 1, 200},
		{"UNAVAILABLE released", "14", false, nil, 2, 200},
		{"UNAVAILABLE trailers-only released", "14", true, nil, 2, 200},
		{"INTERNAL released", "13", false, nil, 2, 200},
		{"DEADLINE_EXCEEDED unknown", "4", false, nil, 1, 409},
		{"CANCELLED unknown", "1", true, nil, 1, 409},
		{"NOT_FOUND released by replay_grpc_codes", "5", false, []int{0}, 2, 200},
		{"UNAVAILABLE stored by replay_grpc_codes", "14", false, []int{0, 14}, 1, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, grpcAnswer(c.code, c.trailersOnly), func(_ *proxy.Options, d *policy.Route, _ *[]policy.Route) {
				d.Concurrent = policy.ConcurrentConflict
				d.ReplayGRPCCodes = c.codes
			})
			first := doGRPC(t, h, "/orders.v1.Orders/Create", "alice", "k1", "x")
			if first.status != 200 || first.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("first: %d %v", first.status, first.header)
			}
			second := doGRPC(t, h, "/orders.v1.Orders/Create", "alice", "k1", "x")
			if second.status != c.wantSecond {
				t.Fatalf("retry: %d %s, want %d", second.status, second.body, c.wantSecond)
			}
			if got := h.up.count("/orders.v1.Orders/Create"); got != c.wantCalls {
				t.Fatalf("upstream calls %d, want %d", got, c.wantCalls)
			}
			if c.wantCalls == 1 && c.wantSecond == 200 && second.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("retry not a replay: %v", second.header)
			}
			if c.wantSecond == 409 && !strings.Contains(second.body, "request-in-progress") && second.header.Get("Grpc-Status") == "" {
				t.Fatalf("retry: %s", second.body)
			}
		})
	}
}
