package deploy_test

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// trackerRef matches a tracker reference by number ("issue" or "issues",
// any case, then a number, with or without #): a reader of the repository
// cannot open the tracker, so a comment or string must name the behaviour,
// the test or a docs/ section instead. Links such as go.dev/issue/NNN are
// not matched: they open.
var trackerRef = regexp.MustCompile(`(?i)\bissues?\s+#?[0-9]`)

// TestNoTrackerReferencesInGo: no Go file of the repository, in any module,
// test or tool, refers to a tracker issue by its number.
func TestNoTrackerReferencesInGo(t *testing.T) {
	walkGo(t, func(rel, p string) error {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for line := 1; sc.Scan(); line++ {
			if m := trackerRef.FindString(sc.Text()); m != "" {
				t.Errorf("%s:%d: %q refers to a tracker issue by number; name the behaviour, the test or a docs/ section instead", rel, line, strings.TrimSpace(sc.Text()))
			}
		}
		return sc.Err()
	})
}

// initAllowed are the files whose init functions are required by another
// project's registration model: Caddy discovers modules only through
// caddy.RegisterModule in init (caddyserver.com/docs/extending-caddy).
var initAllowed = map[string]bool{"caddy/idempotency.go": true}

// TestNoInitSideEffects: dependencies are injected, so no package of the
// repository (tests aside) does work in an init function, except where
// another project's plugin model demands it (initAllowed).
func TestNoInitSideEffects(t *testing.T) {
	walkGo(t, func(rel, p string) error {
		if strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "init" && !initAllowed[filepath.ToSlash(rel)] {
				t.Errorf("%s: func init: inject the dependency or resolve the value where it is used instead", rel)
			}
		}
		return nil
	})
}

// maxFileLines bounds a non-test Go file, in lines: past it a file holds
// more than one concern, and a reader has to scroll to find which; split it
// by concern, moving whole functions.
const maxFileLines = 700

// TestNoLongFiles: no non-test Go file of the repository, in any module,
// is longer than maxFileLines.
func TestNoLongFiles(t *testing.T) {
	walkGo(t, func(rel, p string) error {
		if strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if n := bytes.Count(b, []byte("\n")); n > maxFileLines {
			t.Errorf("%s: %d lines, more than %d: split it by concern into files of its package", rel, n, maxFileLines)
		}
		return nil
	})
}

// TestNoTrackedBinaries: no file git tracks is a compiled program. A
// `go build` in a command's directory writes its binary next to the
// sources, and a tracked one makes every clone carry tens of megabytes that
// go stale with the first commit after it.
func TestNoTrackedBinaries(t *testing.T) {
	out, err := exec.Command("git", "-C", repoRoot, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout (git ls-files: %v): nothing is tracked", err)
	}
	for _, rel := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		f, err := os.Open(filepath.Join(repoRoot, rel))
		if err != nil {
			continue // deleted in the work tree
		}
		head := make([]byte, 4)
		n, _ := f.Read(head)
		f.Close()
		if bytes.Equal(head[:n], []byte("\x7fELF")) {
			t.Errorf("%s is tracked and is an ELF binary: remove it (git rm --cached) and list it in .gitignore", rel)
		}
	}
}

// walkGo calls check with the path relative to the repository root and
// the path of every Go file of the repository, in any module, test or
// tool (testdata and node_modules aside), and fails the test on an error
// or when it saw too few files to have walked the whole repository.
func walkGo(t *testing.T, check func(rel, path string) error) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		files++
		rel, _ := filepath.Rel(repoRoot, p)
		return check(rel, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("walked %d Go files under %s, want the whole repository", files, repoRoot)
	}
}
