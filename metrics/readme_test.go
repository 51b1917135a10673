package metrics_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/metrics"
)

// describing is a prometheus.Registerer that keeps the name of every
// family described to it, children or not.
type describing struct{ names map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			d.names[m[1]] = true
		}
	}
	return nil
}

func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (d *describing) Unregister(prometheus.Collector) bool { return false }

// TestEveryFamilyInReadme: every family metrics.New registers, including
// those with no series until their first event (which a scrape does not
// show, see e2e's TestMetricsTableMatchesRegistry), has a row in the
// metrics table of docs/operations.md.
func TestEveryFamilyInReadme(t *testing.T) {
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	d := &describing{names: map[string]bool{}}
	if _, err := metrics.New(d, "v1"); err != nil {
		t.Fatal(err)
	}
	if len(d.names) < 10 {
		t.Fatalf("only %d families described: %v", len(d.names), d.names)
	}
	for name := range d.names {
		if !regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(name) + "` \\|").Match(b) {
			t.Errorf("%s is registered but has no row in the metrics table of docs/operations.md", name)
		}
	}
}
