package problem

import (
	"os"
	"regexp"
	"testing"
)

// TestAdviceMatchesREADME: every kind a client of the proxy can get has
// advice, and it is the README table's "what the client should do" cell.
func TestAdviceMatchesREADME(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Catalog() {
		if k.Outcome == "" {
			if k.Advice() != "" {
				t.Errorf("admin kind %s has advice", k.Slug)
			}
			continue
		}
		row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(k.Slug) + "` \\| \\d+ \\| .* \\| ([^|]+) \\|$").FindSubmatch(data)
		if row == nil {
			t.Errorf("%s: no README row", k.Slug)
			continue
		}
		if got := string(row[1]); got != k.Advice() {
			t.Errorf("%s: advice %q, README says %q", k.Slug, k.Advice(), got)
		}
	}
}
