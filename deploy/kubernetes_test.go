package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// k8sDir holds the Kubernetes manifests.
var k8sDir = path("deploy", "kubernetes")

const (
	configMapName  = "idemgate-config"
	secretExample  = "secret.example.yaml"
	kustomization  = "kustomization.yaml"
	deploymentName = "idemgate"
	valkeyManifest = "valkey.yaml"
)

// k8sObj is one parsed manifest document and the file it came from.
type k8sObj struct {
	file string
	doc  map[string]any
}

// loadK8s parses every YAML document in deploy/kubernetes except the
// kustomization.
func loadK8s(t *testing.T) []k8sObj {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", k8sDir, err)
	}
	var out []k8sObj
	for _, f := range files {
		if filepath.Base(f) == kustomization {
			continue
		}
		for _, d := range readYAMLDocs(t, f) {
			out = append(out, k8sObj{file: filepath.Base(f), doc: d})
		}
	}
	return out
}

// k8sObject returns the object of kind and name, failing t when absent.
func k8sObject(t *testing.T, objs []k8sObj, kind, name string) map[string]any {
	t.Helper()
	for _, o := range objs {
		if o.doc["kind"] == kind && lookup(o.doc, "metadata.name") == name {
			return o.doc
		}
	}
	t.Fatalf("deploy/kubernetes: no %s %q", kind, name)
	return nil
}

// labelsMatch reports whether every selector label is in labels.
func labelsMatch(selector, labels any) bool {
	s, _ := selector.(map[string]any)
	l, _ := labels.(map[string]any)
	if len(s) == 0 {
		return false
	}
	for k, v := range s {
		if l[k] != v {
			return false
		}
	}
	return true
}

