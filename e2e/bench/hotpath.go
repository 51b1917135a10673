package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// wHotPath is the workload that profiles idemgate's own CPU per stage of a
// request: proxy's BenchmarkHotPath on Valkey under pprof, labelled so that
// idemgate's goroutines are told apart from the client's and the
// upstream's in one process (docs/performance.md, "Hot path budget").
const wHotPath = "hotpath"

// hotPathWorkloads are BenchmarkHotPath's paths on Valkey, in table order,
// with the exchanges each one runs under the profiler: enough samples
// (100 Hz) for a share to be good to about a point.
var hotPathWorkloads = []struct {
	name      string
	exchanges int
}{
	{"fresh", 30000},
	{"replay", 100000},
	{"passthrough", 40000},
}

// hotPathStage is one row of the profile table: a stage of a request and
// the functions whose cumulative time is that stage (the first one the
// profile holds counts; several names survive a rename).
type hotPathStage struct {
	name   string
	nested bool // part of the row above ("of it")
	funcs  []string
}

// hotPathStages are the rows of "Hot path budget", by function.
var hotPathStages = []hotPathStage{
	{name: "accept and parse (net/http readRequest)", funcs: []string{"net/http.(*conn).readRequest"}},
	{name: "decide (policy.Decide)", funcs: []string{"github.com/idemgate/idemgate/policy.(*Policy).Decide"}},
	{name: "key, owner and identity (Plan.fromHeader)", funcs: []string{"github.com/idemgate/idemgate/policy.(*Plan).fromHeader", "github.com/idemgate/idemgate/policy.(*Route).OwnerOf", "github.com/idemgate/idemgate/policy/identity.OwnerSource.Of"}},
	{name: "body read", funcs: []string{"github.com/idemgate/idemgate/proxy.(*Proxy).readBody"}},
	{name: "fingerprint", funcs: []string{"github.com/idemgate/idemgate/policy.(*Route).FingerprintOf", "github.com/idemgate/idemgate/policy/fingerprint.Spec.Of", "github.com/idemgate/idemgate/policy/fingerprint.Of"}},
	{name: "claim (store call included)", funcs: []string{"github.com/idemgate/idemgate/proxy.(*Proxy).claim"}},
	{name: "forward (complete included)", funcs: []string{"github.com/idemgate/idemgate/proxy.(*Proxy).forward"}},
	{name: "upstream round trip", nested: true, funcs: []string{"github.com/idemgate/idemgate/proxy.timedTransport.RoundTrip"}},
	{name: "record encoding", nested: true, funcs: []string{"github.com/idemgate/idemgate/store/internal/layout.EncodeResponseParts", "github.com/idemgate/idemgate/store.EncodeResponseParts"}},
	{name: "zstd", nested: true, funcs: []string{"github.com/klauspost/compress/zstd.(*Encoder).EncodeAll"}},
	{name: "complete", nested: true, funcs: []string{"github.com/idemgate/idemgate/proxy.(*Proxy).complete"}},
	{name: "valkey-go pipe goroutines", funcs: []string{"github.com/valkey-io/valkey-go.(*pipe)._background"}},
	{name: "passthrough ReverseProxy", funcs: []string{"net/http/httputil.(*ReverseProxy).ServeHTTP"}},
	{name: "stored response write", funcs: []string{"github.com/idemgate/idemgate/proxy.(*Proxy).writeStored"}},
	{name: "response flush (net/http finishRequest)", funcs: []string{"net/http.(*response).finishRequest"}},
	{name: "access log", funcs: []string{"github.com/idemgate/idemgate/proxy.(*Proxy).accessLog"}},
	{name: "malloc (all stages)", funcs: []string{"runtime.mallocgc"}},
	{name: "system calls (all stages)", funcs: []string{"internal/runtime/syscall/linux.Syscall6", "syscall.Syscall6"}},
}

// hotPathRun is one path's profile: idemgate's CPU per exchange and each
// stage's cumulative time.
type hotPathRun struct {
	name      string
	exchanges int
	gate      time.Duration            // samples labelled side=gate
	total     time.Duration            // every sample of the process
	stages    map[string]time.Duration // by function name
	allocs    int64                    // per exchange, client and upstream included
	nsPerOp   float64
}

// usPerReq is d per exchange, in µs.
func (h *hotPathRun) usPerReq(d time.Duration) float64 {
	return float64(d.Microseconds()) / float64(h.exchanges)
}

