package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/config"
)

// chartDir is the Helm chart.
var chartDir = path("deploy", "helm", "idemgate")

// chartRulesFile is the chart's copy of the alert rules.
var chartRulesFile = filepath.Join(chartDir, "files", "idemgate-rules.yaml")

// toolsDir is the Go module that pins Helm and kustomize.
var toolsDir = path("deploy", "tools")

var (
	toolsOnce sync.Once
	toolsBin  string
	toolsErr  error
)

// buildTool builds one program of the tools module (Helm as pinned by its
// go.mod `tool` line, or ./kustomize-build) into a directory shared by the
// test process, once per program.
func buildTool(t *testing.T, pkg, name string) string {
	t.Helper()
	toolsOnce.Do(func() {
		toolsBin, toolsErr = os.MkdirTemp("", "idemgate-deploy-tools-")
	})
	if toolsErr != nil {
		t.Fatal(toolsErr)
	}
	bin := filepath.Join(toolsBin, name)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Dir = toolsDir
	// The tools are built as their module pins them, never with the test's
	// -race or other flags.
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s in %s (needs the Go module proxy the first time): %v\n%s", pkg, toolsDir, err, out)
	}
	return bin
}

// TestMain removes the tools built for this test process.
func TestMain(m *testing.M) {
	code := m.Run()
	if toolsBin != "" {
		os.RemoveAll(toolsBin)
	}
	os.Exit(code)
}

// helmBin returns the pinned Helm binary.
func helmBin(t *testing.T) string {
	t.Helper()
	return buildTool(t, "helm.sh/helm/v3/cmd/helm", "helm")
}

// chartValues is one values.yaml given to helm template and lint.
type chartValues map[string]any

// writeValues writes v to a temporary values file.
func writeValues(t *testing.T, v chartValues) string {
	t.Helper()
	b, err := yaml.Marshal(map[string]any(v))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// runHelm runs helm with args, bounded in time.
func runHelm(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	bin := helmBin(t) // built first: the time limit is for Helm alone
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Helm keeps no state for template and lint; keep it off $HOME anyway.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

const (
	chartRelease   = "shop"
	chartNamespace = "payments"
	chartSecret    = "idemgate-secrets"
)

// renderChart runs helm template with values and parses the objects.
func renderChart(t *testing.T, v chartValues) []k8sObj {
	t.Helper()
	out, stderr, err := runHelm(t, "template", chartRelease, chartDir, "--namespace", chartNamespace, "-f", writeValues(t, v))
	if err != nil {
		t.Fatalf("helm template with %v: %v\n%s", v, err, stderr)
	}
	return parseObjects(t, "helm template", out)
}

// parseObjects parses a multi-document YAML stream of Kubernetes objects.
func parseObjects(t *testing.T, where, text string) []k8sObj {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(text))
	var out []k8sObj
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: parse output: %v\n%s", where, err, text)
		}
		if doc != nil {
			out = append(out, k8sObj{file: where, doc: doc})
		}
	}
	return out
}

// find returns the objects of kind.
func find(objs []k8sObj, kind string) []map[string]any {
	var out []map[string]any
	for _, o := range objs {
		if o.doc["kind"] == kind {
			out = append(out, o.doc)
		}
	}
	return out
}

// one returns the only object of kind, failing t otherwise.
func one(t *testing.T, objs []k8sObj, kind string) map[string]any {
	t.Helper()
	l := find(objs, kind)
	if len(l) != 1 {
		t.Fatalf("rendered chart: %d %s objects, want 1", len(l), kind)
	}
	return l[0]
}

// secretValue is what the test pretends the referenced Secret holds.
func secretValue(key string) string {
	if key == "postgres-dsn" {
		return "postgres://idemgate:test-secret@db.payments.svc:5432/idemgate?sslmode=require"
	}
	return "test-secret-" + key
}

