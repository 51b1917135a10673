package proxy_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/headeredit"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestConcurrentMutatingReplaysThroughProxy: a writer in front of the proxy
// (in the same process, as Caddy's `header >Set-Cookie "^(.*)$" "$1;
// Secure"` is) that edits the header values it is handed in place gets
// each answer's own values: the first answer, replays one by one from the
// replay cache's decoded record, and 32 replays at once all carry each
// cookie with one "; Secure", and -race sees no write shared between them.
// Before, every replay was handed the cached record's value slices, and
// the edit rewrote the record: "a=1; Path=/; Secure; Secure; …".
func TestConcurrentMutatingReplaysThroughProxy(t *testing.T) {
	srv := valkeytest.Start(t)
	up := newUpstream(t, created)
	target, _ := url.Parse(up.URL)
	pol, err := policy.New(baseRoute(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := valkeyProxy(t, srv.Addr(), "mutate:", 1<<20, proxy.Options{Upstream: target, Timeout: 5 * time.Second,
		Policy: func() *policy.Policy { return pol }})
	front := httptest.NewServer(headeredit.SecureCookies(p))
	t.Cleanup(front.Close)
	want := []string{"a=1; Path=/; Secure", "b=2; Path=/; HttpOnly; Secure"}
	send := func() ([]string, int, error) {
		req, err := http.NewRequest(http.MethodPost, front.URL+"/v1/orders", strings.NewReader(`{"n":1}`))
		if err != nil {
			return nil, 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User", "alice")
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, 0, err
		}
		resp.Body.Close()
		return resp.Header["Set-Cookie"], resp.StatusCode, nil
	}
	check := func(phase string, got []string, status int, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusCreated || !slices.Equal(got, want) {
			t.Errorf("%s: %d Set-Cookie %q, want 201 %q", phase, status, got, want)
		}
	}
	got, status, err := send()
	check("first answer", got, status, err)
	for range 5 {
		got, status, err := send()
		check("replay one by one", got, status, err)
	}
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			got, status, err := send()
			check("concurrent replay", got, status, err)
		})
	}
	wg.Wait()
	if n := up.count("/v1/orders"); n != 1 {
		t.Errorf("the upstream ran %d times, want 1", n)
	}
}
