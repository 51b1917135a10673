package valkeytest_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

func TestKillRestartKeepsAOFWrites(t *testing.T) {
	s := valkeytest.Start(t, valkeytest.WithAOF())
	if out, err := s.CLI("SET", "k", "v"); err != nil || out != "OK" {
		t.Fatalf("SET = %q, %v", out, err)
	}
	s.Kill() // no shutdown save: only appendfsync always keeps the write
	if _, err := s.CLI("PING"); err == nil {
		t.Fatal("PING answered after Kill")
	}
	s.Restart()
	if out, err := s.CLI("GET", "k"); err != nil || out != "v" {
		t.Fatalf("GET after Kill+Restart = %q, %v; want v", out, err)
	}
}

func TestPauseResume(t *testing.T) {
	s := valkeytest.Start(t)
	s.Pause()
	s.Resume()
	if out, err := s.CLI("PING"); err != nil || out != "PONG" {
		t.Fatalf("PING after Resume = %q, %v", out, err)
	}
	s.Pause() // Stop in t.Cleanup must resume a paused server first
}

func TestClusterCoversAllSlots(t *testing.T) {
	c := valkeytest.StartCluster(t, 3)
	if len(c.Addrs()) != 3 {
		t.Fatalf("Addrs = %v", c.Addrs())
	}
	for _, s := range c.Servers {
		out, err := s.CLI("CLUSTER", "INFO")
		if err != nil || !strings.Contains(out, "cluster_known_nodes:3") {
			t.Fatalf("%s CLUSTER INFO = %q, %v", s.Addr(), out, err)
		}
	}
}

// fatalRecorder records how the test would end (Fatal, Fatalf or, under
// -short, Skipf) instead of ending the real test.
type fatalRecorder struct {
	testing.TB
	msg     string
	skipped bool
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fatalRecorder) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fatalRecorder) Skipf(format string, args ...any) {
	f.msg, f.skipped = fmt.Sprintf(format, args...), true
	runtime.Goexit()
}

// TestMissingBinaryFailsWithInstallHint: without valkey-server the test
// fails saying how to install it; under -short it is skipped, saying the
// same.
func TestMissingBinaryFailsWithInstallHint(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		valkeytest.Start(rec)
	}()
	<-done
	if !strings.Contains(rec.msg, "valkey-server not found") || !strings.Contains(rec.msg, "scripts/install-valkey.sh") {
		t.Fatalf("Fatalf message = %q, want the install hint", rec.msg)
	}
	if rec.skipped != testing.Short() {
		t.Fatalf("skipped = %v under -short %v: a missing server skips only under -short", rec.skipped, testing.Short())
	}
}

func TestFillRefusesWritesUntilFreed(t *testing.T) {
	s := valkeytest.Start(t, valkeytest.WithArgs("--maxmemory", "16mb", "--maxmemory-policy", "noeviction"))
	free := s.Fill(t)
	if out, _ := s.CLI("SET", "small", "x"); !strings.HasPrefix(out, "OOM") {
		t.Fatalf("SET on a full server = %q, want an OOM error", out)
	}
	if out, err := s.CLI("GET", valkeytest.FillPrefix+"0"); err != nil || len(out) == 0 {
		t.Fatalf("GET of a filler key = %d bytes, %v; reads must still work", len(out), err)
	}
	free()
	free() // idempotent
	if out, err := s.CLI("SET", "small", "x"); err != nil || out != "OK" {
		t.Fatalf("SET after free = %q, %v", out, err)
	}
	if out, err := s.CLI("DBSIZE"); err != nil || out != "1" {
		t.Fatalf("DBSIZE after free = %q, %v; want only the small key", out, err)
	}
}
