package deploy_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/syncbuf"
)

// TestKustomizeBuild renders deploy/kubernetes with the pinned
// sigs.k8s.io/kustomize/api (the library `kubectl apply -k` uses): it must
// build without error, hold every object of the listed files (the Secret
// example excepted), and set the Deployment's image from `images:`.
func TestKustomizeBuild(t *testing.T) {
	bin := buildTool(t, "./kustomize-build", "kustomize-build")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, k8sDir)
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("kustomize build %s: %v\n%s", k8sDir, err, stderr)
	}
	built := parseObjects(t, "kustomize build", string(out))
	id := func(doc map[string]any) string {
		return fmt.Sprint(doc["kind"], "/", lookup(doc, "metadata.name"))
	}
	var got []string
	for _, o := range built {
		got = append(got, id(o.doc))
	}
	var want []string
	for _, o := range loadK8s(t) {
		if o.file != secretExample {
			want = append(want, id(o.doc))
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("kustomize build gives %v, the manifests hold %v", got, want)
	}
	for _, must := range []string{"Deployment/idemgate", "StatefulSet/valkey", "Service/valkey", "ConfigMap/idemgate-config"} {
		if !slices.Contains(got, must) {
			t.Errorf("kustomize build lacks %s", must)
		}
	}
	k := readYAMLDocs(t, filepath.Join(k8sDir, kustomization))[0]
	img := maps(t, "images", k["images"])[0]
	for _, o := range built {
		if o.doc["kind"] != "Deployment" {
			continue
		}
		c := maps(t, "containers", lookup(o.doc, "spec.template.spec.containers"))[0]
		if want := fmt.Sprint(img["newName"], ":", img["newTag"]); c["image"] != want {
			t.Errorf("built Deployment image %v, kustomization images: gives %s", c["image"], want)
		}
	}
}

// TestKubernetesValkey checks the try-it-out Valkey of the plain manifests:
// marked as such, AOF with fsync always and noeviction on a PVC, the
// password idemgate sends, the Service idemgate's config names; and runs
// its command line on a real valkey-server.
func TestKubernetesValkey(t *testing.T) {
	objs := loadK8s(t)
	b, err := os.ReadFile(filepath.Join(k8sDir, valkeyManifest))
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"FOR TRYING IT OUT ONLY", "NOT FOR PRODUCTION", "Sentinel", "Cluster", "appendfsync always", "noeviction", "docs/durability.md"} {
		if !strings.Contains(string(b), must) {
			t.Errorf("%s: the header must say %q", valkeyManifest, must)
		}
	}
	sts := k8sObject(t, objs, "StatefulSet", "valkey")
	svc := k8sObject(t, objs, "Service", lookup(sts, "spec.serviceName").(string))
	labels := lookup(sts, "spec.template.metadata.labels")
	if !labelsMatch(lookup(svc, "spec.selector"), labels) {
		t.Error("Service valkey does not select the Valkey pod")
	}
	dep := k8sObject(t, objs, "Deployment", deploymentName)
	if labelsMatch(lookup(dep, "spec.selector.matchLabels"), labels) || labelsMatch(lookup(sts, "spec.selector.matchLabels"), lookup(dep, "spec.template.metadata.labels")) {
		t.Error("the idemgate and Valkey selectors overlap")
	}
	cfg := k8sConfig(t)
	port := toInt(t, "port", maps(t, "ports", lookup(svc, "spec.ports"))[0]["port"])
	if want := net.JoinHostPort(fmt.Sprint(lookup(svc, "metadata.name")), strconv.Itoa(port)); !slices.Equal(cfg.loaded.Store.Valkey.Addrs, []string{want}) {
		t.Errorf("configmap store.valkey.addrs %v, the try-it-out Valkey is %s", cfg.loaded.Store.Valkey.Addrs, want)
	}
	if len(maps(t, "volumeClaimTemplates", lookup(sts, "spec.volumeClaimTemplates"))) != 1 {
		t.Error("Valkey: no volumeClaimTemplate; AOF on the container's disk dies with the pod")
	}
	c := maps(t, "containers", lookup(sts, "spec.template.spec.containers"))[0]
	secret := k8sObject(t, objs, "Secret", "idemgate-secrets")
	envs := map[string]string{}
	for _, e := range maps(t, "env", c["env"]) {
		if lookup(e, "valueFrom.secretKeyRef.name") != lookup(secret, "metadata.name") {
			t.Errorf("Valkey env %v: not from idemgate-secrets", e["name"])
		}
		key := fmt.Sprint(lookup(e, "valueFrom.secretKeyRef.key"))
		envs[fmt.Sprint(e["name"])] = fmt.Sprint(lookup(secret, "stringData").(map[string]any)[key])
	}
	args := strs(t, "command", c["command"])
	runValkeyCommand(t, args, envs, cfg.loaded.Store.Valkey.Password)
}

// runValkeyCommand runs a manifest's valkey-server command line (with its
// $(VAR) references expanded from env, as the kubelet does) on a free
// loopback port, and checks the running server: AOF on with fsync always,
// noeviction, and AUTH with password (what idemgate sends) works while no
// password is refused.
func runValkeyCommand(t *testing.T, command []string, env map[string]string, password string) {
	t.Helper()
	server, cli := needValkey(t)
	if len(command) == 0 || command[0] != "valkey-server" {
		t.Fatalf("valkey command %q does not start valkey-server", command)
	}
	dir := t.TempDir()
	var args []string
	for i, a := range command[1:] {
		if i > 0 && command[i] == "--dir" {
			a = dir // the manifest's volume mount, here a temporary directory
		}
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		if strings.Contains(a, "$(") {
			t.Fatalf("valkey argument %q refers to a variable the container does not set", a)
		}
		args = append(args, a)
	}
	port := freePort(t)
	// Later arguments win: loopback only, in the foreground.
	args = append(args, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--daemonize", "no")
	var log syncbuf.Buffer
	runValkey(t, server, args, &log)
	if err := waitListening(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 10*time.Second); err != nil {
		t.Fatalf("valkey-server with the manifest's flags %q: %v\n%s", args, err, log.String())
	}
	valkeyCLI := func(auth string, extra ...string) string {
		c := exec.Command(cli, append([]string{"-p", strconv.Itoa(port), "--no-auth-warning"}, extra...)...)
		c.Env = append(os.Environ(), "REDISCLI_AUTH="+auth)
		out, _ := c.CombinedOutput()
		return strings.TrimSpace(string(out))
	}
	if out := valkeyCLI(password, "ping"); out != "PONG" {
		t.Errorf("valkey with idemgate's password: ping = %q", out)
	}
	if password != "" {
		if out := valkeyCLI("", "ping"); !strings.Contains(out, "NOAUTH") {
			t.Errorf("valkey without a password answered %q; requirepass is not in force", out)
		}
	}
	for key, want := range map[string]string{"appendonly": "yes", "appendfsync": "always", "maxmemory-policy": "noeviction"} {
		lines := strings.Split(valkeyCLI(password, "config", "get", key), "\n")
		if len(lines) != 2 || strings.TrimSpace(lines[1]) != want {
			t.Errorf("valkey %s = %q, want %s", key, lines, want)
		}
	}
}
