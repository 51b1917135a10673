//go:build !race

// The race detector's instrumentation changes what escapes, by one
// allocation either way between two equivalent calls, so allocation
// counts are compared without it.

package problem_test

import (
	"net/http/httptest"
	"testing"

	"github.com/idemgate/idemgate/problem"
)

// TestNoFormatAddsNoAllocations: without a problems.template the proxy's
// problem path (Publisher.WriteFormat with a nil Format) allocates no
// more than problem.Write, the RFC 9457 writer it always used.
func TestNoFormatAddsNoAllocations(t *testing.T) {
	d := problem.KeyReused.With("reused")
	w := httptest.NewRecorder()
	reset := func() { w.Body.Reset(); clear(w.Header()); w.Code = 0 }
	plain := testing.AllocsPerRun(200, func() { reset(); problem.Write(w, d) })
	viaFormat := testing.AllocsPerRun(200, func() { reset(); _ = problem.Publisher{}.WriteFormat(w, d, nil) })
	if viaFormat > plain {
		t.Errorf("WriteFormat(nil) allocates %v per answer, problem.Write %v", viaFormat, plain)
	}
}