// allOn turns every switch of the chart on.
func allOn() chartValues {
	return chartValues{
		"secrets":             map[string]any{"existingSecret": chartSecret},
		"valkey":              map[string]any{"enabled": true},
		"serviceMonitor":      map[string]any{"enabled": true, "additionalLabels": map[string]any{"release": "kube-prometheus-stack"}},
		"prometheusRule":      map[string]any{"enabled": true},
		"grafanaDashboard":    map[string]any{"enabled": true},
		"networkPolicy":       map[string]any{"enabled": true},
		"autoscaling":         map[string]any{"enabled": true},
		"podDisruptionBudget": map[string]any{"enabled": true},
		"serviceAccount":      map[string]any{"create": true},
	}
}

// allOff turns every switch of the chart off.
func allOff() chartValues {
	return chartValues{
		"valkey":              map[string]any{"enabled": false},
		"serviceMonitor":      map[string]any{"enabled": false},
		"prometheusRule":      map[string]any{"enabled": false},
		"grafanaDashboard":    map[string]any{"enabled": false},
		"networkPolicy":       map[string]any{"enabled": false},
		"autoscaling":         map[string]any{"enabled": false},
		"podDisruptionBudget": map[string]any{"enabled": false},
		"serviceAccount":      map[string]any{"create": false},
		"preStopSleepSeconds": 0,
		"resources":           map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "128Mi"}},
	}
}

// TestHelmChart lints and renders the chart with every switch on, every
// switch off and the defaults, and checks the rendered objects the way the
// plain manifests are checked: the ConfigMap's config.yaml through the real
// config.Load with the environment the pod gets, container ports and probes
// against the config's listeners, grace period against the drain, selectors
// against pod labels, Services, PDB, NetworkPolicy, HPA, ServiceMonitor,
// PrometheusRule (the rules file), the dashboard ConfigMap and the
// single-node Valkey.
func TestHelmChart(t *testing.T) {
	variants := []struct {
		name   string
		values chartValues
	}{
		{"defaults", chartValues{}},
		{"all switches on", allOn()},
		{"all switches off", allOff()},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			values := writeValues(t, v.values)
			if out, stderr, err := runHelm(t, "lint", "--strict", chartDir, "-f", values); err != nil {
				t.Errorf("helm lint --strict: %v\n%s%s", err, out, stderr)
			}
			objs := renderChart(t, v.values)
			checkChart(t, objs, v.values)
		})
	}
}

// enabled reports whether values turn switch (e.g. "valkey") on, else def.
func enabled(v chartValues, sw string, def bool) bool {
	m, _ := v[sw].(map[string]any)
	key := "enabled"
	if sw == "serviceAccount" {
		key = "create"
	}
	if b, ok := m[key].(bool); ok {
		return b
	}
	return def
}

