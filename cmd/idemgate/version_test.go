package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersionCommandBinary: a source build of the real binary reports the
// commit it was built from (".dirty" after a change), and a release build
// the version -ldflags stamps. The go command records VCS information only
// in a plain git checkout (not in a git worktree, whose .git is a file), so
// the test builds from a fresh repository holding a copy of this tree.
func TestVersionCommandBinary(t *testing.T) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse (the test needs git and the repository): %v", err)
	}
	files, err := exec.Command("git", "-C", strings.TrimSpace(string(root)), "ls-files", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	for _, f := range strings.Split(strings.TrimSpace(string(files)), "\n") {
		data, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(root)), f))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(src, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", src, "-c", "user.name=t", "-c", "user.email=t@t.invalid"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "snapshot")
	rev := git("rev-parse", "HEAD")[:12]

	version := func(name string, flags ...string) string {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "idemgate")
		// -buildvcs=true: a GOFLAGS=-buildvcs=false in the environment
		// (CI images set it) would leave out the revision.
		build := exec.Command("go", append(append([]string{"build", "-buildvcs=true"}, flags...), "-o", bin, "./cmd/idemgate")...)
		build.Dir = src
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("%s: go build: %v\n%s", name, err, out)
		}
		out, err := exec.Command(bin, "version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s: idemgate version: %v\n%s", name, err, out)
		}
		return string(out)
	}
	// Go records the module version from git: a tag, or a pseudo-version
	// naming the commit (v0.0.0-TIME-REV); older Go records only
	// vcs.revision (dev+REV). Either way the commit is in it.
	if got := version("source build"); got == "idemgate dev "+runtime.Version()+"\n" || !strings.Contains(got, rev) || strings.Contains(got, "dirty") {
		t.Errorf("source build: idemgate version = %q, want the commit %s", got, rev)
	}
	if got, want := version("release build", "-ldflags", "-X main.version=v1.2.3"), "idemgate v1.2.3 "; !strings.HasPrefix(got, want) {
		t.Errorf("release build: idemgate version = %q, want prefix %q", got, want)
	}
	if err := os.WriteFile(filepath.Join(src, "README.md"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := version("changed tree"); !strings.Contains(got, rev) || !strings.Contains(got, "dirty") {
		t.Errorf("source build of a changed tree: idemgate version = %q, want the commit %s marked dirty", got, rev)
	}
}
