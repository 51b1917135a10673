package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/internal/headeredit"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestConcurrentMutatingReplays: a wrapper outside the middleware that
// edits the header values it is handed in place (Caddy's
// `header >Set-Cookie "^(.*)$" "$1; Secure"`) sees each answer's own
// values: duplicates that waited on the running call and were answered
// from the one record their wait read, replays one by one (the replay
// cache's decoded record) and replays at once all get "sid=1; Secure",
// and -race sees no write shared between them. Before, every replay was
// handed the shared record's value slices, which the edit rewrote:
// "sid=1; Secure; Secure; …", one more on every replay.
func TestConcurrentMutatingReplays(t *testing.T) {
	srv := valkeytest.Start(t)
	var runs atomic.Int64
	hold := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		<-hold
		w.Header().Set("Set-Cookie", "sid=1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"order":1}`))
	})
	front := httptest.NewServer(headeredit.SecureCookies(engine(t, testConfig(srv.Addr(), "mutate:"))(h)))
	t.Cleanup(front.Close)

	check := func(phase string, a answer) {
		t.Helper()
		if got := a.header["Set-Cookie"]; a.status != http.StatusCreated || !slices.Equal(got, []string{"sid=1; Secure"}) {
			t.Errorf("%s: %d Set-Cookie %q, want 201 [\"sid=1; Secure\"]", phase, a.status, got)
		}
	}
	concurrently := func(phase string, n int, ready func()) {
		var started, done sync.WaitGroup
		started.Add(n)
		done.Add(n)
		answers := make([]answer, n)
		errs := make([]error, n)
		for i := range n {
			go func() {
				defer done.Done()
				started.Done()
				answers[i], errs[i] = post(t, t.Context(), front.URL, "alice", "k", `{}`)
			}()
		}
		started.Wait()
		ready()
		done.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			check(phase, answers[i])
		}
	}
	// The call runs until every duplicate has started sending, so most
	// wait on it and are answered from the record one wait read.
	concurrently("first call and its waiting duplicates", 16, func() { close(hold) })
	for range 5 {
		check("replay one by one", mustPost(t, front.URL, "alice", "k", `{}`))
	}
	concurrently("concurrent replays", 32, func() {})
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}
