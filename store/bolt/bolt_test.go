package bolt_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/bolt"
	"github.com/idemgate/idemgate/store/storetest"
)

// helperPathEnv makes the test binary act as a second process opening the
// file named by its value (see TestMain and TestSecondProcessIsRefused).
const helperPathEnv = "IDEMGATE_BOLT_TEST_HELPER_PATH"

// helperCrashEnv, set to "1" with helperPathEnv, makes the helper write
// records and then hang until killed (see TestRecordsSurviveKill).
const helperCrashEnv = "IDEMGATE_BOLT_TEST_HELPER_CRASH"

// helperLockedExit is the helper's exit code when New failed with ErrLocked.
const helperLockedExit = 3

// Identities and token the crashing helper writes.
var (
	crashCompleted = store.Identity{Owner: "crash", Scope: "POST /orders", Key: "completed"}
	crashRunning   = store.Identity{Owner: "crash", Scope: "POST /orders", Key: "running"}
)

const crashToken = "token-of-the-killed-process"

func TestMain(m *testing.M) {
	if path := os.Getenv(helperPathEnv); path != "" {
		if os.Getenv(helperCrashEnv) == "1" {
			os.Exit(helperCrash(path))
		}
		os.Exit(helperOpen(path))
	}
	os.Exit(m.Run())
}