func TestKubernetes(t *testing.T) {
	objs := loadK8s(t)
	for _, o := range objs {
		if o.doc["apiVersion"] == nil || o.doc["kind"] == nil || lookup(o.doc, "metadata.name") == nil {
			t.Errorf("%s: document without apiVersion, kind or metadata.name", o.file)
		}
	}
	dep := k8sObject(t, objs, "Deployment", deploymentName)
	cfg := k8sConfig(t)
	listen := listenPort(t, cfg.where, cfg.loaded.Listen)
	admin := listenPort(t, cfg.where, cfg.loaded.Admin.Listen)

	if n := toInt(t, "replicas", lookup(dep, "spec.replicas")); n < 2 {
		t.Errorf("Deployment: replicas %d, want >= 2", n)
	}
	podLabels := lookup(dep, "spec.template.metadata.labels")
	if !labelsMatch(lookup(dep, "spec.selector.matchLabels"), podLabels) {
		t.Error("Deployment: selector does not match the pod template labels")
	}
	pod, _ := lookup(dep, "spec.template.spec").(map[string]any)
	if pod == nil {
		t.Fatal("Deployment: no pod spec")
	}
	if pod["topologySpreadConstraints"] == nil && lookup(pod, "affinity.podAntiAffinity") == nil {
		t.Error("Deployment: neither topologySpreadConstraints nor podAntiAffinity; replicas may share a node")
	}
	for i, c := range maps(t, "topologySpreadConstraints", pod["topologySpreadConstraints"]) {
		if !labelsMatch(lookup(c, "labelSelector.matchLabels"), podLabels) {
			t.Errorf("Deployment: topologySpreadConstraints[%d] selects other pods", i)
		}
	}
	if pod["automountServiceAccountToken"] != false {
		t.Error("Deployment: automountServiceAccountToken should be false; idemgate never talks to the API server")
	}

	containers := maps(t, "containers", pod["containers"])
	if len(containers) != 1 {
		t.Fatalf("Deployment: %d containers, want 1", len(containers))
	}
	c := containers[0]

	// Named container ports resolve to the config's listeners.
	ports := map[string]int{}
	for _, p := range maps(t, "ports", c["ports"]) {
		ports[fmt.Sprint(p["name"])] = toInt(t, "containerPort", p["containerPort"])
	}
	if ports["http"] != listen {
		t.Errorf("Deployment: container port http = %d, config listen port %d", ports["http"], listen)
	}
	if ports["admin"] != admin {
		t.Errorf("Deployment: container port admin = %d, config admin.listen port %d", ports["admin"], admin)
	}
	resolve := func(where string, v any) int {
		if s, ok := v.(string); ok {
			p, found := ports[s]
			if !found {
				t.Errorf("%s: port %q names no container port", where, s)
			}
			return p
		}
		return toInt(t, where, v)
	}

	// Probes: liveness /healthz, readiness /readyz, both on the admin port.
	for probe, want := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"} {
		p, _ := c[probe].(map[string]any)
		if p == nil {
			if probe != "startupProbe" {
				t.Errorf("Deployment: no %s", probe)
			}
			continue
		}
		if got := lookup(p, "httpGet.path"); got != want {
			t.Errorf("Deployment: %s path %v, want %s", probe, got, want)
		}
		if got := resolve(probe, lookup(p, "httpGet.port")); got != admin {
			t.Errorf("Deployment: %s port %d, want the admin port %d", probe, got, admin)
		}
	}

	// Prometheus scrapes the admin port's /metrics.
	ann, _ := lookup(dep, "spec.template.metadata.annotations").(map[string]any)
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != fmt.Sprint(admin) || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("Deployment: prometheus.io annotations %v, want scrape true, port %d, path /metrics", ann, admin)
	}

	// Resources.
	for _, k := range []string{"requests.cpu", "requests.memory", "limits.memory"} {
		if lookup(c, "resources."+k) == nil {
			t.Errorf("Deployment: resources.%s not set", k)
		}
	}

	// Hardening.
	sc, _ := c["securityContext"].(map[string]any)
	for k, want := range map[string]any{
		"readOnlyRootFilesystem": true, "runAsNonRoot": true, "runAsUser": 65532,
		"allowPrivilegeEscalation": false,
	} {
		if sc[k] != want {
			t.Errorf("Deployment: container securityContext.%s = %v, want %v", k, sc[k], want)
		}
	}
	if !slices.Contains(strs(t, "capabilities.drop", lookup(sc, "capabilities.drop")), "ALL") {
		t.Error("Deployment: capabilities.drop must contain ALL")
	}
	if lookup(pod, "securityContext.runAsNonRoot") != true {
		t.Error("Deployment: pod securityContext.runAsNonRoot must be true")
	}

	// The config is mounted from the ConfigMap where --config points.
	args := strs(t, "args", c["args"])
	configFile := ""
	for i, a := range args {
		if a == "--config" && i+1 < len(args) {
			configFile = args[i+1]
		}
	}
	if len(args) == 0 || args[0] != "serve" || configFile == "" {
		t.Errorf("Deployment: args %q, want serve --config FILE", args)
	}
	volumes := map[string]map[string]any{}
	for _, v := range maps(t, "volumes", pod["volumes"]) {
		volumes[fmt.Sprint(v["name"])] = v
	}
	mounted := false
	for _, m := range maps(t, "volumeMounts", c["volumeMounts"]) {
		v := volumes[fmt.Sprint(m["name"])]
		if v == nil || lookup(v, "configMap.name") != configMapName {
			continue
		}
		if m["readOnly"] != true {
			t.Error("Deployment: the config volume should be mounted readOnly")
		}
		file := filepath.Base(configFile)
		if sub, ok := m["subPath"].(string); ok {
			t.Errorf("Deployment: config mounted with subPath %s; subPath mounts never see ConfigMap updates, so reloads cannot happen", sub)
			continue
		}
		keyPath := file
		for _, it := range maps(t, "items", lookup(v, "configMap.items")) {
			if it["path"] == file {
				keyPath = fmt.Sprint(it["key"])
			}
		}
		if filepath.Join(fmt.Sprint(m["mountPath"]), file) == configFile && keyPath == "config.yaml" {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("Deployment: --config %s is not the ConfigMap %s key config.yaml", configFile, configMapName)
	}

	// Env: IDEMGATE_ names of real keys; secrets from the Secret example.
	secret := k8sObject(t, objs, "Secret", "idemgate-secrets")
	secretKeys := map[string]bool{}
	for _, section := range []string{"stringData", "data"} {
		if m, ok := secret[section].(map[string]any); ok {
			for k := range m {
				secretKeys[k] = true
			}
		}
	}
	secretEnv := map[string]bool{}
	for _, e := range maps(t, "env", c["env"]) {
		name := fmt.Sprint(e["name"])
		checkEnvName(t, "Deployment", cfg, name, envValue(cfg.env, name))
		if ref, ok := lookup(e, "valueFrom.secretKeyRef").(map[string]any); ok {
			secretEnv[name] = true
			if ref["name"] != lookup(secret, "metadata.name") || !secretKeys[fmt.Sprint(ref["key"])] {
				t.Errorf("Deployment: env %s refers to secret %v key %v, which %s does not define", name, ref["name"], ref["key"], secretExample)
			}
		}
	}
	for _, name := range []string{"IDEMGATE_STORE_VALKEY_PASSWORD", "IDEMGATE_ADMIN_TOKEN"} {
		if !secretEnv[name] {
			t.Errorf("Deployment: env %s must come from a secretKeyRef", name)
		}
	}
	for _, e := range maps(t, "envFrom", c["envFrom"]) {
		t.Errorf("Deployment: envFrom %v hides which variables reach idemgate; use env with names", e)
	}

	// Graceful drain: the grace period covers the preStop sleep and the
	// drain, which outlasts the longest upstream call, so a stopping pod
	// completes and records its calls.
	grace := time.Duration(toInt(t, "terminationGracePeriodSeconds", pod["terminationGracePeriodSeconds"])) * time.Second
	var preStop time.Duration
	if s := lookup(c, "lifecycle.preStop.sleep.seconds"); s != nil {
		preStop = time.Duration(toInt(t, "preStop.sleep.seconds", s)) * time.Second
	}
	if lookup(c, "lifecycle.preStop") != nil && lookup(c, "lifecycle.preStop.sleep") == nil {
		t.Error("Deployment: a preStop hook other than sleep; the grace period check cannot know how long it takes")
	}
	checkGrace(t, "Deployment terminationGracePeriodSeconds", grace, preStop, cfg.loaded)

	// Service: traffic port only; the admin port stays private.
	svc := k8sObject(t, objs, "Service", deploymentName)
	if !labelsMatch(lookup(svc, "spec.selector"), podLabels) {
		t.Error("Service: selector does not match the Deployment's pods")
	}
	if tpe, _ := lookup(svc, "spec.type").(string); tpe != "" && tpe != "ClusterIP" {
		t.Errorf("Service: type %s; expose idemgate through your ingress, not a node or cloud port", tpe)
	}
	traffic := false
	for _, p := range maps(t, "Service ports", lookup(svc, "spec.ports")) {
		target := p["targetPort"]
		if target == nil {
			target = p["port"]
		}
		switch resolve("Service targetPort", target) {
		case listen:
			traffic = true
		case admin:
			t.Errorf("Service: exposes the admin port %d (/admin/); scrape pods via annotations instead", admin)
		}
	}
	if !traffic {
		t.Errorf("Service: no port targets the proxy listener %d", listen)
	}

	// PodDisruptionBudget.
	pdb := k8sObject(t, objs, "PodDisruptionBudget", deploymentName)
	if toInt(t, "minAvailable", lookup(pdb, "spec.minAvailable")) != 1 {
		t.Errorf("PodDisruptionBudget: minAvailable %v, want 1", lookup(pdb, "spec.minAvailable"))
	}
	if !labelsMatch(lookup(pdb, "spec.selector.matchLabels"), podLabels) {
		t.Error("PodDisruptionBudget: selector does not match the Deployment's pods")
	}

	// NetworkPolicy, when present, selects the pods and names real ports.
	for _, o := range objs {
		if o.doc["kind"] != "NetworkPolicy" || o.file == valkeyManifest {
			continue
		}
		if !labelsMatch(lookup(o.doc, "spec.podSelector.matchLabels"), podLabels) {
			t.Errorf("%s: podSelector does not match the Deployment's pods", o.file)
		}
		for _, rule := range maps(t, "ingress", lookup(o.doc, "spec.ingress")) {
			for _, p := range maps(t, "ingress ports", rule["ports"]) {
				port := resolve("NetworkPolicy port", p["port"])
				if port == admin && rule["from"] == nil {
					t.Errorf("%s: admin port %d open to every source", o.file, admin)
				}
			}
		}
	}
}

