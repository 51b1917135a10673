package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
)

// containerConfig is one config.yaml that a container runs with, and the
// environment its manifest gives the container.
type containerConfig struct {
	where  string         // file it came from, for messages
	raw    []byte         // the config.yaml text
	cfg    map[string]any // parsed YAML, for checks of what the file says
	env    []string       // "NAME=value" the manifest sets (secrets resolved)
	loaded *config.Config // what idemgate runs with: config.Load(raw, env)
}

// composeConfigPath is the config.yaml mounted into the compose replicas.
var composeConfigPath = path("deploy", "compose", "config.yaml")

// loadConfig runs the real loader on text with environ, as `idemgate serve
// --config` does.
func loadConfig(t *testing.T, where string, text []byte, environ []string) (*config.Config, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, text, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(p, environ)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return c, nil
}

// newContainerConfig parses and loads one config with its environment.
func newContainerConfig(t *testing.T, where string, raw []byte, env []string) containerConfig {
	t.Helper()
	c := containerConfig{where: where, raw: raw, cfg: parseConfig(t, where, raw), env: env}
	loaded, err := loadConfig(t, where, raw, env)
	if err != nil {
		t.Fatalf("config.Load rejects %v", err)
	}
	c.loaded = loaded
	return c
}

// composeConfig returns the compose replicas' config and environment (the
// first replica's; TestCompose checks they all agree).
func composeConfig(t *testing.T) containerConfig {
	t.Helper()
	raw, err := os.ReadFile(composeConfigPath)
	if err != nil {
		t.Fatalf("read %s: %v", composeConfigPath, err)
	}
	services := loadCompose(t)
	replicas := composeReplicas(services)
	if len(replicas) == 0 {
		t.Fatal("compose: no idemgate service")
	}
	var env []string
	for k, v := range composeEnv(t, replicas[0], services[replicas[0]]) {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return newContainerConfig(t, "deploy/compose/config.yaml", raw, env)
}

// k8sConfig returns the ConfigMap's config.yaml and the Deployment's
// environment, with secretKeyRefs resolved from the example Secret.
func k8sConfig(t *testing.T) containerConfig {
	t.Helper()
	objs := loadK8s(t)
	cm := k8sObject(t, objs, "ConfigMap", configMapName)
	data, _ := cm["data"].(map[string]any)
	text, ok := data["config.yaml"].(string)
	if !ok {
		t.Fatalf("ConfigMap %s: no data key config.yaml", configMapName)
	}
	secret := k8sObject(t, objs, "Secret", "idemgate-secrets")
	dep := k8sObject(t, objs, "Deployment", deploymentName)
	var env []string
	for _, c := range maps(t, "containers", lookup(dep, "spec.template.spec.containers")) {
		for _, e := range maps(t, "env", c["env"]) {
			name := fmt.Sprint(e["name"])
			switch {
			case e["value"] != nil:
				env = append(env, name+"="+fmt.Sprint(e["value"]))
			case lookup(e, "valueFrom.secretKeyRef") != nil:
				key := fmt.Sprint(lookup(e, "valueFrom.secretKeyRef.key"))
				sd, _ := secret["stringData"].(map[string]any)
				if v, ok := sd[key].(string); ok {
					env = append(env, name+"="+v)
				}
			}
		}
	}
	return newContainerConfig(t, "deploy/kubernetes/configmap.yaml", []byte(text), env)
}

// containerConfigs returns the compose config and the Kubernetes one.
func containerConfigs(t *testing.T) []containerConfig {
	t.Helper()
	return []containerConfig{composeConfig(t), k8sConfig(t)}
}

// goRuntimeEnv are the non-IDEMGATE_ variables a manifest may set: they tune
// the Go runtime, not idemgate.
var goRuntimeEnv = map[string]bool{"GOMEMLIMIT": true, "GOMAXPROCS": true, "GODEBUG": true}

// checkEnvName fails t unless name is a Go runtime variable or an
// IDEMGATE_ variable that config.Load honours: loading c with name=value
// must give a different configuration than loading it without (the loader
// ignores variables that name no key, so a typo would otherwise pass).
func checkEnvName(t *testing.T, where string, c containerConfig, name, value string) {
	t.Helper()
	if goRuntimeEnv[name] {
		return
	}
	if !strings.HasPrefix(name, config.EnvPrefix) {
		t.Errorf("%s: env %s is not %s-prefixed", where, name, config.EnvPrefix)
		return
	}
	without, err1 := loadConfig(t, where, c.raw, nil)
	with, err2 := loadConfig(t, where, c.raw, []string{name + "=" + value})
	if err1 != nil || err2 != nil {
		t.Errorf("%s: env %s=%q: %v %v", where, name, value, err1, err2)
		return
	}
	without.Policy, with.Policy = nil, nil
	if reflect.DeepEqual(without, with) {
		t.Errorf("%s: env %s changes nothing in config.Load; it names no key (or repeats the file's value)", where, name)
	}
}

// checkGrace reports through rep unless an orchestrator's grace period
// (terminationGracePeriodSeconds, stop_grace_period) covers idemgate's whole
// drain: the preStop sleep (0 without one) plus server.shutdown_timeout,
// which config.Validate keeps above upstream.timeout so a call in flight at
// SIGTERM can finish and record its response. A grace period that ends
// first SIGKILLs the process mid-call: the client gets a connection error
// and a retry runs the operation again once the lease ends.
func checkGrace(rep reporter, where string, grace, preStop time.Duration, c *config.Config) {
	rep.Helper()
	shutdown, upstream := c.Server.ShutdownTimeout, c.Upstream.Timeout
	switch {
	case shutdown == 0:
		rep.Errorf("%s: server.shutdown_timeout is 0 (no limit), which no grace period %v can cover; set it above upstream.timeout (%v)", where, grace, upstream)
		return
	case shutdown <= upstream:
		rep.Errorf("%s: server.shutdown_timeout %v must exceed upstream.timeout %v, or a call in flight at SIGTERM is cut off", where, shutdown, upstream)
	}
	if grace <= preStop+shutdown {
		rep.Errorf("%s: grace period %v must exceed the preStop sleep %v + server.shutdown_timeout %v = %v", where, grace, preStop, shutdown, preStop+shutdown)
	}
}

// TestGraceCheckFires proves checkGrace catches what it is for.
func TestGraceCheckFires(t *testing.T) {
	cfg := func(shutdown, upstream time.Duration) *config.Config {
		c := config.Default()
		c.Server.ShutdownTimeout, c.Upstream.Timeout = shutdown, upstream
		return c
	}
	tests := []struct {
		name             string
		grace, preStop   time.Duration
		shutdown, upcall time.Duration
		want             string // "" = no message
	}{
		{"covered", 45 * time.Second, 5 * time.Second, 35 * time.Second, 30 * time.Second, ""},
		{"grace equals the drain", 40 * time.Second, 5 * time.Second, 35 * time.Second, 30 * time.Second, "must exceed the preStop sleep"},
		{"preStop forgotten", 36 * time.Second, 5 * time.Second, 35 * time.Second, 30 * time.Second, "must exceed the preStop sleep"},
		{"the old manifests: shutdown 30s = upstream 30s, grace 60s", 60 * time.Second, 5 * time.Second, 30 * time.Second, 30 * time.Second, "must exceed upstream.timeout"},
		{"no limit", time.Hour, 0, 0, 30 * time.Second, "no limit"},
	}
	for _, tt := range tests {
		rec := &recorder{}
		checkGrace(rec, tt.name, tt.grace, tt.preStop, cfg(tt.shutdown, tt.upcall))
		if tt.want == "" && len(rec.msgs) != 0 {
			t.Errorf("%s: unexpected %q", tt.name, rec.msgs)
		}
		if tt.want != "" && !rec.has(tt.want) {
			t.Errorf("%s: got %q, want a message with %q", tt.name, rec.msgs, tt.want)
		}
	}
}

// envValue returns the value of name in environ ("NAME=value" entries).
func envValue(environ []string, name string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// TestContainerConfigs loads the config files the containers run with
// through config.Load and checks what idemgate would run with: listeners
// reachable from outside the container, a shared store, secrets from the
// environment, fail-closed defaults.
func TestContainerConfigs(t *testing.T) {
	for _, c := range containerConfigs(t) {
		t.Run(c.where, func(t *testing.T) {
			cfg := c.loaded
			// Probes and Prometheus come from outside the container's
			// loopback, so admin.listen must not be 127.0.0.1 (the default).
			if h := listenHost(t, c.where, cfg.Admin.Listen); h != "" && h != "0.0.0.0" && h != "::" {
				t.Errorf("%s: admin.listen %q binds %s; in a container it must be \":9090\"", c.where, cfg.Admin.Listen, h)
			}
			if p := listenPort(t, c.where, cfg.Admin.Listen); p != 9090 {
				t.Errorf("%s: admin.listen port %d, want 9090", c.where, p)
			}
			if listenPort(t, c.where, cfg.Listen) != 8080 {
				t.Errorf("%s: listen %q, want port 8080 (the image's EXPOSE and the Service)", c.where, cfg.Listen)
			}

			// Replicas must share one store: memory and bolt are per process.
			if cfg.Store.Driver != config.DriverValkey {
				t.Errorf("%s: store.driver %q; several replicas need the shared valkey store", c.where, cfg.Store.Driver)
			}
			if strings.Contains(cfg.Store.Valkey.KeyPrefix, "{") {
				t.Errorf("%s: key_prefix %q holds a hash tag, which pins every record to one Cluster slot", c.where, cfg.Store.Valkey.KeyPrefix)
			}

			// Secrets come from the environment, never from the file, and
			// the environment's names reach the loaded config.
			for _, k := range []string{"store.valkey.password", "admin.token"} {
				if v, _ := lookup(c.cfg, k).(string); v != "" {
					t.Errorf("%s: %s is set in the file; pass it through %s", c.where, k, config.EnvName(k))
				}
			}
			if want := envValue(c.env, config.EnvName("store.valkey.password")); want == "" || cfg.Store.Valkey.Password != want {
				t.Errorf("%s: loaded valkey password %q, manifest env gives %q", c.where, cfg.Store.Valkey.Password, want)
			}
			if want := envValue(c.env, config.EnvName("admin.token")); want == "" || cfg.Admin.Token != want {
				t.Errorf("%s: loaded admin token %q, manifest env gives %q", c.where, cfg.Admin.Token, want)
			}
			for _, r := range cfg.Policy.Routes() {
				if r.OnStoreError != "fail_closed" {
					t.Errorf("%s: route %s on_store_error %q, want fail_closed", c.where, r.Name, r.OnStoreError)
				}
			}
			if cfg.Upstream.URL == nil || cfg.Upstream.URL.Hostname() == "" {
				t.Errorf("%s: no upstream.url", c.where)
			}
			for _, kv := range c.env {
				name, value, _ := strings.Cut(kv, "=")
				checkEnvName(t, c.where, c, name, value)
			}
		})
	}
}

// TestConfigLoadRejectsTypo proves the deploy checks would catch a
// misspelt key in a manifest: config.Load refuses unknown keys.
func TestConfigLoadRejectsTypo(t *testing.T) {
	raw, err := os.ReadFile(composeConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(raw), "on_abandoned:", "on_abandonned:", 1)
	if bad == string(raw) {
		t.Fatal("compose config has no on_abandoned key to misspell")
	}
	_, err = loadConfig(t, "typo", []byte(bad), nil)
	if err == nil || !strings.Contains(err.Error(), "on_abandonned") {
		t.Errorf("config.Load accepted a misspelt key: %v", err)
	}
	// And an env name that maps to no key is caught by checkEnvName.
	c := composeConfig(t)
	without, _ := loadConfig(t, "env", c.raw, nil)
	with, _ := loadConfig(t, "env", c.raw, []string{"IDEMGATE_ADMIN_TOKN=x"})
	without.Policy, with.Policy = nil, nil
	if !reflect.DeepEqual(without, with) {
		t.Error("an unknown IDEMGATE_ variable changed the config; checkEnvName's premise is wrong")
	}
}
