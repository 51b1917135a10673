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

func TestE2EForwardOnceThenReplayByteForByte(t *testing.T) {
	_, up, g := onValkey(t, gateConfig{})
	first := mustPost(t, g.URL+"/v1/orders", "alice", "k-1", `{"amount":42}`)
	if first.Status != 201 || first.replayed() {
		t.Fatalf("first: %d %v", first.Status, first.Header)
	}
	for i := 0; i < 3; i++ {
		again := mustPost(t, g.URL+"/v1/orders", "alice", "k-1", `{"amount":42}`)
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
	if n := up.Calls("alice", "k-1"); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

func TestE2EConcurrentDuplicatesOneUpstreamCall(t *testing.T) {
	_, up, g := onValkey(t, gateConfig{})
	up.Set(nil, 300*time.Millisecond, nil)
	answers := make([]Answer, 50)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = post(context.Background(), g.URL+"/v1/orders", "alice", "burst", `{"n":1}`)
		}()
	}
	wg.Wait()
	for i, a := range answers {
		if a.Err != nil || a.Status != 201 || !bytes.Equal(a.Body, answers[0].Body) {
			t.Fatalf("answer %d: %d %v %q, want 201 and the same body as answer 0", i, a.Status, a.Err, a.Body)
		}
	}
	if n := up.Calls("alice", "burst"); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

func TestE2EKeyReuseAndOwners(t *testing.T) {
	_, up, g := onValkey(t, gateConfig{})
	mustPost(t, g.URL+"/v1/orders", "alice", "shared", `{"amount":1}`)
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "shared", `{"amount":2}`); a.Status != 422 {
		t.Fatalf("different body: %d %s, want 422", a.Status, a.Body)
	}
	bob := mustPost(t, g.URL+"/v1/orders", "bob", "shared", `{"amount":1}`)
	if bob.Status != 201 || bob.replayed() || !strings.Contains(string(bob.Body), `"owner":"bob"`) {
		t.Fatalf("bob got %d replayed=%v %s: owners must not share a key", bob.Status, bob.replayed(), bob.Body)
	}
	if up.Calls("alice", "shared") != 1 || up.Calls("bob", "shared") != 1 {
		t.Fatalf("calls alice=%d bob=%d, want 1 each", up.Calls("alice", "shared"), up.Calls("bob", "shared"))
	}
}

func TestE2EServerErrorIsNotStored(t *testing.T) {
	_, up, g := onValkey(t, gateConfig{})
	up.Set(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", 503) }, 0, nil)
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "k", "{}"); a.Status != 503 {
		t.Fatalf("got %d, want the upstream's 503", a.Status)
	}
	up.Set(nil, 0, nil)
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "k", "{}"); a.Status != 201 || a.replayed() {
		t.Fatalf("retry got %d replayed=%v, want a new forward", a.Status, a.replayed())
	}
	if n := up.Calls("alice", "k"); n != 2 {
		t.Fatalf("upstream executed %d, want 2", n)
	}
}

func TestE2EValkeyDownFailsClosed(t *testing.T) {
	v, up, g := onValkey(t, gateConfig{})
	v.Stop()
	a := mustPost(t, g.URL+"/v1/orders", "alice", "k", "{}")
	if a.Status != 503 || a.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("got %d %s, want 503 problem", a.Status, a.Body)
	}
	if up.Total() != 0 {
		t.Fatalf("upstream executed %d requests while the store was down", up.Total())
	}
	resp, err := http.Get(g.AdminURL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("/readyz = %d with the store down, want 503", resp.StatusCode)
	}
}

func TestE2EClientDisconnectStillRecorded(t *testing.T) {
	_, up, g := onValkey(t, gateConfig{})
	entered := make(chan struct{}, 1)
	up.Set(nil, 500*time.Millisecond, entered)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Answer)
	go func() { done <- post(ctx, g.URL+"/v1/orders", "alice", "gone", `{"a":1}`) }()
	<-entered
	cancel()
	if a := <-done; !errors.Is(a.Err, context.Canceled) {
		t.Fatalf("client: %v, want canceled", a.Err)
	}
	up.Set(nil, 0, nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := mustPost(t, g.URL+"/v1/orders", "alice", "gone", `{"a":1}`)
		if a.Status == 201 {
			if !a.replayed() {
				t.Fatalf("the retry was forwarded again")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retry still answered %d %s", a.Status, a.Body)
		}
	}
	if n := up.Calls("alice", "gone"); n != 1 {
		t.Fatalf("upstream executed %d, want 1", n)
	}
}

func TestE2ETwoInstancesOneValkey(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	up.Set(nil, 300*time.Millisecond, nil)
	c := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}}
	gates := []*Gate{startGate(t, c), startGate(t, c)}
	const keys, dup = 10, 8
	answers := make([][]Answer, keys)
	var wg sync.WaitGroup
	for k := 0; k < keys; k++ {
		answers[k] = make([]Answer, dup)
		for d := 0; d < dup; d++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[k][d] = post(context.Background(), gates[d%2].URL+"/v1/orders", "alice", fmt.Sprintf("key-%d", k), "{}")
			}()
		}
	}
	wg.Wait()
	for k := 0; k < keys; k++ {
		if n := up.Calls("alice", fmt.Sprintf("key-%d", k)); n != 1 {
			t.Errorf("key-%d executed %d times, want 1", k, n)
		}
		for d, a := range answers[k] {
			if a.Err != nil || a.Status != 201 || !bytes.Equal(a.Body, answers[k][0].Body) {
				t.Errorf("key-%d answer %d: %d %v", k, d, a.Status, a.Err)
			}
		}
	}
}

func TestE2EHTTPBinUpstream(t *testing.T) {
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