// helperCrash completes one record, claims another, reports "ready" on
// stdout and waits to be killed (for at most 30s, so it never outlives a
// broken test).
func helperCrash(path string) int {
	s, err := bolt.New(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	steps := []error{}
	_, err = s.Claim(ctx, store.ClaimParams{Identity: crashCompleted, Fingerprint: "fp", Token: crashToken, Lease: time.Minute, Retention: time.Hour})
	steps = append(steps, err)
	_, err = s.Complete(ctx, crashCompleted, crashToken, replayResponse())
	steps = append(steps, err)
	_, err = s.Claim(ctx, store.ClaimParams{Identity: crashRunning, Fingerprint: "fp", Token: crashToken, Lease: time.Minute, Retention: time.Hour})
	steps = append(steps, err)
	if err := errors.Join(steps...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	time.Sleep(30 * time.Second)
	return 2
}

func helperOpen(path string) int {
	s, err := bolt.New(path, bolt.WithOpenTimeout(300*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, bolt.ErrLocked) {
			return helperLockedExit
		}
		return 1
	}
	_ = s.Close()
	return 0
}

func open(t testing.TB, path string, opts ...bolt.Option) *bolt.Store {
	t.Helper()
	s, err := bolt.New(path, opts...)
	if err != nil {
		t.Fatalf("bolt.New(%q): %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func dbPath(t testing.TB) string { return filepath.Join(t.TempDir(), "idemgate.db") }

func TestContractInjectedClock(t *testing.T) {
	// A start off the millisecond grid checks that the store truncates.
	storetest.RunHarness(t, storetest.Harness{
		NewStore: func(t *testing.T, clock *storetest.Clock) store.Store {
			s, err := bolt.New(dbPath(t), bolt.WithClock(clock.Now))
			if err != nil {
				t.Fatalf("bolt.New: %v", err)
			}
			return s
		},
		ClockStart: time.Date(2025, 1, 2, 3, 4, 5, 678_900_000, time.UTC),
	})
}

func TestContractRealClock(t *testing.T) {
	storetest.RunHarness(t, storetest.Harness{
		NewStore: func(t *testing.T, _ *storetest.Clock) store.Store {
			s, err := bolt.New(dbPath(t))
			if err != nil {
				t.Fatalf("bolt.New: %v", err)
			}
			return s
		},
	})
}

func replayResponse() store.Response {
	h := http.Header{}
	h.Add("Content-Type", "application/octet-stream")
	h.Add("Set-Cookie", "a=1; Path=/")
	h.Add("Set-Cookie", "b=2; HttpOnly")
	h["x-lower"] = []string{"", "second"}
	h["X-None"] = []string{}
	return store.Response{Status: 201, Header: h, Body: []byte("\x00\xffbinary\r\n\x80")}
}

func TestReopenKeepsRecords(t *testing.T) {
	clock := storetest.NewClock(time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC))
	path := dbPath(t)
	ctx := t.Context()
	s, err := bolt.New(path, bolt.WithClock(clock.Now), bolt.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	done := store.Identity{Owner: "alice", Scope: "POST /orders", Key: "k1"}
	running := store.Identity{Owner: "alice", Scope: "POST /orders", Key: "k2"}
	if res, err := s.Claim(ctx, store.ClaimParams{Identity: done, Fingerprint: "fp-done", Token: "t1", Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim: %+v %v", res, err)
	}
	want := replayResponse()
	if ok, err := s.Complete(ctx, done, "t1", want); !ok || err != nil {
		t.Fatalf("Complete: %v %v", ok, err)
	}
	if res, err := s.Claim(ctx, store.ClaimParams{Identity: running, Fingerprint: "fp-run", Token: "t2", Lease: time.Minute}); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim: %+v %v", res, err)
	}
	beforeDone, err := s.Get(ctx, done)
	if err != nil {
		t.Fatal(err)
	}
	beforeRunning, err := s.Get(ctx, running)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode = %v (%v), want 0600", fi.Mode().Perm(), err)
	}

	s = open(t, path, bolt.WithClock(clock.Now), bolt.WithSweepInterval(0))
	afterDone, err := s.Get(ctx, done)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(beforeDone, afterDone) {
		t.Fatalf("completed record after reopen:\n got %+v\nwant %+v", afterDone, beforeDone)
	}
	res, err := s.Claim(ctx, store.ClaimParams{Identity: done, Fingerprint: "fp-done", Token: "t3", Lease: time.Minute})
	if err != nil || res.State != store.Completed || res.Fingerprint != "fp-done" {
		t.Fatalf("Claim after reopen = %+v %v, want Completed", res, err)
	}
	got := res.Response
	if got.Status != want.Status || !bytes.Equal(got.Body, want.Body) || !reflect.DeepEqual(got.Header, want.Header) || got.Omitted {
		t.Fatalf("replay after reopen = %+v, want byte-identical %+v", got, want)
	}
	if !got.StoredAt.Equal(clock.Now().Truncate(time.Millisecond)) {
		t.Fatalf("StoredAt = %v, want %v", got.StoredAt, clock.Now())
	}

	afterRunning, err := s.Get(ctx, running)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(beforeRunning, afterRunning) || afterRunning.Token != "t2" || afterRunning.State != store.Running {
		t.Fatalf("running record after reopen:\n got %+v\nwant %+v", afterRunning, beforeRunning)
	}
	if res, err := s.Claim(ctx, store.ClaimParams{Identity: running, Fingerprint: "fp-run", Token: "t4", Lease: time.Minute}); err != nil || res.State != store.Running {
		t.Fatalf("Claim on running record after reopen = %+v %v, want Running", res, err)
	}
	// The holder from before the restart is presumed dead once its lease ends.
	clock.Advance(time.Minute)
	res, err = s.Claim(ctx, store.ClaimParams{Identity: running, Fingerprint: "fp-run", Token: "t5", Lease: time.Minute})
	if err != nil || res.State != store.Claimed || !res.Takeover {
		t.Fatalf("Claim past the pre-restart lease = %+v %v, want a takeover", res, err)
	}
	if ok, err := s.Complete(ctx, running, "t2", store.Response{Status: 200}); ok || err != nil {
		t.Fatalf("Complete by the pre-restart holder = %v %v, want false", ok, err)
	}
}

func claimAndComplete(t *testing.T, s *bolt.Store, id store.Identity, retention time.Duration) {
	t.Helper()
	p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Second, Retention: retention}
	if res, err := s.Claim(t.Context(), p); err != nil || res.State != store.Claimed {
		t.Fatalf("Claim: %+v %v", res, err)
	}
	if ok, err := s.Complete(t.Context(), id, "t", store.Response{Status: 200}); !ok || err != nil {
		t.Fatalf("Complete: %v %v", ok, err)
	}
}

func mustLen(t *testing.T, s *bolt.Store) int {
	t.Helper()
	n, err := s.Len(t.Context())
	if err != nil {
		t.Fatalf("Len: %v", err)
	}
	return n
}

func TestExpiredRecordIsAbsentBeforeSweep(t *testing.T) {
	clock := storetest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	s := open(t, dbPath(t), bolt.WithClock(clock.Now), bolt.WithSweepInterval(0))
	id := store.Identity{Key: "k"}
	claimAndComplete(t, s, id, time.Second)
	clock.Advance(time.Second)
	if r, err := s.Get(t.Context(), id); err != nil || r != nil {
		t.Fatalf("Get past retention = %+v %v, want nil", r, err)
	}
	if n := mustLen(t, s); n != 1 {
		t.Fatalf("Len = %d, want the expired record still in the file (not swept yet)", n)
	}
	// A write on the identity removes the expired value and claims afresh.
	res, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "other", Token: "t2", Lease: time.Second, Retention: time.Second})
	if err != nil || res.State != store.Claimed || res.Takeover {
		t.Fatalf("Claim past retention = %+v %v, want a fresh claim", res, err)
	}
	// The old expiry entry went with it: sweeping at the old time removes nothing.
	if got, err := s.Sweep(t.Context()); err != nil || got != 0 || mustLen(t, s) != 1 {
		t.Fatalf("Sweep removed %d (%v), want 0 and the new claim kept", got, err)
	}
}

func TestBackgroundSweepStopsOnClose(t *testing.T) {
	clock := storetest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	s, err := bolt.New(dbPath(t), bolt.WithClock(clock.Now), bolt.WithSweepInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	id := store.Identity{Key: "k"}
	if _, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Second, Retention: time.Second}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	deadline := time.Now().Add(5 * time.Second)
	for mustLen(t, s) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("background sweep did not remove the expired record within 5s")
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(t.Context()); err == nil || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Ping after Close = %v, want an error wrapping ErrUnavailable", err)
	}
	if _, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Second}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Claim after Close = %v, want an error wrapping ErrUnavailable", err)
	}
}

