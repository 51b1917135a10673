package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mccutchen/go-httpbin/v2/httpbin"

	"github.com/idemgate/idemgate/store/postgres/pgtest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// onValkey starts a valkey-server, an upstream and one idemgate on them.
func onValkey(t *testing.T, c gateConfig) (*valkeytest.Server, *Upstream, *Gate) {
	t.Helper()
	v := valkeytest.Start(t)
	up := startUpstream(t)
	c.Upstream, c.ValkeyAddrs = up.URL, []string{v.Addr()}
	return v, up, startGate(t, c)
}

// e2eStore is a shared store the main flows run on.
type e2eStore struct {
	name string
	// start starts the store (durable: records survive stop and restart)
	// and returns c pointing at it, a clean stop and a restart on the same
	// address and data.
	start func(t *testing.T, c gateConfig) (_ gateConfig, stop, restart func())
}

// e2eStores are the shared production stores: every main flow runs on each.
var e2eStores = []e2eStore{
	{"valkey", func(t *testing.T, c gateConfig) (gateConfig, func(), func()) {
		v := valkeytest.Start(t, valkeytest.WithAOF())
		c.ValkeyAddrs = []string{v.Addr()}
		return c, v.Stop, v.Restart
	}},
	{"postgres", func(t *testing.T, c gateConfig) (gateConfig, func(), func()) {
		pg := pgtest.Start(t)
		c.PostgresDSN = pg.DSN()
		return c, pg.Stop, pg.Start
	}},
}

// storeEnv is one upstream and two idemgate processes on one store, as two
// replicas behind a load balancer.
type storeEnv struct {
	up            *Upstream
	gates         [2]*Gate
	stop, restart func() // the store's
}

// onStores runs f once per store of e2eStores, as subtests named after the
// store, each in a fresh storeEnv whose gates use c (Upstream and the store
// filled in).
func onStores(t *testing.T, c gateConfig, f func(t *testing.T, e *storeEnv)) {
	for _, st := range e2eStores {
		t.Run(st.name, func(t *testing.T) {
			e := &storeEnv{up: startUpstream(t)}
			c.Upstream = e.up.URL
			cc, stop, restart := st.start(t, c)
			e.stop, e.restart = stop, restart
			e.gates = [2]*Gate{startGate(t, cc), startGate(t, cc)}
			f(t, e)
		})
	}
}

// TestForwardOnceThenReplayByteForByte: the first request is forwarded,
// its retries on either instance are replays with the same status, headers
// and body.
func TestForwardOnceThenReplayByteForByte(t *testing.T) {
	onStores(t, gateConfig{}, func(t *testing.T, e *storeEnv) {
		first := mustPost(t, e.gates[0].URL+"/v1/orders", "alice", "k-1", `{"amount":42}`)
		if first.Status != 201 || first.replayed() {
			t.Fatalf("first: %d %v", first.Status, first.Header)
		}
		for i := 0; i < 4; i++ {
			again := mustPost(t, e.gates[i%2].URL+"/v1/orders", "alice", "k-1", `{"amount":42}`)
			if again.Status != 201 || !again.replayed() {
				t.Fatalf("retry %d: %d replayed=%v", i, again.Status, again.replayed())
			}
			if !bytes.Equal(again.Body, first.Body) {
				t.Fatalf("body %q, want %q", again.Body, first.Body)
			}
			for _, name := range []string{"Location", "Etag", "Content-Type", "Set-Cookie", "Date", "Content-Length"} {
				if g, w := again.Header.Values(name), first.Header.Values(name); strings.Join(g, "\x00") != strings.Join(w, "\x00") {
					t.Errorf("%s = %q, want %q", name, g, w)
				}
			}
			if n := len(again.Header.Values("Set-Cookie")); n != 2 {
				t.Errorf("Set-Cookie lines = %d, want 2", n)
			}
			if ct := again.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
				t.Errorf("Content-Type = %q", ct)
			}
		}
		if n := e.up.Calls("alice", "k-1"); n != 1 {
			t.Fatalf("upstream executed %d times, want 1", n)
		}
	})
}

// TestConcurrentDuplicatesOneUpstreamCall: duplicates sent at once,
// spread over both instances, reach the upstream once per key and all get
// that execution's answer.
func TestConcurrentDuplicatesOneUpstreamCall(t *testing.T) {
	onStores(t, gateConfig{}, func(t *testing.T, e *storeEnv) {
		e.up.Set(nil, 300*time.Millisecond, nil)
		const keys, dup = 5, 10
		answers := make([][]Answer, keys)
		var wg sync.WaitGroup
		for k := range keys {
			answers[k] = make([]Answer, dup)
			for d := range dup {
				wg.Go(func() {
					answers[k][d] = post(context.Background(), e.gates[d%2].URL+"/v1/orders", "alice", fmt.Sprintf("burst-%d", k), `{"n":1}`)
				})
			}
		}
		wg.Wait()
		for k := range keys {
			if n := e.up.Calls("alice", fmt.Sprintf("burst-%d", k)); n != 1 {
				t.Errorf("burst-%d: upstream executed %d times, want 1", k, n)
			}
			for d, a := range answers[k] {
				if a.Err != nil || a.Status != 201 || !bytes.Equal(a.Body, answers[k][0].Body) {
					t.Errorf("burst-%d answer %d (instance %d): %d %v %q, want 201 and answer 0's body", k, d, d%2, a.Status, a.Err, a.Body)
				}
			}
		}
	})
}

