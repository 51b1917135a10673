package e2e

import (
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// readmeMetric is one row of the metrics table of docs/operations.md.
type readmeMetric struct {
	typ    string
	labels []string
}

// readmeMetrics parses the table of docs/operations.md's "### Metrics" section:
// | `name` | type | `label`, `label` | meaning |.
func readmeMetrics(t *testing.T) map[string]readmeMetric {
	t.Helper()
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n### Metrics\n")
	if !ok {
		t.Fatal(`docs/operations.md has no "### Metrics" section`)
	}
	section, _, _ = strings.Cut(section, "\n### ")
	row := regexp.MustCompile("^\\| `(idemgate_[a-z0-9_]+)` \\| ([a-z]+) \\|([^|]*)\\|")
	label := regexp.MustCompile("`([a-z_]+)`")
	out := map[string]readmeMetric{}
	for _, line := range strings.Split(section, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var labels []string
		for _, l := range label.FindAllStringSubmatch(m[3], -1) {
			labels = append(labels, l[1])
		}
		slices.Sort(labels)
		if _, dup := out[m[1]]; dup {
			t.Errorf("docs/operations.md's metrics table lists %s twice", m[1])
		}
		out[m[1]] = readmeMetric{typ: m[2], labels: labels}
	}
	if len(out) == 0 {
		t.Fatal("docs/operations.md's metrics table: no rows parsed")
	}
	return out
}

// scrapeFamilies reads the gate's /metrics: every idemgate_ family with
// its type and the label names its samples carry (le of histograms left
// out).
func scrapeFamilies(t *testing.T, g *Gate) map[string]readmeMetric {
	t.Helper()
	out := map[string]readmeMetric{}
	labelName := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
	for _, line := range metricLines(t, g) {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			if strings.HasPrefix(name, "idemgate_") {
				out[name] = readmeMetric{typ: typ}
			}
			continue
		}
		if !strings.HasPrefix(line, "idemgate_") {
			continue
		}
		series, _, _ := strings.Cut(line, " ")
		name, labels, _ := strings.Cut(series, "{")
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, cut := strings.CutSuffix(name, suf); cut {
				if f, ok := out[base]; ok && f.typ == "histogram" {
					name = base
				}
			}
		}
		f := out[name]
		for _, m := range labelName.FindAllStringSubmatch(labels, -1) {
			if m[1] != "le" && !slices.Contains(f.labels, m[1]) {
				f.labels = append(f.labels, m[1])
				slices.Sort(f.labels)
			}
		}
		out[name] = f
	}
	return out
}

// TestMetricsTableMatchesRegistry: the metrics table of docs/operations.md and what a real
// idemgate exports are the same list, both ways, with the same types and
// labels. The gate runs on a real Valkey with a replica and
// store.valkey.acks, so the acknowledgement metrics exist, and serves a
// keyed request, its replay and a passthrough, so every family that
// appears with its first observation does.
func TestMetricsTableMatchesRegistry(t *testing.T) {
	table := readmeMetrics(t)
	primary := valkeytest.Start(t)
	replica := valkeytest.Start(t, valkeytest.WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port())))
	var out string
	var err error
	if !gatetest.Until(15*time.Second, func() bool {
		out, err = replica.CLI("INFO", "replication")
		return err == nil && strings.Contains(out, "master_link_status:up")
	}) {
		t.Fatalf("the replica did not sync within 15s: %v %s", err, out)
	}
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{primary.Addr()},
		ValkeyExtra: "    acks: {replicas: 1, timeout: 1s}\n",
		Routes:      "  - name: orders\n    match: \"POST /v1/orders\"\n"})
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "k1", `{"n":1}`); a.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", a.Status, a.Body)
	}
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "k1", `{"n":1}`); a.Status != http.StatusCreated || !a.replayed() {
		t.Fatalf("retry: %d replayed=%v", a.Status, a.replayed())
	}
	resp, err := http.Get(g.URL + "/v1/orders")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	got := scrapeFamilies(t, g)
	for name, f := range got {
		row, ok := table[name]
		if !ok {
			t.Errorf("%s (%s) is exported but not in the metrics table of docs/operations.md", name, f.typ)
			continue
		}
		if row.typ != f.typ {
			t.Errorf("%s: docs/operations.md says %s, exported as %s", name, row.typ, f.typ)
		}
		if !slices.Equal(row.labels, f.labels) {
			t.Errorf("%s: docs/operations.md lists labels %v, exported with %v", name, row.labels, f.labels)
		}
	}
	for name := range table {
		if _, ok := got[name]; !ok {
			t.Errorf("the metrics table of docs/operations.md lists %s, which idemgate does not export", name)
		}
	}
}