// stage is the cumulative time of the first of funcs the profile holds.
func (h *hotPathRun) stage(s hotPathStage) (time.Duration, bool) {
	for _, f := range s.funcs {
		if d, ok := h.stages[f]; ok {
			return d, true
		}
	}
	return 0, false
}

// top returns the n stages (not nested, not the all-stages rows) with the
// most time, as "name share %" strings: the profile line of a miss.
func (h *hotPathRun) top(n int) string {
	type kv struct {
		name string
		d    time.Duration
	}
	var all []kv
	for _, s := range hotPathStages {
		if strings.Contains(s.name, "all stages") {
			continue
		}
		if d, ok := h.stage(s); ok && d > 0 {
			all = append(all, kv{s.name, d})
		}
	}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			if all[j].d > all[i].d {
				all[i], all[j] = all[j], all[i]
			}
		}
	}
	var parts []string
	for i := 0; i < len(all) && i < n; i++ {
		parts = append(parts, fmt.Sprintf("%s %.0f %%", all[i].name, 100*float64(all[i].d)/float64(h.gate)))
	}
	sys, _ := h.stage(hotPathStages[len(hotPathStages)-1])
	return fmt.Sprintf("idemgate %.0f µs per request: %s; system calls %.0f %% of it", h.usPerReq(h.gate), strings.Join(parts, ", "), 100*float64(sys)/float64(h.gate))
}

// runHotPath builds proxy's test binary and profiles each hot path on
// Valkey with it (BenchmarkHotPath starts its own valkey-server).
func runHotPath(ctx context.Context, o options, root string, rep *report) error {
	dir, err := os.MkdirTemp("", "idemgate-hotpath-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "proxy.test")
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, "./proxy/")
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hotpath: go test -c ./proxy/: %w", err)
	}
	syms, err := exec.CommandContext(ctx, "go", "tool", "nm", bin).Output()
	if err != nil {
		return fmt.Errorf("hotpath: go tool nm: %w", err)
	}
	if err := checkStages(string(syms)); err != nil {
		return err
	}
	for _, w := range hotPathWorkloads {
		w.exchanges = max(10, int(float64(w.exchanges)*o.hotPathScale))
		fmt.Fprintf(os.Stderr, "hotpath %s: %d exchanges under pprof ...\n", w.name, w.exchanges)
		prof := filepath.Join(dir, "cpu-"+w.name+".out")
		out, err := exec.CommandContext(ctx, bin, "-test.run", "^$", "-test.bench", "BenchmarkHotPath/valkey/"+w.name+"$",
			"-test.benchtime", strconv.Itoa(w.exchanges)+"x", "-test.benchmem", "-test.cpuprofile", prof).CombinedOutput()
		if err != nil {
			return fmt.Errorf("hotpath %s: %w\n%s", w.name, err, out)
		}
		h := &hotPathRun{name: w.name, exchanges: w.exchanges, stages: map[string]time.Duration{}}
		if err := h.parseBench(string(out)); err != nil {
			return fmt.Errorf("hotpath %s: %w", w.name, err)
		}
		tags, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-tags", bin, prof).CombinedOutput()
		if err != nil {
			return fmt.Errorf("hotpath %s: pprof -tags: %w\n%s", w.name, err, tags)
		}
		if h.gate, h.total, err = parseTags(string(tags)); err != nil {
			return fmt.Errorf("hotpath %s: %w", w.name, err)
		}
		top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-tagfocus", "side=gate", "-top", "-cum", "-nodecount", "100000", bin, prof).CombinedOutput()
		if err != nil {
			return fmt.Errorf("hotpath %s: pprof -top: %w\n%s", w.name, err, top)
		}
		parseTop(string(top), h.stages)
		rep.hotPath = append(rep.hotPath, h)
		fmt.Fprintf(os.Stderr, "hotpath %s: idemgate %.0f µs per exchange, %d allocs per exchange\n", w.name, h.usPerReq(h.gate), h.allocs)
	}
	return nil
}

