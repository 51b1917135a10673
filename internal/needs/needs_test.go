package needs_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/needs"
)

// ending records how Missing ends a test instead of ending this one.
type ending struct {
	testing.TB
	skipped, failed string
}

func (e *ending) Helper() {}

func (e *ending) Skipf(format string, args ...any) {
	e.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (e *ending) Fatal(args ...any) {
	e.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

// TestMissing: a missing program skips the test under -short, naming the
// program, and fails it otherwise, saying how to install it.
func TestMissing(t *testing.T) {
	e := &ending{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		needs.Missing(e, "frobnicator", "install the frobnicator")
	}()
	<-done
	if testing.Short() {
		if e.failed != "" || !strings.Contains(e.skipped, "needs frobnicator") || !strings.Contains(e.skipped, "install the frobnicator") {
			t.Fatalf("under -short: skipped %q, failed %q; want a skip naming the program and how to install it", e.skipped, e.failed)
		}
		return
	}
	if e.skipped != "" || e.failed != "install the frobnicator" {
		t.Fatalf("without -short: skipped %q, failed %q; want a failure saying how to install it", e.skipped, e.failed)
	}
}
