package problem

import (
	"os"
	"regexp"
	"testing"
)

// TestAdviceMatchesREADME: every kind a client of the proxy can get has
// advice, and it is the "what the client should do" cell of the problem
// table in docs/problems.md.
func TestAdviceMatchesREADME(t *testing.T) {
	data, err := os.ReadFile("../docs/problems.md")
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
			t.Errorf("%s: no row in docs/problems.md", k.Slug)
			continue
		}
		if got := string(row[1]); got != k.Advice() {
			t.Errorf("%s: advice %q, docs/problems.md says %q", k.Slug, k.Advice(), got)
		}
	}
}
