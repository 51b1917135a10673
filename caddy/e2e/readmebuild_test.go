package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeCaddyBuild runs README's way to build Caddy with the module
// (section "Inside Caddy": cd caddy && go build …) in a copy of this
// checkout's files in a temporary directory, with nothing looked up
// (GOPROXY=off: github.com/idemgate/idemgate is not on the module proxy,
// which is what made xcaddy fail), and checks that the binary lists the
// module.
func TestReadmeCaddyBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds Caddy once more")
	}
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "\n## Inside Caddy\n")
	section, _, _ = strings.Cut(section, "\n## ")
	var line string
	for _, part := range strings.Split(section, "```sh\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		if strings.HasPrefix(block, "cd caddy && go build") {
			line = strings.TrimSpace(block)
		}
	}
	if line == "" {
		t.Fatal(`README.md: no "cd caddy && go build" block in "Inside Caddy"`)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	copyDir := t.TempDir()
	for _, f := range bytes.Split(bytes.TrimRight(files, "\x00"), []byte{0}) {
		src, dst := filepath.Join(root, string(f)), filepath.Join(copyDir, string(f))
		data, err := os.ReadFile(src)
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = copyDir
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	out, err := exec.Command(filepath.Join(copyDir, "caddy", "caddy"), "list-modules").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "http.handlers.idempotency") {
		t.Fatalf("caddy list-modules: %v\n%s", err, out)
	}
}
