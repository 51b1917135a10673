package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docFiles are the operator-facing Markdown files whose links are checked.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{path("README.md"), path("deploy", "helm", "idemgate", "README.md"), path("deploy", "kubernetes", "README.md")}
	more, err := filepath.Glob(path("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append(files, more...)
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	slugDrop  = regexp.MustCompile("[^a-z0-9 _-]")
)

// githubSlug is the anchor GitHub gives a heading: lowercased, punctuation
// (backquotes, dots, colons, commas) dropped, spaces as hyphens.
func githubSlug(heading string) string {
	s := slugDrop.ReplaceAllString(strings.ToLower(strings.TrimSpace(heading)), "")
	return strings.ReplaceAll(s, " ", "-")
}

func anchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range mdHeading.FindAllStringSubmatch(string(b), -1) {
		out[githubSlug(m[1])] = true
	}
	return out
}

// TestDocLinks: every relative link of README, the chart and Kubernetes
// READMEs and docs/ names a file that exists, and every #anchor a heading
// of its target, so a runbook that says where to look points somewhere.
func TestDocLinks(t *testing.T) {
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, file)
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			target, anchor, _ := strings.Cut(link, "#")
			targetFile := file
			if target != "" {
				targetFile = filepath.Join(filepath.Dir(file), target)
				if _, err := os.Stat(targetFile); err != nil {
					t.Errorf("%s: link %s: %v", rel, link, err)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(targetFile, ".md") && !anchors(t, targetFile)[anchor] {
				t.Errorf("%s: link %s: no heading with the anchor #%s", rel, link, anchor)
			}
		}
	}
}

// TestDocCrossReferences: what a new operator following README needs to
// find is said where they look: how to get the image (none is published)
// and helm, the chart's README, store.valkey.acks beside the Kubernetes
// durability advice, and the runbook's pointer to the Valkey ACL.
func TestDocCrossReferences(t *testing.T) {
	read := func(parts ...string) string {
		b, err := os.ReadFile(path(parts...))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	readme := read("README.md")
	_, deployment, _ := strings.Cut(readme, "### Deployment")
	for _, want := range []string{"No image is published", "docker build -t", "go tool helm", "(deploy/helm/idemgate/README.md)"} {
		if !strings.Contains(deployment, want) {
			t.Errorf(`README "Deployment" does not say %q`, want)
		}
	}
	_, durability, _ := strings.Cut(read("deploy", "kubernetes", "README.md"), "### Durability")
	if !strings.Contains(durability, "store.valkey.acks") {
		t.Error(`deploy/kubernetes/README.md "Durability" does not mention store.valkey.acks`)
	}
	// The runbook's ACL advice links to the section holding ACL SETUSER.
	ops := read("docs", "operations.md")
	i := strings.Index(ops, "fix the ACL")
	if i < 0 {
		t.Fatal(`docs/operations.md: no "fix the ACL"`)
	}
	m := mdLink.FindStringSubmatch(ops[i:min(len(ops), i+400)])
	if m == nil {
		t.Fatal(`docs/operations.md: "fix the ACL" links nowhere`)
	}
	target, anchor, _ := strings.Cut(m[1], "#")
	b, err := os.ReadFile(filepath.Join(path("docs"), target))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	sections := mdHeading.FindAllStringSubmatchIndex(string(b), -1)
	for j, h := range sections {
		if githubSlug(string(b[h[2]:h[3]])) != anchor {
			continue
		}
		end := len(b)
		if j+1 < len(sections) {
			end = sections[j+1][0]
		}
		found = strings.Contains(string(b[h[1]:end]), "ACL SETUSER")
	}
	if !found {
		t.Errorf("docs/operations.md: the ACL link %s does not lead to a section with ACL SETUSER", m[1])
	}
}