func TestCloseWakesWatchers(t *testing.T) {
	s, err := bolt.New(dbPath(t))
	if err != nil {
		t.Fatal(err)
	}
	ch, stop := s.Watch(store.Identity{Key: "k"})
	defer stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(3 * time.Second):
		t.Fatal("watcher not woken by Close")
	}
	late, stopLate := s.Watch(store.Identity{Key: "k"})
	defer stopLate()
	select {
	case <-late:
	default:
		t.Fatal("Watch after Close returned a channel that is not closed; its waiter would only ever poll")
	}
}

func TestSecondOpenIsRefused(t *testing.T) {
	path := dbPath(t)
	first := open(t, path)
	const timeout = 200 * time.Millisecond
	start := time.Now()
	second, err := bolt.New(path, bolt.WithOpenTimeout(timeout))
	elapsed := time.Since(start)
	if err == nil {
		_ = second.Close()
		t.Fatal("second New on an open file succeeded, want ErrLocked")
	}
	if !errors.Is(err, bolt.ErrLocked) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), path) {
		t.Fatalf("second New: %v, want an error naming the path and wrapping ErrLocked and ErrUnavailable", err)
	}
	if elapsed > timeout+2*time.Second {
		t.Fatalf("second New took %v with a %v timeout", elapsed, timeout)
	}
	// The first store is unaffected, and the file opens again once closed.
	if err := first.Ping(t.Context()); err != nil {
		t.Fatalf("Ping of the first store: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	open(t, path, bolt.WithOpenTimeout(timeout))
}

func TestSecondProcessIsRefused(t *testing.T) {
	path := dbPath(t)
	s := open(t, path)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	run := func() (int, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperPathEnv+"="+path)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0, stderr.String()
		case errors.As(err, &exit):
			return exit.ExitCode(), stderr.String()
		}
		t.Fatalf("helper process: %v", err)
		return 0, ""
	}
	code, msg := run()
	if code != helperLockedExit || !strings.Contains(msg, "another process") {
		t.Fatalf("second process: exit %d, stderr %q; want exit %d with a clear lock error", code, msg, helperLockedExit)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if code, msg := run(); code != 0 {
		t.Fatalf("second process after Close: exit %d, stderr %q; want it to open the file", code, msg)
	}
}

func TestNewNeedsExistingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "idemgate.db")
	s, err := bolt.New(path)
	if err == nil {
		_ = s.Close()
		t.Fatal("New in a missing directory succeeded")
	}
	if !errors.Is(err, os.ErrNotExist) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "must exist") {
		t.Fatalf("New in a missing directory: %v, want a clear error wrapping os.ErrNotExist and ErrUnavailable", err)
	}
	if _, err := os.Stat(filepath.Dir(path)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("New created the directory: %v", err)
	}
}

func TestNewRefusesNonBoltFile(t *testing.T) {
	path := dbPath(t)
	if err := os.WriteFile(path, bytes.Repeat([]byte("not a bolt file "), 512), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := bolt.New(path)
	if err == nil {
		_ = s.Close()
		t.Fatal("New on a non-bolt file succeeded")
	}
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("New on a non-bolt file: %v, want an error wrapping ErrUnavailable", err)
	}
}

func benchStore(b *testing.B) *bolt.Store {
	return open(b, filepath.Join(b.TempDir(), "bench.db"))
}

// BenchmarkClaimComplete is the first request of a key: Claim on a fresh
// identity, then Complete (two write transactions, two fsyncs).
func BenchmarkClaimComplete(b *testing.B) {
	s := benchStore(b)
	ctx := b.Context()
	resp := replayResponse()
	i := 0
	for b.Loop() {
		i++
		id := store.Identity{Owner: "o", Scope: "POST /orders", Key: fmt.Sprint("k-", i)}
		res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute, Retention: time.Hour})
		if err != nil || res.State != store.Claimed {
			b.Fatalf("Claim: %+v %v", res, err)
		}
		if ok, err := s.Complete(ctx, id, "t", resp); !ok || err != nil {
			b.Fatalf("Complete: %v %v", ok, err)
		}
	}
}

// BenchmarkClaimCompleted is a retry: Claim on a completed identity, which
// answers the stored response from a read transaction.
func BenchmarkClaimCompleted(b *testing.B) {
	s := benchStore(b)
	ctx := b.Context()
	id := store.Identity{Owner: "o", Scope: "POST /orders", Key: "k"}
	if _, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute}); err != nil {
		b.Fatal(err)
	}
	if ok, err := s.Complete(ctx, id, "t", replayResponse()); !ok || err != nil {
		b.Fatalf("Complete: %v %v", ok, err)
	}
	p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t2", Lease: time.Minute}
	for b.Loop() {
		if res, err := s.Claim(ctx, p); err != nil || res.State != store.Completed {
			b.Fatalf("Claim: %+v %v", res, err)
		}
	}
}

// BenchmarkClaimCompletedParallel is BenchmarkClaimCompleted from many
// goroutines (read transactions run concurrently).
func BenchmarkClaimCompletedParallel(b *testing.B) {
	s := benchStore(b)
	ctx := b.Context()
	id := store.Identity{Owner: "o", Scope: "POST /orders", Key: "k"}
	if _, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute}); err != nil {
		b.Fatal(err)
	}
	if ok, err := s.Complete(ctx, id, "t", replayResponse()); !ok || err != nil {
		b.Fatalf("Complete: %v %v", ok, err)
	}
	b.RunParallel(func(pb *testing.PB) {
		p := store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t2", Lease: time.Minute}
		for pb.Next() {
			if res, err := s.Claim(ctx, p); err != nil || res.State != store.Completed {
				b.Errorf("Claim: %+v %v", res, err)
				return
			}
		}
	})
}

