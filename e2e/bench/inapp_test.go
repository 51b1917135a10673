package main

import (
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/needs"
)

// TestBenchInappSmoke runs the in-app comparison briefly: scenarios (a)
// and (c) and a 1 s throughput phase per shape and workload, on the
// pinned npm packages it installs (npm ci into the user's cache directory,
// as the bench does; the first run takes about half a minute more). It
// checks the bench itself, not the middlewares (their behaviour is what
// the bench reports): the handler's counter sees every execution of the
// bare handler, and idemgate in front of it runs a storm once, answers
// every duplicate with the result, refuses a different body with 422 and
// never runs a replay. node and npm are not installed here:
// scripts/install-node.sh does (scripts/test.sh runs it), and without them
// the test fails saying how.
func TestBenchInappSmoke(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		needs.Missing(t, "node", nodeInstallHint)
	}
	if _, err := exec.LookPath("npm"); err != nil {
		needs.Missing(t, "npm", nodeInstallHint)
	}
	o := options{
		duration: time.Second, rounds: 1, concurrency: 8, replayKeys: 50,
		workloads: []string{wInapp}, targets: "", logLevel: "info",
		inappStorm: 50, inappStorms: 1, inappKill: false, installNode: false,
	}
	rep := runBrief(t, o)
	if rep.inapp == nil || len(rep.inapp.rows) != 4 {
		t.Fatalf("in-app result %+v, want 4 shapes", rep.inapp)
	}
	for _, r := range rep.inapp.rows {
		name := r.shape.id
		if r.fresh == nil || r.replay == nil || r.fresh.s.requests == 0 || r.replay.s.requests == 0 {
			t.Fatalf("%s: no throughput measured", name)
		}
		if r.stormErrs != 0 || len(r.stormExecs) != o.inappStorms || slices.Contains(r.stormExecs, 0) || r.mismatchCode == 0 || r.mismatchExec < 1 {
			t.Errorf("%s: storms ran the handler %v times, statuses %v (%d transport errors), different body %s with %d executions", name, r.stormExecs, r.stormCodes, r.stormErrs, r.mismatch, r.mismatchExec)
		}
		switch name {
		case "bare":
			if r.stormExec() != o.inappStorms*o.inappStorm || r.mismatchExec != 2 || r.freshExecs != r.fresh.s.requests {
				t.Errorf("bare handler: storms ran it %d times of %d, different body ran it %d times of 2, fresh %d of %d: the counter misses executions",
					r.stormExec(), o.inappStorms*o.inappStorm, r.mismatchExec, r.freshExecs, r.fresh.s.requests)
			}
		case "idemgate":
			if r.stormExec() != o.inappStorms || r.stormCodes[http.StatusCreated] != o.inappStorms*o.inappStorm {
				t.Errorf("idemgate: storms ran the handler %v times, statuses %v; want once each, %d×201", r.stormExecs, r.stormCodes, o.inappStorms*o.inappStorm)
			}
			if r.mismatchCode != http.StatusUnprocessableEntity || r.mismatchExec != 1 {
				t.Errorf("idemgate: different body answered %s and the handler ran %d times; want 422, once", r.mismatch, r.mismatchExec)
			}
			if r.fresh.s.errors != 0 || r.replay.s.errors != 0 || r.replayExecs != 0 || r.replay.s.replayed != r.replay.s.requests {
				t.Errorf("idemgate: fresh %d errors (%s), replay %d errors (%s), %d of %d replays ran the handler, %d replayed",
					r.fresh.s.errors, r.fresh.s.firstErr, r.replay.s.errors, r.replay.s.firstErr, r.replayExecs, r.replay.s.requests, r.replay.s.replayed)
			}
		}
	}
	if md := rep.markdown(); !strings.Contains(md, "### Against in-app middleware") {
		t.Errorf("report without the in-app table:\n%s", md)
	}
}

// stormExec returns the executions of all storms together.
func (r *inappRow) stormExec() int {
	n := 0
	for _, e := range r.stormExecs {
		n += e
	}
	return n
}
