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

// buildPrevious builds idemgate at ref (or at the commit or tag the
// environment variable env names, when set) in a temporary git worktree
// of this repository, removed in t.Cleanup, and returns the executable.
func buildPrevious(t *testing.T, ref, env string) string {
	t.Helper()
	if r := os.Getenv(env); r != "" {
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
	previous := buildPrevious(t, previousRef, "IDEMGATE_PREVIOUS_REF")
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
	ctx, let := holdThrough(t, up, a, key)
	var dup Answer
	dupDone := make(chan struct{})
	go func() { defer close(dupDone); dup = post(ctx, b.URL+"/v1/orders", "alice", key, `{"amount":3}`) }()
	for metricValue(t, b, "idemgate_waiters") < 1 {
		if ctx.Err() != nil {
			let()
			t.Fatal("the duplicate never waited on the other instance")
		}
		time.Sleep(10 * time.Millisecond)
	}
	first := let()
	<-dupDone
	if first.Status != http.StatusCreated || dup.Status != http.StatusCreated || !dup.replayed() || string(dup.Body) != string(first.Body) {
		t.Fatalf("first %d %s; duplicate %d replayed=%v %s: want the duplicate to wait and replay the first",
			first.Status, first.Body, dup.Status, dup.replayed(), dup.Body)
	}
	if n := up.Calls("alice", key); n != 1 {
		t.Fatalf("upstream ran %s %d times, want once", key, n)
	}
}

// holdThrough sends a keyed request through a and returns once the
// upstream holds it, with the context of the exchange (20 s) and let,
// which lets the upstream answer and returns a's answer (once; later
// calls return it again).
func holdThrough(t *testing.T, up *Upstream, a *Gate, key string) (context.Context, func() Answer) {
	t.Helper()
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	up.Set(func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"held":true}`))
	}, 0, entered)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	var first Answer
	done := make(chan struct{})
	go func() { defer close(done); first = post(ctx, a.URL+"/v1/orders", "alice", key, `{"amount":3}`) }()
	var once sync.Once
	let := func() Answer {
		once.Do(func() {
			close(release)
			<-done
			up.Set(nil, 0, nil)
		})
		return first
	}
	t.Cleanup(func() { let(); cancel() })
	select {
	case <-entered:
	case <-ctx.Done():
		let()
		t.Fatal("the upstream never saw the first request")
	}
	return ctx, let
}

// previousRef5 is the release the rollout to layout 5 starts from: the
// last build that reads layouts 3 and 4 only (and writes 4 with
// store.valkey.layout: 4). IDEMGATE_PREVIOUS_REF5 names another commit or
// tag.
const previousRef5 = "f3e1812"

// TestRollingUpgradeLayout5 runs the previous release writing layout 4
// and this build writing 4 or 5 on one Valkey (docs/protocol.md, "Rolling
// upgrade to layout 5"), and checks each pair both ways: a key claimed
// through one instance is replayed by the other, waited on by the other
// while it runs (one execution), and refused (422) by the other with
// another body.
//
//   - previous (writing 4) beside this build writing 4: step 1;
//   - this build writing 4 beside this build writing 5: step 2, a fleet
//     mid-switch (a duplicate through either waits, the layout 4 waiter
//     marking the record of layout 5);
//   - previous beside this build writing 5, which step 2 must not begin
//     before: this build replays, waits on and refuses the previous
//     build's records; the previous build replays and refuses a completed
//     record of layout 5 (layout 4's) but reads a running one as a store
//     error and fails closed (503, nothing forwarded).
func TestRollingUpgradeLayout5(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release")
	}
	previous := buildPrevious(t, previousRef5, "IDEMGATE_PREVIOUS_REF5")
	srv := valkeytest.Start(t)
	up := startUpstream(t)
	base := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{srv.Addr()}}
	with4, with5 := base, base
	with4.ValkeyExtra = "    layout: 4\n"
	with5.ValkeyExtra = "    layout: 5\n"
	old4 := startGateExe(t, previous, with4, nil, "--wait-store", "10s")
	new4 := startGateArgs(t, with4, nil, "--wait-store", "10s")
	new5 := startGateArgs(t, with5, nil, "--wait-store", "10s")

	pairs := []struct {
		name  string
		a, b  *Gate
		bWait bool // b waits on a's running record (else fails closed)
	}{
		{"previous4 then new4", old4, new4, true},
		{"new4 then previous4", new4, old4, true},
		{"new4 then new5", new4, new5, true},
		{"new5 then new4", new5, new4, true},
		{"previous4 then new5", old4, new5, true},
		{"new5 then previous4", new5, old4, false},
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
			if again.Status != http.StatusCreated || !again.replayed() || string(again.Body) != string(first.Body) {
				t.Fatalf("retry through the other instance: %d replayed=%v %s, want the first answer replayed (%s)",
					again.Status, again.replayed(), again.Body, first.Body)
			}
			if other.Status != http.StatusUnprocessableEntity {
				t.Fatalf("key reused with another body through the other instance: %d %s, want 422", other.Status, other.Body)
			}
			if n := up.Calls("alice", key); n != 1 {
				t.Fatalf("upstream ran %s %d times, want once", key, n)
			}
			if p.bWait {
				waitedOn(t, up, p.a, p.b, key+"-wait")
			} else {
				refusedWhileRunning(t, up, p.a, p.b, key+"-wait")
			}
		})
	}
}

// refusedWhileRunning sends a keyed request through a while the upstream
// holds it, then its duplicate through b, a build that cannot read a's
// running record: b must fail closed (503 store-unavailable), and the
// upstream run once.
func refusedWhileRunning(t *testing.T, up *Upstream, a, b *Gate, key string) {
	t.Helper()
	ctx, let := holdThrough(t, up, a, key)
	dup := post(ctx, b.URL+"/v1/orders", "alice", key, `{"amount":3}`)
	first := let()
	if dup.Status != http.StatusServiceUnavailable || !strings.Contains(string(dup.Body), "store-unavailable") {
		t.Fatalf("previous build on a running record of layout 5: %d %s, want 503 store-unavailable", dup.Status, dup.Body)
	}
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	if n := up.Calls("alice", key); n != 1 {
		t.Fatalf("upstream ran %s %d times, want once", key, n)
	}
}