// checkChart checks one rendering of the chart.
func checkChart(t *testing.T, objs []k8sObj, v chartValues) {
	t.Helper()
	names := map[string]bool{}
	for _, o := range objs {
		name, _ := lookup(o.doc, "metadata.name").(string)
		if o.doc["apiVersion"] == nil || o.doc["kind"] == nil || name == "" {
			t.Errorf("object without apiVersion, kind or metadata.name: %v", o.doc)
		}
		id := fmt.Sprint(o.doc["kind"], "/", name)
		if names[id] {
			t.Errorf("%s rendered twice", id)
		}
		names[id] = true
		if l, _ := lookup(o.doc, "metadata.labels").(map[string]any); l["app.kubernetes.io/instance"] != chartRelease {
			t.Errorf("%s: no app.kubernetes.io/instance label", id)
		}
	}
	want := map[string]bool{
		"HorizontalPodAutoscaler": enabled(v, "autoscaling", false),
		"PodDisruptionBudget":     enabled(v, "podDisruptionBudget", true),
		"NetworkPolicy":           enabled(v, "networkPolicy", false),
		"ServiceMonitor":          enabled(v, "serviceMonitor", false),
		"PrometheusRule":          enabled(v, "prometheusRule", false),
		"StatefulSet":             enabled(v, "valkey", false),
		"ServiceAccount":          enabled(v, "serviceAccount", true),
	}
	for kind, on := range want {
		if got := len(find(objs, kind)) > 0; got != on {
			t.Errorf("%s rendered = %v, want %v for values %v", kind, got, on, v)
		}
	}

	dep := one(t, objs, "Deployment")
	depName := lookup(dep, "metadata.name")
	podLabels := lookup(dep, "spec.template.metadata.labels")
	if !labelsMatch(lookup(dep, "spec.selector.matchLabels"), podLabels) {
		t.Error("Deployment: selector does not match the pod template labels")
	}
	pod, _ := lookup(dep, "spec.template.spec").(map[string]any)
	if pod["automountServiceAccountToken"] != false {
		t.Error("Deployment: automountServiceAccountToken should be false")
	}
	if pod["topologySpreadConstraints"] == nil {
		t.Error("Deployment: no topologySpreadConstraints")
	}
	for i, c := range maps(t, "topologySpreadConstraints", pod["topologySpreadConstraints"]) {
		if !labelsMatch(lookup(c, "labelSelector.matchLabels"), podLabels) {
			t.Errorf("Deployment: topologySpreadConstraints[%d] selects other pods", i)
		}
	}
	if hpas := find(objs, "HorizontalPodAutoscaler"); len(hpas) == 1 {
		h := hpas[0]
		if lookup(dep, "spec.replicas") != nil {
			t.Error("Deployment: replicas set although the HPA scales it (every upgrade would reset the scale)")
		}
		if lookup(h, "spec.scaleTargetRef.name") != depName || lookup(h, "spec.scaleTargetRef.kind") != "Deployment" {
			t.Errorf("HPA: scaleTargetRef %v, want Deployment %v", lookup(h, "spec.scaleTargetRef"), depName)
		}
		if toInt(t, "minReplicas", lookup(h, "spec.minReplicas")) < 2 {
			t.Error("HPA: minReplicas < 2")
		}
		m := maps(t, "HPA metrics", lookup(h, "spec.metrics"))
		if len(m) == 0 || lookup(m[0], "resource.name") != "cpu" {
			t.Errorf("HPA: metrics %v, want CPU", m)
		}
	} else if toInt(t, "replicas", lookup(dep, "spec.replicas")) < 2 {
		t.Error("Deployment: replicas < 2")
	}

	containers := maps(t, "containers", pod["containers"])
	if len(containers) != 1 {
		t.Fatalf("Deployment: %d containers, want 1", len(containers))
	}
	c := containers[0]

	// The config the pods run with: the ConfigMap's config.yaml, loaded by
	// config.Load with the env the container gets (secrets resolved).
	var cm map[string]any
	for _, o := range find(objs, "ConfigMap") {
		if _, ok := lookup(o, "data").(map[string]any)["config.yaml"]; ok {
			cm = o
		}
	}
	if cm == nil {
		t.Fatal("no ConfigMap with config.yaml")
	}
	raw := []byte(lookup(cm, "data").(map[string]any)["config.yaml"].(string))
	var env []string
	for _, e := range maps(t, "env", c["env"]) {
		name := fmt.Sprint(e["name"])
		switch {
		case e["value"] != nil:
			env = append(env, name+"="+fmt.Sprint(e["value"]))
		case lookup(e, "valueFrom.secretKeyRef") != nil:
			if lookup(e, "valueFrom.secretKeyRef.name") != chartSecret {
				t.Errorf("env %s: secret %v, want the existingSecret %s", name, lookup(e, "valueFrom.secretKeyRef.name"), chartSecret)
			}
			env = append(env, name+"="+secretValue(fmt.Sprint(lookup(e, "valueFrom.secretKeyRef.key"))))
		}
	}
	cc := newContainerConfig(t, "chart ConfigMap config.yaml", raw, env)
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		checkEnvName(t, "chart Deployment", cc, name, value)
	}
	checkChartConfig(t, cc)
	if s, _ := lookup(map[string]any(v), "secrets.existingSecret").(string); s != "" {
		for _, k := range []string{"admin.token", "store.valkey.password"} {
			if envValue(env, config.EnvName(k)) == "" {
				t.Errorf("existingSecret set, but %s is not wired", config.EnvName(k))
			}
		}
	}
	listen := listenPort(t, cc.where, cc.loaded.Listen)
	admin := listenPort(t, cc.where, cc.loaded.Admin.Listen)

	ports := map[string]int{}
	for _, p := range maps(t, "ports", c["ports"]) {
		ports[fmt.Sprint(p["name"])] = toInt(t, "containerPort", p["containerPort"])
	}
	if ports["http"] != listen || ports["admin"] != admin {
		t.Errorf("Deployment: container ports %v, config listen %d and admin %d", ports, listen, admin)
	}
	resolve := func(where string, p any) int {
		if s, ok := p.(string); ok {
			n, found := ports[s]
			if !found {
				t.Errorf("%s: port %q names no container port", where, s)
			}
			return n
		}
		return toInt(t, where, p)
	}
	for probe, want := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"} {
		p, _ := c[probe].(map[string]any)
		if p == nil {
			t.Errorf("Deployment: no %s", probe)
			continue
		}
		if lookup(p, "httpGet.path") != want || resolve(probe, lookup(p, "httpGet.port")) != admin {
			t.Errorf("Deployment: %s %v, want %s on the admin port %d", probe, p["httpGet"], want, admin)
		}
	}
	for _, k := range []string{"requests.cpu", "requests.memory"} {
		if lookup(c, "resources."+k) == nil {
			t.Errorf("Deployment: resources.%s not set (the HPA needs the CPU request)", k)
		}
	}
	if lookup(c, "securityContext.readOnlyRootFilesystem") != true || lookup(pod, "securityContext.runAsNonRoot") != true {
		t.Error("Deployment: want a read-only root file system and runAsNonRoot")
	}

	// Config mounted as a directory, --config inside it.
	args := strs(t, "args", c["args"])
	configFile := flagValue(args, "--config")
	mounted := false
	for _, m := range maps(t, "volumeMounts", c["volumeMounts"]) {
		for _, vol := range maps(t, "volumes", pod["volumes"]) {
			if vol["name"] != m["name"] || lookup(vol, "configMap.name") != lookup(cm, "metadata.name") {
				continue
			}
			if m["subPath"] != nil {
				t.Error("Deployment: config mounted with subPath; kubelet never updates subPath mounts, so reloads cannot happen")
			}
			if filepath.Join(fmt.Sprint(m["mountPath"]), "config.yaml") == configFile && lookup(vol, "configMap.items") == nil {
				mounted = true
			}
		}
	}
	if len(args) == 0 || args[0] != "serve" || !mounted {
		t.Errorf("Deployment: args %q: --config must be config.yaml in the ConfigMap mounted as a directory", args)
	}

	// Grace period covers preStop + drain.
	grace := time.Duration(toInt(t, "terminationGracePeriodSeconds", pod["terminationGracePeriodSeconds"])) * time.Second
	var preStop time.Duration
	if s := lookup(c, "lifecycle.preStop.sleep.seconds"); s != nil {
		preStop = time.Duration(toInt(t, "preStop", s)) * time.Second
	}
	if want := lookup(map[string]any(v), "preStopSleepSeconds"); want == 0 && c["lifecycle"] != nil {
		t.Error("Deployment: preStopSleepSeconds 0 still renders a preStop hook")
	}
	checkGrace(t, "chart terminationGracePeriodSeconds", grace, preStop, cc.loaded)

	// Pod annotations: the restart checksum, and prometheus.io/* unless a
	// ServiceMonitor scrapes.
	ann, _ := lookup(dep, "spec.template.metadata.annotations").(map[string]any)
	if ann["checksum/config-restart"] == nil {
		t.Error("Deployment: no checksum/config-restart annotation")
	}
	if sm := enabled(v, "serviceMonitor", false); sm == (ann["prometheus.io/scrape"] == "true") {
		t.Errorf("Deployment: prometheus.io/scrape %v with serviceMonitor.enabled %v; want exactly one way of scraping", ann["prometheus.io/scrape"], sm)
	} else if !sm && ann["prometheus.io/port"] != fmt.Sprint(admin) {
		t.Errorf("Deployment: prometheus.io/port %v, want the admin port %d", ann["prometheus.io/port"], admin)
	}

	// Services: the proxy Service carries traffic only; the metrics Service
	// (ServiceMonitor) the admin port only.
	var proxySvc, metricsSvc map[string]any
	for _, s := range find(objs, "Service") {
		if !labelsMatch(lookup(s, "spec.selector"), podLabels) {
			continue
		}
		if l, _ := lookup(s, "metadata.labels").(map[string]any); l["app.kubernetes.io/component"] == "metrics" {
			metricsSvc = s
		} else {
			proxySvc = s
		}
	}
	if proxySvc == nil {
		t.Fatal("no Service selects the proxy pods")
	}
	if tpe := lookup(proxySvc, "spec.type"); tpe != "ClusterIP" {
		t.Errorf("proxy Service: type %v", tpe)
	}
	for _, p := range maps(t, "Service ports", lookup(proxySvc, "spec.ports")) {
		if resolve("Service targetPort", p["targetPort"]) != listen {
			t.Errorf("proxy Service: port %v does not target the proxy listener %d", p, listen)
		}
	}
	if sms := find(objs, "ServiceMonitor"); len(sms) == 1 {
		sm := sms[0]
		if metricsSvc == nil {
			t.Fatal("ServiceMonitor without a metrics Service selecting the pods")
		}
		if !labelsMatch(lookup(sm, "spec.selector.matchLabels"), lookup(metricsSvc, "metadata.labels")) ||
			labelsMatch(lookup(sm, "spec.selector.matchLabels"), lookup(proxySvc, "metadata.labels")) {
			t.Error("ServiceMonitor: selector must match the metrics Service only")
		}
		mports := maps(t, "metrics ports", lookup(metricsSvc, "spec.ports"))
		if len(mports) != 1 || resolve("metrics targetPort", mports[0]["targetPort"]) != admin {
			t.Errorf("metrics Service: ports %v, want the admin port only", mports)
		}
		eps := maps(t, "endpoints", lookup(sm, "spec.endpoints"))
		if len(eps) != 1 || eps[0]["port"] != mports[0]["name"] || eps[0]["path"] != "/metrics" {
			t.Errorf("ServiceMonitor: endpoints %v, want port %v path /metrics", eps, mports[0]["name"])
		}
		if !slices.Contains(strs(t, "matchNames", lookup(sm, "spec.namespaceSelector.matchNames")), chartNamespace) {
			t.Error("ServiceMonitor: namespaceSelector misses the release namespace")
		}
		if lookup(sm, "metadata.labels").(map[string]any)["release"] != "kube-prometheus-stack" {
			t.Error("ServiceMonitor: additionalLabels not applied")
		}
	} else if metricsSvc != nil {
		t.Error("metrics Service rendered without a ServiceMonitor")
	}

	for _, pdb := range find(objs, "PodDisruptionBudget") {
		if !labelsMatch(lookup(pdb, "spec.selector.matchLabels"), podLabels) || toInt(t, "minAvailable", lookup(pdb, "spec.minAvailable")) < 1 {
			t.Error("PodDisruptionBudget: must select the proxy pods with minAvailable >= 1")
		}
	}
	for _, np := range find(objs, "NetworkPolicy") {
		sel := lookup(np, "spec.podSelector.matchLabels")
		if !labelsMatch(sel, podLabels) {
			continue // the Valkey one, checked below
		}
		for _, rule := range maps(t, "ingress", lookup(np, "spec.ingress")) {
			for _, p := range maps(t, "ports", rule["ports"]) {
				if resolve("NetworkPolicy port", p["port"]) == admin && len(maps(t, "from", rule["from"])) == 0 {
					t.Errorf("NetworkPolicy: admin port %d open to every source", admin)
				}
			}
		}
	}

	if prs := find(objs, "PrometheusRule"); len(prs) == 1 {
		var want map[string]any
		b, _ := os.ReadFile(rulesFile)
		if err := yaml.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(prs[0]["spec"], want) {
			t.Errorf("PrometheusRule: spec differs from %s", rulesFile)
		}
	}
	if grafanaOn := enabled(v, "grafanaDashboard", false); grafanaOn {
		found := false
		want, _ := os.ReadFile(path("deploy", "grafana", "idemgate-dashboard.json"))
		for _, o := range find(objs, "ConfigMap") {
			if s, ok := lookup(o, "data").(map[string]any)["idemgate-dashboard.json"].(string); ok {
				found = true
				var a, b any
				if json.Unmarshal([]byte(s), &a) != nil || json.Unmarshal(want, &b) != nil || !reflect.DeepEqual(a, b) {
					t.Error("dashboard ConfigMap: JSON differs from deploy/grafana/idemgate-dashboard.json")
				}
				if lookup(o, "metadata.labels").(map[string]any)["grafana_dashboard"] != "1" {
					t.Error("dashboard ConfigMap: no grafana_dashboard label for the sidecar")
				}
			}
		}
		if !found {
			t.Error("grafanaDashboard.enabled renders no dashboard ConfigMap")
		}
	}

	if enabled(v, "valkey", false) {
		checkChartValkey(t, objs, cc, podLabels)
	}
}

