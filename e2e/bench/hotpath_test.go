package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/needs"
)

// TestHotPathSmoke profiles each hot path briefly and checks that every
// stage names a function of the binary (runHotPath fails otherwise), that
// the profile found idemgate's samples,
// and that "Hot path at a glance" lists every target, written at the top
// of a file and replaced in place on the next run.
func TestHotPathSmoke(t *testing.T) {
	if _, err := exec.LookPath("valkey-server"); err != nil {
		needs.Missing(t, "valkey-server", valkeyInstall)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	// 0.1: the profiler samples every 10 ms, and at 0.02 the passthrough
	// path (800 exchanges, about 50 ms of idemgate's CPU) gave a loaded
	// machine's profile no side=gate sample at all.
	o := options{workloads: []string{wHotPath}, targets: "D", hotPathScale: 0.1}
	rep := &report{opts: o, started: time.Now()}
	if err := runHotPath(ctx, o, root, rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.hotPath) != len(hotPathWorkloads) {
		t.Fatalf("%d hot path profiles, want %d", len(rep.hotPath), len(hotPathWorkloads))
	}
	for _, h := range rep.hotPath {
		if h.gate <= 0 || h.gate > h.total || h.allocs <= 0 {
			t.Errorf("%s: idemgate %v of %v samples, %d allocs per exchange", h.name, h.gate, h.total, h.allocs)
		}
	}
	md := rep.markdown()
	if !strings.Contains(md, "### Hot path profile") {
		t.Errorf("no hot path profile table in the report")
	}

	path := filepath.Join(t.TempDir(), "performance.md")
	if err := os.WriteFile(path, []byte("# title\n\nsummary line.\n\n## Run it\n\ntext\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := writeGlance(path, rep.glanceMarkdown()); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Count(s, glanceBegin) != 1 || !strings.HasPrefix(s, "# title\n\nsummary line.\n\n"+glanceBegin) || !strings.HasSuffix(s, glanceEnd+"\n\n## Run it\n\ntext\n") {
		t.Errorf("glance not written once after the summary:\n%s", s)
	}
	for _, target := range hotPathTargets {
		if !strings.Contains(s, "| "+target.what+" | "+target.bound+" |") {
			t.Errorf("glance lacks the target %q", target.what)
		}
	}
}
