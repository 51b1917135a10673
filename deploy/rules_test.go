package deploy_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/needs"
	"go.yaml.in/yaml/v3"
)

var (
	rulesFile     = path("deploy", "prometheus", "idemgate-rules.yaml")
	rulesTestFile = path("deploy", "prometheus", "idemgate-rules_test.yaml")
	operationsDoc = path("docs", "operations.md")
	runbookBase   = "https://github.com/idemgate/idemgate/blob/main/docs/operations.md#"
)

// pendingMetrics are families the rules may use before idemgate exports
// them (another branch adding them), each documented in docs/operations.md;
// TestPrometheusScrapesIdemgate fails once one appears in /metrics, so it is
// then moved to idemgateMetrics (and the dashboard). None at the moment.
var pendingMetrics = map[string]metric{}

// needPromtool returns the path of promtool, failing the test with how to
// install it when it is missing.
func needPromtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		needs.Missing(t, "promtool", "promtool is required to check the alert rules: `apt-get install -y prometheus` "+
			"(Debian's package ships promtool; scripts/test.sh installs it when missing)")
	}
	return p
}

// promtool runs promtool with args in dir, bounded in time.
func promtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, needPromtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestPromtoolRules checks the rules with Prometheus' own tool: syntax and
// PromQL (check rules), and every alert firing and not firing on the
// synthetic series of idemgate-rules_test.yaml (test rules). The chart's
// copy is checked too.
func TestPromtoolRules(t *testing.T) {
	for _, f := range []string{rulesFile, chartRulesFile} {
		if out, err := promtool(t, ".", "check", "rules", f); err != nil {
			t.Errorf("promtool check rules %s: %v\n%s", f, err, out)
		}
	}
	out, err := promtool(t, filepath.Dir(rulesTestFile), "test", "rules", filepath.Base(rulesTestFile))
	if err != nil {
		t.Errorf("promtool test rules %s: %v\n%s", rulesTestFile, err, out)
	} else if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules printed no SUCCESS:\n%s", out)
	}
}

// alertRule is one alerting rule of the rules file.
type alertRule struct {
	Alert       string
	Expr        string
	For         string
	Labels      map[string]string
	Annotations map[string]string
}

// loadRules parses the rules file's alerts.
func loadRules(t *testing.T, file string) []alertRule {
	t.Helper()
	var doc struct {
		Groups []struct {
			Name  string
			Rules []alertRule
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yamlUnmarshalStrict(b, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var out []alertRule
	for _, g := range doc.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no rules", file)
	}
	return out
}

// anchor is GitHub's anchor for a Markdown heading text.
func anchor(heading string) string {
	h := strings.ToLower(strings.TrimSpace(heading))
	h = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// TestRules checks what promtool cannot: every alert's metrics, labels and
// label values are ones idemgate exports (the dashboard's list, plus the
// documented pending ones), it has a severity, a summary, a description and
// a runbook_url whose anchor is a runbook section of docs/operations.md
// (with meaning, impact, diagnosis and mitigation), and the unit tests show
// it both firing and silent.
func TestRules(t *testing.T) {
	rules := loadRules(t, rulesFile)
	doc, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatalf("read %s: %v", operationsDoc, err)
	}
	sections := map[string]string{}
	parts := regexp.MustCompile(`(?m)^### `).Split(string(doc), -1)
	for _, p := range parts[1:] {
		title, body, _ := strings.Cut(p, "\n")
		sections[anchor(title)] = body
	}
	tests, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var unit struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string
				ExpAlerts []any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		}
	}
	if err := yaml.Unmarshal(tests, &unit); err != nil {
		t.Fatalf("%s: %v", rulesTestFile, err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range unit.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}

	saved := idemgateMetrics
	idemgateMetrics = map[string]metric{}
	for k, v := range saved {
		idemgateMetrics[k] = v
	}
	for k, v := range pendingMetrics {
		idemgateMetrics[k] = v
	}
	defer func() { idemgateMetrics = saved }()

	seen := map[string]bool{}
	for _, r := range rules {
		where := "rule " + r.Alert
		if r.Alert == "" {
			t.Errorf("recording rule or unnamed alert with expr %q; the file holds alerts only", r.Expr)
			continue
		}
		if seen[r.Alert] {
			t.Errorf("%s: defined twice", where)
		}
		seen[r.Alert] = true
		if !strings.HasPrefix(r.Alert, "Idemgate") {
			t.Errorf("%s: alert names start with Idemgate", where)
		}
		if len(checkExpr(t, where, r.Expr)) == 0 {
			t.Errorf("%s: uses no idemgate metric", where)
		}
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q, want critical or warning", where, s)
		}
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if r.Annotations[k] == "" {
				t.Errorf("%s: no %s annotation", where, k)
			}
		}
		a, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookBase)
		if !ok || a != strings.ToLower(r.Alert) {
			t.Errorf("%s: runbook_url %q, want %s%s", where, r.Annotations["runbook_url"], runbookBase, strings.ToLower(r.Alert))
		}
		body, ok := sections[a]
		if !ok {
			t.Errorf("%s: docs/operations.md has no section ### %s", where, r.Alert)
		}
		for _, part := range []string{"**Meaning.**", "**Impact.**", "**Diagnosis.**", "**Mitigation.**"} {
			if ok && !strings.Contains(body, part) {
				t.Errorf("%s: its runbook lacks %s", where, part)
			}
		}
		if !strings.Contains(string(doc), "["+r.Alert+"](#"+a+")") {
			t.Errorf("%s: not in the alert table of docs/operations.md", where)
		}
		if !fires[r.Alert] || !silent[r.Alert] {
			t.Errorf("%s: %s must test it firing (%v) and silent (%v)", where, filepath.Base(rulesTestFile), fires[r.Alert], silent[r.Alert])
		}
	}
	for name := range pendingMetrics {
		if !strings.Contains(string(doc), name) {
			t.Errorf("docs/operations.md does not document the pending metric %s", name)
		}
	}
	for name := range fires {
		if !seen[name] {
			t.Errorf("%s tests %s, which the rules lack", rulesTestFile, name)
		}
	}
}

// TestRulesCheckRejects proves TestRules' expression check catches a
// misspelt metric and label in a rule.
func TestRulesCheckRejects(t *testing.T) {
	rec := &recorder{}
	checkExpr(rec, "bad", `sum by (job, pod_name) (rate(idemgate_lease_takeover_total[5m])) > 0 or idemgate_waiters{route="x"}`)
	for _, want := range []string{"unknown metric idemgate_lease_takeover_total", `no label "route"`, `groups by "pod_name"`} {
		if !rec.has(want) {
			t.Errorf("check did not report %s; got %q", want, rec.msgs)
		}
	}
}

// TestChartCopies checks the chart's copies of the rules and the dashboard
// are identical to the canonical files (Helm reads only files inside the
// chart directory).
func TestChartCopies(t *testing.T) {
	for canonical, cp := range map[string]string{
		rulesFile: chartRulesFile,
		path("deploy", "grafana", "idemgate-dashboard.json"): filepath.Join(chartDir, "files", "idemgate-dashboard.json"),
	} {
		a, err1 := os.ReadFile(canonical)
		b, err2 := os.ReadFile(cp)
		if err1 != nil || err2 != nil {
			t.Errorf("read %s, %s: %v %v", canonical, cp, err1, err2)
			continue
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: copy it (cp %s %s)", cp, canonical, canonical, cp)
		}
	}
}

// yamlUnmarshalStrict decodes one YAML document into v, refusing keys v
// has no field for.
func yamlUnmarshalStrict(b []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	return dec.Decode(v)
}
