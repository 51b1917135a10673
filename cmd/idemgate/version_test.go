package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestResolveVersion(t *testing.T) {
	info := func(mainVersion string, settings ...string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/idemgate/idemgate", Version: mainVersion}}
			for i := 0; i+1 < len(settings); i += 2 {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
			}
			return bi, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, c := range []struct {
		name, stamped string
		read          func() (*debug.BuildInfo, bool)
		want          string
	}{
		{"ldflags win", "v1.4.0", info("v1.3.0", "vcs.revision", "abc"), "v1.4.0"},
		{"go install module@version", "dev", info("v1.3.0"), "v1.3.0"},
		{"pseudo-version", "dev", info("v0.0.0-20261202010000-cc9c922abcde"), "v0.0.0-20261202010000-cc9c922abcde"},
		{"source build, clean", "dev", info("(devel)", "vcs", "git", "vcs.revision", "cc9c922abcdef0123456789", "vcs.modified", "false"), "dev+cc9c922abcde"},
		{"source build, changed tree", "dev", info("(devel)", "vcs.revision", "cc9c922abcdef0123456789", "vcs.modified", "true"), "dev+cc9c922abcde.dirty"},
		{"short revision", "dev", info("", "vcs.revision", "abc"), "dev+abc"},
		{"no VCS information", "dev", info("(devel)"), "dev"},
		{"no build information", "dev", none, "dev"},
	} {
		if got := resolveVersion(c.stamped, c.read); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

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