// TestKubernetesSecretExample checks the example Secret is unmistakably a
// placeholder and is not deployed by kustomize.
func TestKubernetesSecretExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(k8sDir, secretExample))
	if err != nil {
		t.Fatalf("read %s: %v", secretExample, err)
	}
	if !strings.Contains(string(b), "EXAMPLE") || !strings.Contains(string(b), "PLACEHOLDER") {
		t.Errorf("%s must say EXAMPLE and PLACEHOLDER at the top", secretExample)
	}
	docs := readYAMLDocs(t, filepath.Join(k8sDir, secretExample))
	if len(docs) != 1 || docs[0]["kind"] != "Secret" {
		t.Fatalf("%s: want exactly one Secret", secretExample)
	}
	data, _ := docs[0]["stringData"].(map[string]any)
	if len(data) == 0 {
		t.Fatalf("%s: no stringData", secretExample)
	}
	for k, v := range data {
		if s, _ := v.(string); !strings.HasPrefix(s, "REPLACE-ME") {
			t.Errorf("%s: %s = %q is not a REPLACE-ME placeholder", secretExample, k, s)
		}
	}
}

// TestKustomization checks every manifest but the Secret example is a
// resource, and the image name matches the container's.
func TestKustomization(t *testing.T) {
	docs := readYAMLDocs(t, filepath.Join(k8sDir, kustomization))
	k := docs[0]
	if k["kind"] != "Kustomization" {
		t.Fatalf("%s: kind %v", kustomization, k["kind"])
	}
	resources := strs(t, "resources", k["resources"])
	for _, r := range resources {
		if _, err := os.Stat(filepath.Join(k8sDir, r)); err != nil {
			t.Errorf("%s: resource %s: %v", kustomization, r, err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	for _, f := range files {
		b := filepath.Base(f)
		switch {
		case b == kustomization:
		case b == secretExample:
			if slices.Contains(resources, b) {
				t.Errorf("%s lists %s; placeholder secrets must never be applied", kustomization, b)
			}
		case !slices.Contains(resources, b):
			t.Errorf("%s does not list %s", kustomization, b)
		}
	}
	dep := k8sObject(t, loadK8s(t), "Deployment", deploymentName)
	image := fmt.Sprint(maps(t, "containers", lookup(dep, "spec.template.spec.containers"))[0]["image"])
	name, _, _ := strings.Cut(image, ":")
	found := false
	for _, img := range maps(t, "images", k["images"]) {
		found = found || img["name"] == name
	}
	if !found {
		t.Errorf("%s: no images entry for %s, so the image cannot be set per environment", kustomization, name)
	}
	if _, err := os.Stat(filepath.Join(k8sDir, "README.md")); err != nil {
		t.Errorf("deploy/kubernetes/README.md: %v", err)
	}
}
