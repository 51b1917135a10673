package problem_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/problem"
)

// TestCatalogMatchesREADME keeps the catalog and docs/problems.md's "Problem
// types" tables one list: every kind has a row with its status, every row names a
// kind with that status. Before the catalog, the admin listener and the
// proxy each wrote their own titles and the two drifted.
func TestCatalogMatchesREADME(t *testing.T) {
	data, err := os.ReadFile("../docs/problems.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "\n## Problem types\n")
	if start < 0 {
		t.Fatal(`docs/problems.md has no "## Problem types" section`)
	}
	section := text[start+1:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\| (\\d{3}) \\|")
	documented := map[string]int{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		status, _ := strconv.Atoi(m[2])
		if old, ok := documented[m[1]]; ok && old != status {
			t.Errorf("docs/problems.md documents %s with statuses %d and %d", m[1], old, status)
		}
		documented[m[1]] = status
	}
	inCatalog := map[string]bool{}
	for _, k := range problem.Catalog() {
		if inCatalog[k.Slug] {
			t.Errorf("catalog lists %s twice", k.Slug)
		}
		inCatalog[k.Slug] = true
		if k.Title == "" {
			t.Errorf("%s has no title", k.Slug)
		}
		status, ok := documented[k.Slug]
		switch {
		case !ok:
			t.Errorf("%s (%d) has no row in docs/problems.md's problem tables", k.Slug, k.Status)
		case status != k.Status:
			t.Errorf("%s: docs/problems.md says %d, the catalog %d", k.Slug, status, k.Status)
		}
	}
	for slug := range documented {
		if !inCatalog[slug] {
			t.Errorf("docs/problems.md documents %s, which the catalog does not have", slug)
		}
	}
}

// TestKindWith checks that a problem carries its kind's type, status, title
// and outcome.
func TestKindWith(t *testing.T) {
	d := problem.StoreUnavailable.With("gone")
	if d.Type != problem.Base+"store-unavailable" || d.Status != 503 || d.Title != problem.StoreUnavailable.Title ||
		d.Detail != "gone" || d.Outcome != problem.StoreUnavailable.Outcome || d.Outcome == "" {
		t.Fatalf("got %+v", d)
	}
}