// checkChartConfig checks the loaded chart config as TestContainerConfigs
// checks the plain ones.
func checkChartConfig(t *testing.T, c containerConfig) {
	t.Helper()
	cfg := c.loaded
	if h := listenHost(t, c.where, cfg.Admin.Listen); h != "" && h != "0.0.0.0" && h != "::" {
		t.Errorf("%s: admin.listen %q is not reachable by probes", c.where, cfg.Admin.Listen)
	}
	if cfg.Store.Driver != config.DriverValkey {
		t.Errorf("%s: store.driver %q; replicas need the shared valkey store", c.where, cfg.Store.Driver)
	}
	for _, k := range []string{"store.valkey.password", "admin.token"} {
		if v, _ := lookup(c.cfg, k).(string); v != "" {
			t.Errorf("%s: %s is set in the ConfigMap; it belongs in the Secret", c.where, k)
		}
	}
	if want := envValue(c.env, config.EnvName("store.valkey.password")); cfg.Store.Valkey.Password != want {
		t.Errorf("%s: loaded valkey password %q, env gives %q", c.where, cfg.Store.Valkey.Password, want)
	}
	for _, r := range cfg.Policy.Routes() {
		if r.OnStoreError != "fail_closed" {
			t.Errorf("%s: route %s on_store_error %q", c.where, r.Name, r.OnStoreError)
		}
	}
}

