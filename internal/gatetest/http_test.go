package gatetest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

func TestProblemType(t *testing.T) {
	for body, want := range map[string]string{
		`{"type":"https://idemgate.dev/problems/key-reused","status":422}`: "key-reused",
		`{"type":"https://api.example/problems/key-reused"}`:               "https://api.example/problems/key-reused",
		`not json`: "",
		``:         "",
	} {
		if got := ProblemType([]byte(body)); got != want {
			t.Errorf("ProblemType(%q) = %q, want %q", body, got, want)
		}
	}
}

// TestCountingUpstreamCountsPOSTsOnly: a GET (a readiness probe) is
// answered 200 uncounted; each POST is numbered from 1 and its handler
// reads the body the upstream read before it.
func TestCountingUpstreamCountsPOSTsOnly(t *testing.T) {
	var execs atomic.Int64
	up := CountingUpstream(t, &execs, func(w http.ResponseWriter, r *http.Request, n int64) {
		b, _ := io.ReadAll(r.Body)
		if n != execs.Load() || string(b) != `{"a":1}` {
			t.Errorf("POST %d of %d with body %q", n, execs.Load(), b)
		}
		w.WriteHeader(http.StatusCreated)
	})
	if !Serves(up.URL+"/ready", http.StatusOK)() {
		t.Fatal("the GET was not answered 200")
	}
	for i := range 2 {
		resp, _, err := Post(context.Background(), nil, up.URL, "", Keyed("alice", "k"), `{"a":1}`)
		if err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST %d: %v %v", i+1, resp, err)
		}
	}
	if n := execs.Load(); n != 2 {
		t.Fatalf("counted %d executions, want 2 (the GET uncounted)", n)
	}
}

// TestPostSendsFieldsAndHost: Post sends a JSON body with the fields
// given (a field given replaces the default Content-Type) and the Host
// given, and returns the whole answer.
func TestPostSendsFieldsAndHost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen", r.Host+" "+r.Header.Get("Content-Type")+" "+r.Header.Get("X-User")+" "+r.Header.Get("Idempotency-Key")+" "+string(b))
		_, _ = io.WriteString(w, "answer")
	}))
	t.Cleanup(srv.Close)
	resp, body, err := Post(context.Background(), nil, srv.URL, "t1.example", Keyed("alice", "k1"), `{}`)
	if err != nil || string(body) != "answer" || resp.Header.Get("X-Seen") != "t1.example application/json alice k1 {}" {
		t.Fatalf("Post: %v %q %q", err, body, resp.Header.Get("X-Seen"))
	}
	h := Keyed("", "k2")
	h.Set("Content-Type", "application/grpc")
	resp, _, err = Post(context.Background(), nil, srv.URL, "", h, "x")
	if err != nil || resp.Header.Get("X-Seen") != srv.Listener.Addr().String()+" application/grpc  k2 x" {
		t.Fatalf("Post without an owner: %v %q", err, resp.Header.Get("X-Seen"))
	}
}
