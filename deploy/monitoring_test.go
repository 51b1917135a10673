package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// composeMounts maps a service's bind-mount targets to their sources
// (resolved against deploy/).
func composeMounts(t *testing.T, name string, s map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, v := range strs(t, name+" volumes", s["volumes"]) {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && strings.HasPrefix(parts[0], ".") {
			out[parts[1]] = filepath.Clean(filepath.Join(filepath.Dir(composeFile), parts[0]))
		}
	}
	return out
}

// TestComposeMonitoring checks the compose Prometheus and Grafana: the
// Prometheus config (checked by promtool) scrapes every idemgate replica on
// its admin port and loads the canonical rules file; Grafana provisions the
// Prometheus data source at that service and the canonical dashboard from
// the provider's path.
func TestComposeMonitoring(t *testing.T) {
	services := loadCompose(t)
	cc := composeConfig(t)
	prom, ok := services["prometheus"]
	if !ok {
		t.Fatal("compose: no prometheus service")
	}
	args := strs(t, "prometheus command", prom["command"])
	cfgTarget := flagValue(args, "--config.file")
	mounts := composeMounts(t, "prometheus", prom)
	cfgSource, ok := mounts[cfgTarget]
	if !ok {
		t.Fatalf("compose prometheus: --config.file %s is not a mounted file", cfgTarget)
	}
	docs := readYAMLDocs(t, cfgSource)
	pc := docs[0]
	rules := strs(t, "rule_files", pc["rule_files"])
	if len(rules) != 1 || filepath.Clean(mounts[rules[0]]) != filepath.Clean(rulesFile) {
		t.Errorf("compose prometheus: rule_files %v must be the mount of %s", rules, rulesFile)
	}
	admin := listenPort(t, cc.where, cc.loaded.Admin.Listen)
	var targets []string
	for _, sc := range maps(t, "scrape_configs", pc["scrape_configs"]) {
		for _, st := range maps(t, "static_configs", sc["static_configs"]) {
			targets = append(targets, strs(t, "targets", st["targets"])...)
		}
	}
	for _, r := range composeReplicas(services) {
		if want := r + ":" + strconv.Itoa(admin); !slices.Contains(targets, want) {
			t.Errorf("compose prometheus: does not scrape %s (targets %v)", want, targets)
		}
	}

	// promtool check config, with the rules at their path in this checkout.
	b, err := os.ReadFile(cfgSource)
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(rulesFile)
	local := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(local, []byte(strings.ReplaceAll(string(b), rules[0], abs)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := promtool(t, ".", "check", "config", local); err != nil {
		t.Errorf("promtool check config %s: %v\n%s", cfgSource, err, out)
	}

	// Grafana: provisioning directories, data source, dashboard.
	gf, ok := services["grafana"]
	if !ok {
		t.Fatal("compose: no grafana service")
	}
	gm := composeMounts(t, "grafana", gf)
	dsDir, dbDir := gm["/etc/grafana/provisioning/datasources"], gm["/etc/grafana/provisioning/dashboards"]
	if dsDir == "" || dbDir == "" {
		t.Fatalf("compose grafana: provisioning directories not mounted (%v)", gm)
	}
	ds := readYAMLDocs(t, filepath.Join(dsDir, "prometheus.yaml"))[0]
	sources := maps(t, "datasources", ds["datasources"])
	promPort := listenPort(t, "prometheus --web.listen-address", flagValue(args, "--web.listen-address"))
	if len(sources) != 1 || sources[0]["type"] != "prometheus" || sources[0]["isDefault"] != true ||
		sources[0]["url"] != fmt.Sprintf("http://prometheus:%d", promPort) {
		t.Errorf("grafana data sources %v: want the default prometheus at http://prometheus:%d", sources, promPort)
	}
	prov := readYAMLDocs(t, filepath.Join(dbDir, "idemgate.yaml"))[0]
	providers := maps(t, "providers", prov["providers"])
	if len(providers) != 1 || providers[0]["type"] != "file" {
		t.Fatalf("grafana dashboard providers %v: want one file provider", providers)
	}
	dashPath := fmt.Sprint(lookup(providers[0], "options.path"))
	found := false
	for target, source := range gm {
		if filepath.Dir(target) == dashPath && source == filepath.Clean(path("deploy", "grafana", "idemgate-dashboard.json")) {
			found = true
		}
	}
	if !found {
		t.Errorf("compose grafana: the dashboard is not mounted under the provider's path %s", dashPath)
	}
}