// checkChartValkey checks the single-node Valkey: marked as not for
// production, AOF with fsync always and noeviction on a PVC, its Service
// selects it and not the proxies, the config points at that Service, and the
// password idemgate sends is the one Valkey requires.
func checkChartValkey(t *testing.T, objs []k8sObj, cc containerConfig, proxyLabels any) {
	t.Helper()
	sts := one(t, objs, "StatefulSet")
	if !strings.Contains(fmt.Sprint(lookup(sts, "metadata.annotations")), "not-for-production") {
		t.Error("Valkey StatefulSet: not annotated as not for production")
	}
	labels := lookup(sts, "spec.template.metadata.labels")
	if labelsMatch(lookup(one(t, objs, "Deployment"), "spec.selector.matchLabels"), labels) {
		t.Error("the Deployment's selector matches the Valkey pod")
	}
	c := maps(t, "valkey containers", lookup(sts, "spec.template.spec.containers"))[0]
	cmd := append(strs(t, "command", c["command"]), strs(t, "args", c["args"])...)
	for flag, want := range map[string]string{"--appendonly": "yes", "--appendfsync": "always", "--maxmemory-policy": "noeviction"} {
		if got := flagValue(cmd, flag); got != want {
			t.Errorf("Valkey: %s %q, want %q", flag, got, want)
		}
	}
	if pw := flagValue(cmd, "--requirepass"); pw != "" {
		want := ""
		for _, e := range maps(t, "valkey env", c["env"]) {
			if "$("+fmt.Sprint(e["name"])+")" == pw {
				want = secretValue(fmt.Sprint(lookup(e, "valueFrom.secretKeyRef.key")))
			}
		}
		if want == "" || want != cc.loaded.Store.Valkey.Password {
			t.Errorf("Valkey requires %q (%s), idemgate sends %q", want, pw, cc.loaded.Store.Valkey.Password)
		}
	}
	envs := map[string]string{}
	for _, e := range maps(t, "valkey env", c["env"]) {
		envs[fmt.Sprint(e["name"])] = secretValue(fmt.Sprint(lookup(e, "valueFrom.secretKeyRef.key")))
	}
	runValkeyCommand(t, cmd, envs, cc.loaded.Store.Valkey.Password)
	vct := maps(t, "volumeClaimTemplates", lookup(sts, "spec.volumeClaimTemplates"))
	if len(vct) != 1 {
		t.Fatal("Valkey: no volumeClaimTemplate")
	}
	dataMounted := false
	for _, m := range maps(t, "valkey mounts", c["volumeMounts"]) {
		dataMounted = dataMounted || (m["name"] == lookup(vct[0], "metadata.name") && m["mountPath"] == flagValue(cmd, "--dir"))
	}
	if !dataMounted {
		t.Error("Valkey: --dir is not the PVC's mount")
	}
	var svc map[string]any
	for _, s := range find(objs, "Service") {
		if lookup(s, "metadata.name") == lookup(sts, "spec.serviceName") {
			svc = s
		}
	}
	if svc == nil || !labelsMatch(lookup(svc, "spec.selector"), labels) || labelsMatch(lookup(svc, "spec.selector"), proxyLabels) {
		t.Fatal("Valkey: no Service (the StatefulSet's serviceName) selecting the Valkey pod only")
	}
	want := fmt.Sprintf("%s:%d", lookup(svc, "metadata.name"), toInt(t, "port", maps(t, "ports", lookup(svc, "spec.ports"))[0]["port"]))
	if !slices.Equal(cc.loaded.Store.Valkey.Addrs, []string{want}) {
		t.Errorf("config store.valkey.addrs %v, want the chart's Valkey %s", cc.loaded.Store.Valkey.Addrs, want)
	}
	for _, np := range find(objs, "NetworkPolicy") {
		if labelsMatch(lookup(np, "spec.podSelector.matchLabels"), labels) {
			for _, rule := range maps(t, "ingress", lookup(np, "spec.ingress")) {
				for _, f := range maps(t, "from", rule["from"]) {
					if !labelsMatch(lookup(f, "podSelector.matchLabels"), proxyLabels) {
						t.Errorf("Valkey NetworkPolicy: admits %v, not only the proxies", f)
					}
				}
			}
		}
	}
}

