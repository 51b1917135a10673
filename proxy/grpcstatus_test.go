package proxy_test

import (
	"encoding/base64"
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
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
		wantSecond   int // HTTP status of the retry; 0: in progress, as gRPC
	}{
		{"OK stored", "0", false, nil, 1, 200},
		{"NOT_FOUND stored", "5", false, nil, 1, 200},
		{"UNAVAILABLE released", "14", false, nil, 2, 200},
		{"UNAVAILABLE trailers-only released", "14", true, nil, 2, 200},
		{"INTERNAL released", "13", false, nil, 2, 200},
		{"DEADLINE_EXCEEDED unknown", "4", false, nil, 1, 0},
		{"CANCELLED unknown", "1", true, nil, 1, 0},
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
			if c.wantSecond == 0 {
				// The claim is held: the retry is told the call is in
				// progress, as a gRPC status (UNAVAILABLE with a pushback).
				if second.status != 200 || second.header.Get("Grpc-Status") != "14" || second.header.Get("Grpc-Retry-Pushback-Ms") != "1000" {
					t.Fatalf("retry: %d %v, want grpc-status 14 with a pushback", second.status, second.header)
				}
			} else if second.status != c.wantSecond {
				t.Fatalf("retry: %d %s, want %d", second.status, second.body, c.wantSecond)
			}
			if got := h.up.count("/orders.v1.Orders/Create"); got != c.wantCalls {
				t.Fatalf("upstream calls %d, want %d", got, c.wantCalls)
			}
			if c.wantCalls == 1 && c.wantSecond == 200 && second.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("retry not a replay: %v", second.header)
			}
		})
	}
}

// TestGRPCProblemsAsStatuses: idemgate's own answers to a gRPC call are
// trailers-only gRPC responses a client can act on: key reuse is
// FAILED_PRECONDITION, a missing key INVALID_ARGUMENT, a missing owner
// UNAUTHENTICATED, each with the problem's slug as ErrorInfo reason.
func TestGRPCProblemsAsStatuses(t *testing.T) {
	h := newHarness(t, grpcAnswer("0", false), func(_ *proxy.Options, d *policy.Route, _ *[]policy.Route) { d.Required = true })
	if r := doGRPC(t, h, "/orders.v1.Orders/Create", "alice", "k1", "x"); r.header.Get("Grpc-Status") != "0" {
		t.Fatalf("first: %d %v", r.status, r.header)
	}
	for _, c := range []struct {
		name, user, key, body, code, reason string
	}{
		{"key reused", "alice", "k1", "y", "9", "key-reused"},
		{"missing key", "alice", "", "y", "3", "missing-key"},
		{"missing owner", "", "k2", "y", "16", "missing-owner"},
	} {
		r := doGRPC(t, h, "/orders.v1.Orders/Create", c.user, c.key, c.body)
		if r.status != 200 || r.header.Get("Grpc-Status") != c.code || r.body != "" {
			t.Errorf("%s: HTTP %d grpc-status %q body %q, want 200 grpc-status %s and no body", c.name, r.status, r.header.Get("Grpc-Status"), r.body, c.code)
			continue
		}
		if reason := errorInfoReason(t, r.header.Get("Grpc-Status-Details-Bin")); reason != c.reason {
			t.Errorf("%s: ErrorInfo reason %q, want %q", c.name, reason, c.reason)
		}
	}
}

// errorInfoReason decodes grpc-status-details-bin and returns its
// ErrorInfo's reason.
func errorInfoReason(t *testing.T, bin string) string {
	t.Helper()
	b, err := base64.RawStdEncoding.DecodeString(bin)
	if err != nil {
		t.Fatalf("grpc-status-details-bin %q: %v", bin, err)
	}
	var st spb.Status
	if err := proto.Unmarshal(b, &st); err != nil || len(st.Details) != 1 {
		t.Fatalf("google.rpc.Status: %v %v", &st, err)
	}
	var info errdetails.ErrorInfo
	if err := st.Details[0].UnmarshalTo(&info); err != nil {
		t.Fatal(err)
	}
	if info.Domain != "idemgate" {
		t.Errorf("ErrorInfo domain %q", info.Domain)
	}
	return info.Reason
}
