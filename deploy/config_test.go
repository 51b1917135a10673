package deploy_test

import (
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// containerConfig is one config.yaml that a container runs with.
type containerConfig struct {
	where string         // file it came from, for messages
	raw   []byte         // the config.yaml text
	cfg   map[string]any // parsed
}

// composeConfigPath is the config.yaml mounted into the compose replicas.
var composeConfigPath = path("deploy", "compose", "config.yaml")

// containerConfigs returns the compose config file and the Kubernetes
// ConfigMap's config.yaml.
func containerConfigs(t *testing.T) []containerConfig {
	t.Helper()
	raw, err := os.ReadFile(composeConfigPath)
	if err != nil {
		t.Fatalf("read %s: %v", composeConfigPath, err)
	}
	out := []containerConfig{{where: "deploy/compose/config.yaml", raw: raw, cfg: parseConfig(t, "deploy/compose/config.yaml", raw)}}
	cm := k8sObject(t, loadK8s(t), "ConfigMap", configMapName)
	data, _ := cm["data"].(map[string]any)
	text, ok := data["config.yaml"].(string)
	if !ok {
		t.Fatalf("ConfigMap %s: no data key config.yaml", configMapName)
	}
	where := "deploy/kubernetes/configmap.yaml"
	return append(out, containerConfig{where: where, raw: []byte(text), cfg: parseConfig(t, where, []byte(text))})
}

// TestContainerConfigs checks the config files the containers run with:
// only known keys, listeners reachable from outside the container, a shared
// store, and fail-closed defaults.
func TestContainerConfigs(t *testing.T) {
	for _, c := range containerConfigs(t) {
		t.Run(c.where, func(t *testing.T) {
			checkConfigKeys(t, c.where, c.cfg)

			// Probes and Prometheus come from outside the container's
			// loopback, so admin.listen must not be 127.0.0.1 (the default).
			admin := configStr(t, c.where, c.cfg, "admin.listen")
			if h := listenHost(t, c.where, admin); h != "" && h != "0.0.0.0" && h != "::" {
				t.Errorf("%s: admin.listen %q binds %s; in a container it must be \":9090\"", c.where, admin, h)
			}
			if p := listenPort(t, c.where, admin); p != 9090 {
				t.Errorf("%s: admin.listen port %d, want 9090", c.where, p)
			}
			if listenPort(t, c.where, configStr(t, c.where, c.cfg, "listen")) == listenPort(t, c.where, admin) {
				t.Errorf("%s: listen and admin.listen share a port", c.where)
			}

			// Replicas must share one store: memory and bolt are per process.
			if d := str(t, c.where, c.cfg, "store.driver"); d != "valkey" {
				t.Errorf("%s: store.driver %q; several replicas need the shared valkey store", c.where, d)
			}
			addrs := strs(t, c.where+" store.valkey.addrs", lookup(c.cfg, "store.valkey.addrs"))
			if len(addrs) == 0 {
				t.Errorf("%s: store.valkey.addrs is empty", c.where)
			}
			for _, a := range addrs {
				if _, _, err := net.SplitHostPort(a); err != nil {
					t.Errorf("%s: store.valkey.addrs entry %q: %v", c.where, a, err)
				}
			}
			// Secrets come from the environment, never from the file.
			for _, k := range []string{"store.valkey.password", "admin.token"} {
				if v, _ := lookup(c.cfg, k).(string); v != "" {
					t.Errorf("%s: %s is set in the file; pass it through %s", c.where, k, envNameOf(k))
				}
			}
			if v, _ := lookup(c.cfg, "defaults.on_store_error").(string); v != "" && v != "fail_closed" {
				t.Errorf("%s: defaults.on_store_error %q, want fail_closed", c.where, v)
			}
			u, err := url.Parse(str(t, c.where, c.cfg, "upstream.url"))
			if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
				t.Errorf("%s: upstream.url %v is not an http(s) URL (%v)", c.where, lookup(c.cfg, "upstream.url"), err)
			}
			duration(t, c.where, c.cfg, "upstream.timeout")
		})
	}
}

// envNameOf returns the IDEMGATE_ variable for a dotted config key.
func envNameOf(key string) string {
	for env, k := range envNames() {
		if k == key {
			return env
		}
	}
	return "?"
}

// TestEnvNames pins the env mapping against the names the brief gives, so
// a schema typo cannot make every manifest look valid.
func TestEnvNames(t *testing.T) {
	env := envNames()
	for name, key := range map[string]string{
		"IDEMGATE_STORE_VALKEY_PASSWORD":   "store.valkey.password",
		"IDEMGATE_ADMIN_TOKEN":             "admin.token",
		"IDEMGATE_STORE_VALKEY_KEY_PREFIX": "store.valkey.key_prefix",
		"IDEMGATE_UPSTREAM_URL":            "upstream.url",
		"IDEMGATE_LISTEN":                  "listen",
	} {
		if env[name] != key {
			t.Errorf("env %s maps to %q, want %q", name, env[name], key)
		}
	}
	if _, ok := env["IDEMGATE_ROUTES"]; ok {
		t.Error("routes is a list and has no env variable")
	}
}

// TestConfigKeyCheckRejectsUnknown proves the key check would catch a typo.
func TestConfigKeyCheckRejectsUnknown(t *testing.T) {
	cfg := parseConfig(t, "typo", []byte("listen: \":8080\"\nstore:\n  valkey:\n    adrs: [x]\nroutes:\n  - name: a\n    match: \"POST /\"\n    leas: 1s\n"))
	rec := &recorder{}
	checkConfigKeys(rec, "typo", cfg)
	want := []string{`unknown config key "store.valkey.adrs"`, `unknown config key "routes[0].leas"`}
	for _, w := range want {
		if !rec.has(w) {
			t.Errorf("key check did not report %s; got %q", w, rec.msgs)
		}
	}
}

// drainTime is how long a stopping idemgate may take after SIGTERM: the
// graceful shutdown bound (server.shutdown_timeout) or, if longer, the
// longest in-flight upstream call (upstream.timeout). The orchestrator's
// grace period must exceed it, or in-flight claims are cut off and only
// released by lease expiry.
func drainTime(t *testing.T, c containerConfig) time.Duration {
	t.Helper()
	return max(duration(t, c.where, c.cfg, "server.shutdown_timeout"), duration(t, c.where, c.cfg, "upstream.timeout"))
}