// TestKeyReuseAndOwners: a key reused with another body is 422 on
// either instance, and another owner's same key is its own operation.
func TestKeyReuseAndOwners(t *testing.T) {
	onStores(t, gateConfig{}, func(t *testing.T, e *storeEnv) {
		mustPost(t, e.gates[0].URL+"/v1/orders", "alice", "shared", `{"amount":1}`)
		for _, g := range e.gates {
			if a := mustPost(t, g.URL+"/v1/orders", "alice", "shared", `{"amount":2}`); a.Status != 422 {
				t.Fatalf("different body: %d %s, want 422", a.Status, a.Body)
			}
		}
		bob := mustPost(t, e.gates[1].URL+"/v1/orders", "bob", "shared", `{"amount":1}`)
		if bob.Status != 201 || bob.replayed() || !strings.Contains(string(bob.Body), `"owner":"bob"`) {
			t.Fatalf("bob got %d replayed=%v %s: owners must not share a key", bob.Status, bob.replayed(), bob.Body)
		}
		if a := mustPost(t, e.gates[0].URL+"/v1/orders", "bob", "shared", `{"amount":1}`); !a.replayed() || !bytes.Equal(a.Body, bob.Body) {
			t.Fatalf("bob's retry: %d replayed=%v %s, want bob's own answer", a.Status, a.replayed(), a.Body)
		}
		if e.up.Calls("alice", "shared") != 1 || e.up.Calls("bob", "shared") != 1 {
			t.Fatalf("calls alice=%d bob=%d, want 1 each", e.up.Calls("alice", "shared"), e.up.Calls("bob", "shared"))
		}
	})
}