// checkStages fails when a stage names no function of the test binary
// (syms: `go tool nm` output): a rename would otherwise leave its row
// empty without a word.
func checkStages(syms string) error {
	have := map[string]bool{}
	for _, line := range strings.Split(syms, "\n") {
		if f := strings.Fields(line); len(f) >= 3 {
			have[strings.Join(f[2:], " ")] = true
		}
	}
	var missing []string
	for _, s := range hotPathStages {
		found := false
		for _, f := range s.funcs {
			found = found || have[f]
		}
		if !found {
			missing = append(missing, fmt.Sprintf("%q (%s)", s.name, strings.Join(s.funcs, ", ")))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("hotpath: no function of these stages is in proxy's test binary; renamed? update hotPathStages in e2e/bench/hotpath.go: %s", strings.Join(missing, "; "))
	}
	return nil
}

var benchLine = regexp.MustCompile(`(?m)^BenchmarkHotPath/\S+\s+\d+\s+([\d.]+) ns/op.*?\s(\d+) allocs/op`)

func (h *hotPathRun) parseBench(out string) error {
	m := benchLine.FindStringSubmatch(out)
	if m == nil {
		return fmt.Errorf("no benchmark line in:\n%s", out)
	}
	h.nsPerOp, _ = strconv.ParseFloat(m[1], 64)
	h.allocs, _ = strconv.ParseInt(m[2], 10, 64)
	return nil
}

// parseTags reads `pprof -tags`: the side=gate samples and the profile's
// total ("side: Total 1.69s of 2.41s").
func parseTags(out string) (gate, total time.Duration, err error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && f[0] == "side:" && f[1] == "Total" {
			if total, err = time.ParseDuration(f[4]); err != nil {
				return 0, 0, fmt.Errorf("pprof -tags total %q: %w", line, err)
			}
		}
		if len(f) == 3 && f[2] == "gate" {
			if gate, err = time.ParseDuration(f[0]); err != nil {
				return 0, 0, fmt.Errorf("pprof -tags gate %q: %w", line, err)
			}
		}
	}
	if gate == 0 {
		return 0, 0, fmt.Errorf("no side=gate samples in pprof -tags:\n%s", out)
	}
	return gate, total, nil
}

// parseTop reads `pprof -top -cum` rows ("flat flat% sum% cum cum% name")
// into cumulative time by function name.
func parseTop(out string, into map[string]time.Duration) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasSuffix(f[4], "%") {
			continue
		}
		d, err := time.ParseDuration(f[3])
		if err != nil {
			continue
		}
		name := strings.Join(f[5:], " ")
		name = strings.TrimSuffix(name, " (inline)")
		if _, seen := into[name]; !seen {
			into[name] = d
		}
	}
}

// hotPathMarkdown is the profile table of this run: each stage's CPU per
// request and its share of idemgate's CPU, per path.
func (r *report) hotPathMarkdown(p func(string, ...any)) {
	if len(r.hotPath) == 0 {
		return
	}
	p("### Hot path profile\n\n")
	p("Where idemgate's own CPU goes per request, by stage: proxy's `BenchmarkHotPath/valkey/<path>` (one exchange after the other over loopback, a throwaway valkey-server, the replay cache, metrics and the JSON access log on) under pprof at 100 Hz, counting only the samples labelled `side=gate` (idemgate's connections and the goroutines they start, valkey-go's included). A stage is the cumulative time of its function, so stages overlap (forward includes complete and record encoding; nested rows are part of the row above). µs are CPU per request on this machine during this run; allocations are per whole exchange (client and upstream in the same process included; `TestHotPathAllocationCeilings` holds them).\n\n")
	p("| stage |")
	for _, h := range r.hotPath {
		p(" %s µs | %s %% |", h.name, h.name)
	}
	p("\n|---|")
	for range r.hotPath {
		p("---:|---:|")
	}
	p("\n| **idemgate in all** |")
	for _, h := range r.hotPath {
		p(" **%.1f** | 100 |", h.usPerReq(h.gate))
	}
	p("\n")
	for _, s := range hotPathStages {
		name := s.name
		if s.nested {
			name = "… of it " + name
		}
		p("| %s |", name)
		for _, h := range r.hotPath {
			if d, ok := h.stage(s); ok && d > 0 {
				p(" %.1f | %.1f |", h.usPerReq(d), 100*float64(d)/float64(h.gate))
			} else {
				p(" – | – |")
			}
		}
		p("\n")
	}
	p("| allocations per exchange |")
	for _, h := range r.hotPath {
		p(" %d | |", h.allocs)
	}
	p("\n\n")
}

// hotPathFor returns this run's profile of path, nil when not run.
func (r *report) hotPathFor(path string) *hotPathRun {
	for _, h := range r.hotPath {
		if h.name == path {
			return h
		}
	}
	return nil
}