// TestHelmChartRestartChecksum checks that a policy change (defaults,
// routes) leaves the pod template alone, so it reaches the pods through the
// mounted ConfigMap and the hot reload, while a change of a key that needs
// a restart changes the checksum annotation and so rolls the pods.
func TestHelmChartRestartChecksum(t *testing.T) {
	pod := func(objs []k8sObj) map[string]any {
		return lookup(one(t, objs, "Deployment"), "spec.template").(map[string]any)
	}
	cmText := func(objs []k8sObj) string {
		for _, o := range find(objs, "ConfigMap") {
			if s, ok := lookup(o, "data").(map[string]any)["config.yaml"].(string); ok {
				return s
			}
		}
		return ""
	}
	base := renderChart(t, chartValues{})
	// Whole config value replaced: helm merges maps, so a changed policy is
	// given as the full defaults/routes.
	policyChange := chartValues{"config": map[string]any{
		"routes":   []any{map[string]any{"name": "create-order", "match": "POST /v1/orders", "required": true}, map[string]any{"name": "refunds", "match": "POST /v1/refunds"}},
		"defaults": map[string]any{"lease": "20s"},
	}}
	changed := renderChart(t, policyChange)
	if cmText(changed) == cmText(base) {
		t.Fatal("a routes/defaults change did not change the ConfigMap")
	}
	if !reflect.DeepEqual(pod(base), pod(changed)) {
		t.Error("a routes/defaults change changed the pod template: it would restart the pods instead of hot reloading")
	}
	for name, restart := range map[string]chartValues{
		"upstream.timeout": {"config": map[string]any{"upstream": map[string]any{"timeout": "20s"}}},
		"log.level":        {"config": map[string]any{"log": map[string]any{"level": "debug"}}},
		"store":            {"config": map[string]any{"store": map[string]any{"valkey": map[string]any{"key_prefix": "shop:"}}}},
		"valkey.enabled":   {"valkey": map[string]any{"enabled": true}},
	} {
		r := renderChart(t, restart)
		a := lookup(pod(base), "metadata.annotations").(map[string]any)["checksum/config-restart"]
		b := lookup(pod(r), "metadata.annotations").(map[string]any)["checksum/config-restart"]
		if a == b {
			t.Errorf("changing %s keeps checksum/config-restart %v: the pods would keep running the old value", name, a)
		}
	}
}

