package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// previousRef is the release the rolling upgrade starts from: the last
// build that writes and reads only layout 3. IDEMGATE_PREVIOUS_REF names
// another commit or tag.
const previousRef = "5c287aa"

// buildPrevious builds idemgate at the previous release in a temporary git
// worktree of this repository, removed in t.Cleanup, and returns the
// executable.
func buildPrevious(t *testing.T) string {
	t.Helper()
	ref := previousRef
	if r := os.Getenv("IDEMGATE_PREVIOUS_REF"); r != "" {
		ref = r
	}
	dir := filepath.Join(t.TempDir(), "previous")
	if out, err := exec.Command("git", "worktree", "add", "--detach", dir, ref).CombinedOutput(); err != nil {
		t.Fatalf("git worktree add %s: %v\n%s", ref, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("git", "worktree", "remove", "--force", dir).CombinedOutput(); err != nil {
			t.Logf("git worktree remove %s: %v\n%s", dir, err, out)
		}
	})
	exe := filepath.Join(t.TempDir(), "idemgate-previous")
	build := exec.Command("go", "build", "-o", exe, "./cmd/idemgate")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building idemgate at %s: %v\n%s", ref, err, out)
	}
	return exe
}

// TestRollingUpgradeLayout4 runs the previous release and this build on one
// Valkey, as during a rolling upgrade (docs/protocol.md, "Rolling upgrade to
// layout 4"), and checks each pair both ways: a key claimed through one
// instance is replayed by the other, waited on by the other while it runs
// (one execution), and refused (422) by the other with another body.
//
//   - previous (layout 3) beside this build writing layout 3: step 1;
//   - this build writing 3 beside this build writing 4: step 2, a fleet
//     mid-switch;
//   - previous beside this build writing 4, which step 2 must not begin
//     before: the previous build reads a record of layout 4 as a store
//     error and fails closed (503, nothing forwarded), while this build
//     writing 4 replays, waits on and refuses the previous build's records.
func TestRollingUpgradeLayout4(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release")
	}
	previous := buildPrevious(t)
	srv := valkeytest.Start(t)
	up := startUpstream(t)
	base := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{srv.Addr()}}
	with4 := base
	with4.ValkeyExtra = "    layout: 4\n"
	old := startGateExe(t, previous, base, nil, "--wait-store", "10s")
	new3 := startGateArgs(t, base, nil, "--wait-store", "10s")
	new4 := startGateArgs(t, with4, nil, "--wait-store", "10s")

	pairs := []struct {
		name   string
		a, b   *Gate
		bReads bool // b reads what a writes
	}{
		{"previous then new3", old, new3, true},
		{"new3 then previous", new3, old, true},
		{"new3 then new4", new3, new4, true},
		{"new4 then new3", new4, new3, true},
		{"previous then new4", old, new4, true},
		{"new4 then previous", new4, old, false},
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			key := strings.ReplaceAll(p.name, " ", "-")
			first := mustPost(t, p.a.URL+"/v1/orders", "alice", key, `{"amount":1}`)
			if first.Status != http.StatusCreated {
				t.Fatalf("first POST: %d %s", first.Status, first.Body)
			}
			again := mustPost(t, p.b.URL+"/v1/orders", "alice", key, `{"amount":1}`)
			other := mustPost(t, p.b.URL+"/v1/orders", "alice", key, `{"amount":2}`)
			if !p.bReads {
				// The previous build cannot read layout 4: it fails closed.
				for _, a := range []Answer{again, other} {
					if a.Status != http.StatusServiceUnavailable || !strings.Contains(string(a.Body), "store-unavailable") {
						t.Fatalf("previous build on a record of layout 4: %d %s, want 503 store-unavailable", a.Status, a.Body)
					}
				}
			} else {
				if again.Status != http.StatusCreated || !again.replayed() || string(again.Body) != string(first.Body) {
					t.Fatalf("retry through the other instance: %d replayed=%v %s, want the first answer replayed (%s)",
						again.Status, again.replayed(), again.Body, first.Body)
				}
				if other.Status != http.StatusUnprocessableEntity {
					t.Fatalf("key reused with another body through the other instance: %d %s, want 422", other.Status, other.Body)
				}
			}
			if n := up.Calls("alice", key); n != 1 {
				t.Fatalf("upstream ran %s %d times, want once", key, n)
			}
			if p.bReads {
				waitedOn(t, up, p.a, p.b, key+"-wait")
			}
		})
	}
}

// waitedOn sends a keyed request through a while the upstream holds it,
// then its duplicate through b, which must wait (idemgate_waiters on b)
// and replay a's answer once the upstream lets go: one execution.
func waitedOn(t *testing.T, up *Upstream, a, b *Gate, key string) {
	t.Helper()
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	up.Set(func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"held":true}`))
	}, 0, entered)
	defer up.Set(nil, 0, nil)
	var wg sync.WaitGroup
	var first, dup Answer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wg.Add(1)
	go func() { defer wg.Done(); first = post(ctx, a.URL+"/v1/orders", "alice", key, `{"amount":3}`) }()
	select {
	case <-entered:
	case <-ctx.Done():
		close(release)
		t.Fatal("the upstream never saw the first request")
	}
	wg.Add(1)
	go func() { defer wg.Done(); dup = post(ctx, b.URL+"/v1/orders", "alice", key, `{"amount":3}`) }()
	for metricValue(t, b, "idemgate_waiters") < 1 {
		if ctx.Err() != nil {
			close(release)
			t.Fatal("the duplicate never waited on the other instance")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	if first.Status != http.StatusCreated || dup.Status != http.StatusCreated || !dup.replayed() || string(dup.Body) != string(first.Body) {
		t.Fatalf("first %d %s; duplicate %d replayed=%v %s: want the duplicate to wait and replay the first",
			first.Status, first.Body, dup.Status, dup.replayed(), dup.Body)
	}
	if n := up.Calls("alice", key); n != 1 {
		t.Fatalf("upstream ran %s %d times, want once", key, n)
	}
}