// BenchmarkClaimCompleteParallel is BenchmarkClaimComplete from many
// goroutines: write transactions, and their fsyncs, are serialized.
func BenchmarkClaimCompleteParallel(b *testing.B) {
	s := benchStore(b)
	ctx := b.Context()
	resp := replayResponse()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := store.Identity{Owner: "o", Scope: "POST /orders", Key: fmt.Sprint("k-", n.Add(1))}
			res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: "t", Lease: time.Minute, Retention: time.Hour})
			if err != nil || res.State != store.Claimed {
				b.Errorf("Claim: %+v %v", res, err)
				return
			}
			if ok, err := s.Complete(ctx, id, "t", resp); !ok || err != nil {
				b.Errorf("Complete: %v %v", ok, err)
				return
			}
		}
	})
}

// TestRecordsSurviveKill kills a process holding the file (SIGKILL, no
// Close) right after its writes returned, then reopens the file: the
// completed record replays byte for byte, and the running claim is still
// there, so a retry waits for its lease and only then takes it over.
func TestRecordsSurviveKill(t *testing.T) {
	path := dbPath(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperPathEnv+"="+path, helperCrashEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make([]byte, len("ready\n"))
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("helper: read %q (%v), stderr %q", line, err, stderr.String())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// The kernel drops the dead process's flock; the file opens at once.
	var offset atomic.Int64
	s := open(t, path, bolt.WithOpenTimeout(5*time.Second), bolt.WithClock(func() time.Time {
		return time.Now().Add(time.Duration(offset.Load()))
	}))
	res, err := s.Claim(t.Context(), store.ClaimParams{Identity: crashCompleted, Fingerprint: "fp", Token: "retry", Lease: time.Minute})
	want := replayResponse()
	if err != nil || res.State != store.Completed || res.Response.Status != want.Status ||
		!bytes.Equal(res.Response.Body, want.Body) || !reflect.DeepEqual(res.Response.Header, want.Header) {
		t.Fatalf("Claim of the completed record after kill = %+v %v, want a byte-identical replay", res, err)
	}
	res, err = s.Claim(t.Context(), store.ClaimParams{Identity: crashRunning, Fingerprint: "fp", Token: "retry", Lease: time.Minute})
	if err != nil || res.State != store.Running {
		t.Fatalf("Claim of the killed process's running claim = %+v %v, want Running until its lease ends", res, err)
	}
	offset.Store(int64(time.Minute))
	res, err = s.Claim(t.Context(), store.ClaimParams{Identity: crashRunning, Fingerprint: "fp", Token: "retry", Lease: time.Minute})
	if err != nil || res.State != store.Claimed || !res.Takeover {
		t.Fatalf("Claim past the killed process's lease = %+v %v, want a takeover", res, err)
	}
}

// TestMutualExclusionUnderSweep hammers one identity from many goroutines
// while the background sweep runs every millisecond and completed records
// expire after 1ms: a claim must never be granted while another holder's
// lease is valid, whatever the sweep removes meanwhile.
func TestMutualExclusionUnderSweep(t *testing.T) {
	s := open(t, dbPath(t), bolt.WithSweepInterval(time.Millisecond))
	id := store.Identity{Owner: "o", Scope: "POST /orders", Key: "contended"}
	const workers, rounds = 8, 60
	var holders, granted atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for i := range rounds {
				tok := fmt.Sprintf("w%d-%d", w, i)
				res, err := s.Claim(ctx, store.ClaimParams{Identity: id, Fingerprint: "fp", Token: tok, Lease: time.Minute, Retention: time.Millisecond})
				if err != nil {
					errs <- err
					return
				}
				if res.State != store.Claimed {
					continue
				}
				granted.Add(1)
				if n := holders.Add(1); n != 1 {
					errs <- fmt.Errorf("claim %s granted while %d other holders were inside their lease", tok, n-1)
					return
				}
				// Leave before giving the record up, so the next holder
				// never counts this one.
				holders.Add(-1)
				var ok bool
				if i%2 == 0 {
					ok, err = s.Complete(ctx, id, tok, store.Response{Status: 200, Body: []byte(tok)})
				} else {
					ok, err = s.Release(ctx, id, tok)
				}
				if err != nil || !ok {
					errs <- fmt.Errorf("holder %s giving up the record: %v %v", tok, ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if granted.Load() < 2 {
		t.Fatalf("only %d claims granted; the test did not exercise hand-overs", granted.Load())
	}
}