// TestHelmChartRefuses checks the chart refuses values that would break
// the deployment: a grace period that does not cover the drain, and a
// NetworkPolicy whose metrics peers are empty (open to all).
func TestHelmChartRefuses(t *testing.T) {
	for _, tc := range []struct {
		values chartValues
		want   string
	}{
		{chartValues{"terminationGracePeriodSeconds": 40}, "must exceed preStopSleepSeconds"},
		{chartValues{"config": map[string]any{"server": map[string]any{"shutdown_timeout": "1m"}}}, "must exceed preStopSleepSeconds"},
		{chartValues{"networkPolicy": map[string]any{"enabled": true, "metricsFrom": []any{}}}, "metricsFrom is empty"},
	} {
		_, stderr, err := runHelm(t, "template", chartRelease, chartDir, "-f", writeValues(t, tc.values))
		if err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("helm template with %v: err %v, stderr %q; want a refusal with %q", tc.values, err, stderr, tc.want)
		}
	}
}

// TestHelmChartPostgres checks the Postgres store: with driver postgres the
// DSN comes from the Secret (IDEMGATE_STORE_POSTGRES_DSN) and no Valkey
// password is wired, and config.Load runs the rendered config with it.
func TestHelmChartPostgres(t *testing.T) {
	objs := renderChart(t, chartValues{
		"secrets": map[string]any{"existingSecret": chartSecret},
		"config":  map[string]any{"store": map[string]any{"driver": "postgres"}},
	})
	c := maps(t, "containers", lookup(one(t, objs, "Deployment"), "spec.template.spec.containers"))[0]
	var env []string
	for _, e := range maps(t, "env", c["env"]) {
		if key := lookup(e, "valueFrom.secretKeyRef.key"); key != nil {
			env = append(env, fmt.Sprint(e["name"], "=", secretValue(fmt.Sprint(key))))
		}
	}
	if envValue(env, "IDEMGATE_STORE_POSTGRES_DSN") == "" || envValue(env, "IDEMGATE_STORE_VALKEY_PASSWORD") != "" {
		t.Errorf("env %v: want IDEMGATE_STORE_POSTGRES_DSN and no Valkey password with driver postgres", env)
	}
	var raw string
	for _, cm := range find(objs, "ConfigMap") {
		raw, _ = lookup(cm, "data").(map[string]any)["config.yaml"].(string)
	}
	cc := newContainerConfig(t, "chart ConfigMap (postgres)", []byte(raw), env)
	if cc.loaded.Store.Driver != config.DriverPostgres || cc.loaded.Store.Postgres.DSN != envValue(env, "IDEMGATE_STORE_POSTGRES_DSN") {
		t.Errorf("loaded store %q with DSN %q; want postgres with the Secret's DSN", cc.loaded.Store.Driver, cc.loaded.Store.Postgres.DSN)
	}
	// (checkEnvName loads with one variable at a time, which a postgres
	// config without its DSN cannot: the loaded values prove both names.)
	if cc.loaded.Admin.Token != envValue(env, "IDEMGATE_ADMIN_TOKEN") || cc.loaded.Admin.Token == "" {
		t.Errorf("loaded admin token %q, env gives %q", cc.loaded.Admin.Token, envValue(env, "IDEMGATE_ADMIN_TOKEN"))
	}
}