func TestServerErrorIsNotStored(t *testing.T) {
	onStores(t, gateConfig{}, func(t *testing.T, e *storeEnv) {
		e.up.Set(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", http.StatusServiceUnavailable) }, 0, nil)
		if a := mustPost(t, e.gates[0].URL+"/v1/orders", "alice", "k", "{}"); a.Status != 503 {
			t.Fatalf("got %d, want the upstream's 503", a.Status)
		}
		e.up.Set(nil, 0, nil)
		if a := mustPost(t, e.gates[1].URL+"/v1/orders", "alice", "k", "{}"); a.Status != 201 || a.replayed() {
			t.Fatalf("retry got %d replayed=%v, want a new forward", a.Status, a.replayed())
		}
		if n := e.up.Calls("alice", "k"); n != 2 {
			t.Fatalf("upstream executed %d, want 2", n)
		}
	})
}

// TestFaultStoreDownFailsClosed: with the store stopped every keyed request
// (a retry of a completed one too) is refused with a 503 problem on both
// instances, nothing is forwarded and /readyz is 503; once the store is
// back the same processes forward and replay again, without a restart.
func TestFaultStoreDownFailsClosed(t *testing.T) {
	onStores(t, gateConfig{}, func(t *testing.T, e *storeEnv) {
		if a := mustPost(t, e.gates[0].URL+"/v1/orders", "alice", "before", "{}"); a.Status != 201 {
			t.Fatalf("before: %d", a.Status)
		}
		e.stop()
		for i, g := range e.gates {
			for _, key := range []string{"before", fmt.Sprintf("during-%d", i)} {
				a := mustPost(t, g.URL+"/v1/orders", "alice", key, "{}")
				if a.Status != 503 || a.Header.Get("Content-Type") != "application/problem+json" {
					t.Fatalf("%s on instance %d with the store down: %d %s, want a 503 problem", key, i, a.Status, a.Body)
				}
			}
			resp, err := http.Get(g.AdminURL + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 503 {
				t.Fatalf("/readyz of instance %d = %d with the store down, want 503", i, resp.StatusCode)
			}
		}
		if n := e.up.Total(); n != 1 {
			t.Fatalf("upstream executed %d requests, want 1 (nothing forwarded while the store was down)", n)
		}
		e.restart()
		for i, g := range e.gates {
			key := fmt.Sprintf("after-%d", i)
			eventually(t, 20*time.Second, fmt.Sprintf("instance %d to use the store again", i), func() bool {
				a := mustPost(t, g.URL+"/v1/orders", "alice", key, "{}")
				if a.Status != 201 && a.Status != 503 {
					t.Fatalf("%s after the store came back: %d %s", key, a.Status, a.Body)
				}
				return a.Status == 201
			})
			if a := mustPost(t, g.URL+"/v1/orders", "alice", "before", "{}"); a.Status != 201 || !a.replayed() {
				t.Fatalf("before, on instance %d after the outage: %d replayed=%v, want a replay", i, a.Status, a.replayed())
			}
			if n := e.up.Calls("alice", key); n != 1 {
				t.Fatalf("%s executed %d times, want 1", key, n)
			}
		}
		if n := e.up.Calls("alice", "before"); n != 1 {
			t.Fatalf("before executed %d times, want 1", n)
		}
	})
}

// TestFaultClientDisconnectStillRecorded: a client that leaves while its
// request runs upstream does not cancel it; the response is recorded and a
// retry on the other instance replays it.
func TestFaultClientDisconnectStillRecorded(t *testing.T) {
	onStores(t, gateConfig{}, func(t *testing.T, e *storeEnv) {
		entered := make(chan struct{}, 1)
		e.up.Set(nil, 500*time.Millisecond, entered)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan Answer)
		go func() { done <- post(ctx, e.gates[0].URL+"/v1/orders", "alice", "gone", `{"a":1}`) }()
		<-entered
		cancel()
		if a := <-done; !errors.Is(a.Err, context.Canceled) {
			t.Fatalf("client: %v, want canceled", a.Err)
		}
		e.up.Set(nil, 0, nil)
		deadline := time.Now().Add(10 * time.Second)
		for {
			a := mustPost(t, e.gates[1].URL+"/v1/orders", "alice", "gone", `{"a":1}`)
			if a.Status == 201 {
				if !a.replayed() {
					t.Fatalf("the retry was forwarded again")
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("retry still answered %d %s", a.Status, a.Body)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if n := e.up.Calls("alice", "gone"); n != 1 {
			t.Fatalf("upstream executed %d, want 1", n)
		}
	})
}

func TestHTTPBinUpstream(t *testing.T) {
	v := valkeytest.Start(t)
	bin := httptest.NewServer(httpbin.New())
	t.Cleanup(bin.Close)
	g := startGate(t, gateConfig{Upstream: bin.URL, ValkeyAddrs: []string{v.Addr()},
		Defaults: "  replay_statuses: [\"2xx\", 409]\n  methods: [POST, PATCH, GET]\n"})

	t.Run("status codes", func(t *testing.T) {
		for code, stored := range map[int]bool{200: true, 201: true, 409: true, 418: false, 500: false} {
			url := fmt.Sprintf("%s/status/%d", g.URL, code)
			first := mustPost(t, url, "alice", fmt.Sprintf("status-%d", code), "")
			second := mustPost(t, url, "alice", fmt.Sprintf("status-%d", code), "")
			if first.Status != code || second.Status != code || second.replayed() != stored {
				t.Errorf("%d: got %d then %d replayed=%v, want replayed=%v", code, first.Status, second.Status, second.replayed(), stored)
			}
		}
	})
	t.Run("gzip", func(t *testing.T) {
		get := func() (*http.Response, []byte) {
			req, _ := http.NewRequest("GET", g.URL+"/gzip", nil)
			req.Header.Set("X-User", "alice")
			req.Header.Set("Idempotency-Key", "gz")
			req.Header.Set("Accept-Encoding", "gzip")
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp, b
		}
		r1, b1 := get()
		r2, b2 := get()
		if r2.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(b1, b2) || r2.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("gzip replay: replayed=%q encoding=%q equal=%v", r2.Header.Get("Idempotent-Replayed"), r2.Header.Get("Content-Encoding"), bytes.Equal(b1, b2))
		}
		zr, err := gzip.NewReader(bytes.NewReader(b2))
		if err != nil {
			t.Fatalf("replayed gzip body: %v", err)
		}
		var doc map[string]any
		if err := json.NewDecoder(zr).Decode(&doc); err != nil || r1.StatusCode != 200 {
			t.Fatalf("decoding the replayed body: %v", err)
		}
	})
	t.Run("chunked", func(t *testing.T) {
		first := mustPost(t, g.URL+"/stream-bytes/3000?chunk_size=100&seed=7", "alice", "chunked", "")
		second := mustPost(t, g.URL+"/stream-bytes/3000?chunk_size=100&seed=7", "alice", "chunked", "")
		if len(first.Body) != 3000 || !second.replayed() || !bytes.Equal(first.Body, second.Body) {
			t.Fatalf("chunked: %d bytes, replayed=%v equal=%v", len(first.Body), second.replayed(), bytes.Equal(first.Body, second.Body))
		}
	})
	t.Run("slow", func(t *testing.T) {
		var wg sync.WaitGroup
		answers := make([]Answer, 5)
		for i := range answers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i] = post(context.Background(), g.URL+"/delay/1", "alice", "slow", "")
			}()
		}
		wg.Wait()
		replays := 0
		for _, a := range answers {
			if a.Err != nil || a.Status != 200 || !bytes.Equal(a.Body, answers[0].Body) {
				t.Fatalf("slow: %d %v", a.Status, a.Err)
			}
			if a.replayed() {
				replays++
			}
		}
		if replays != len(answers)-1 {
			t.Fatalf("slow: %d replays, want %d (one forward)", replays, len(answers)-1)
		}
	})
}
