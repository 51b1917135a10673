package deploy_test

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// composeFile is the Docker Compose demo.
var composeFile = path("deploy", "docker-compose.yaml")

// loadCompose parses the compose file (merge keys resolved by the YAML
// decoder) and returns its services.
func loadCompose(t *testing.T) map[string]map[string]any {
	t.Helper()
	docs := readYAMLDocs(t, composeFile)
	if len(docs) != 1 {
		t.Fatalf("%s: %d documents, want 1", composeFile, len(docs))
	}
	raw, ok := docs[0]["services"].(map[string]any)
	if !ok || len(raw) == 0 {
		t.Fatalf("%s: no services", composeFile)
	}
	out := map[string]map[string]any{}
	for name, s := range raw {
		m, ok := s.(map[string]any)
		if !ok {
			t.Fatalf("compose service %s: %T", name, s)
		}
		out[name] = m
	}
	return out
}

// composeEnv returns a service's environment as a map (list or map form),
// with compose interpolation applied from defaults.
func composeEnv(t *testing.T, name string, s map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	switch env := s["environment"].(type) {
	case nil:
	case map[string]any:
		for k, v := range env {
			out[k] = interpolate(fmt.Sprint(v), nil)
		}
	case []any:
		for _, e := range strs(t, name+" environment", env) {
			k, v, _ := strings.Cut(e, "=")
			out[k] = interpolate(v, nil)
		}
	default:
		t.Fatalf("compose service %s: environment is %T", name, env)
	}
	return out
}

// healthTest returns a service's healthcheck test as a list ("CMD", ...).
func healthTest(t *testing.T, name string, s map[string]any) []string {
	t.Helper()
	return strs(t, name+" healthcheck.test", lookup(s, "healthcheck.test"))
}

// flagValue returns the value after flag in args, or "".
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// publishedTargets returns the container ports a service publishes on the
// host (short "host:container" and long {target: N} syntax).
func publishedTargets(t *testing.T, name string, s map[string]any) []int {
	t.Helper()
	var out []int
	ports, _ := s["ports"].([]any)
	for _, p := range ports {
		switch p := p.(type) {
		case string:
			spec, _, _ := strings.Cut(p, "/")
			parts := strings.Split(spec, ":")
			n, err := strconv.Atoi(parts[len(parts)-1])
			if err != nil {
				t.Fatalf("compose service %s: port %q: %v", name, p, err)
			}
			out = append(out, n)
		case map[string]any:
			out = append(out, toInt(t, name+" ports.target", p["target"]))
		default:
			t.Fatalf("compose service %s: port %v (%T)", name, p, p)
		}
	}
	return out
}

func TestCompose(t *testing.T) {
	services := loadCompose(t)
	stages := byName(parseDockerfile(t, path("Dockerfile")))
	cc := composeConfig(t)

	// Every dependency waits for health, and only on services that have a
	// healthcheck, so `up` starts idemgate after Valkey answers PING.
	for name, s := range services {
		deps, _ := s["depends_on"].(map[string]any)
		if _, isList := s["depends_on"].([]any); isList {
			t.Errorf("compose service %s: depends_on list form does not wait for health; use condition: service_healthy", name)
		}
		for dep, spec := range deps {
			if lookup(map[string]any{"d": spec}, "d.condition") != "service_healthy" {
				t.Errorf("compose service %s: depends_on %s without condition: service_healthy", name, dep)
			}
			d, ok := services[dep]
			if !ok {
				t.Errorf("compose service %s: depends on unknown service %s", name, dep)
				continue
			}
			if len(healthTest(t, dep, d)) == 0 {
				t.Errorf("compose service %s: depended on but has no healthcheck", dep)
			}
		}
		if target, ok := lookup(s, "build.target").(string); ok {
			if _, ok := stages[target]; !ok {
				t.Errorf("compose service %s: build target %s is no Dockerfile stage", name, target)
			}
			ctx := filepath.Join(filepath.Dir(composeFile), fmt.Sprint(lookup(s, "build.context")))
			df := "Dockerfile"
			if v, ok := lookup(s, "build.dockerfile").(string); ok {
				df = v
			}
			if _, err := os.Stat(filepath.Join(ctx, df)); err != nil {
				t.Errorf("compose service %s: build context %s has no %s", name, ctx, df)
			}
		}
		if slices.Contains(composeReplicas(services), name) {
			for k, v := range composeEnv(t, name, s) {
				checkEnvName(t, "compose service "+name, cc, k, v)
			}
		}
	}

	// Valkey: AOF on, a PONG healthcheck.
	vk, ok := services["valkey"]
	if !ok {
		t.Fatal("compose: no valkey service")
	}
	if img, _ := vk["image"].(string); !strings.HasPrefix(img, "valkey/valkey:8") {
		t.Errorf("compose valkey: image %q, want valkey/valkey:8", img)
	}
	cmd := strs(t, "valkey command", vk["command"])
	if flagValue(cmd, "--appendonly") != "yes" {
		t.Errorf("compose valkey: command %q lacks --appendonly yes", cmd)
	}
	if f := flagValue(cmd, "--appendfsync"); f != "always" && f != "everysec" {
		t.Errorf("compose valkey: --appendfsync %q, want always or everysec", f)
	}
	if ht := strings.Join(healthTest(t, "valkey", vk), " "); !strings.Contains(ht, "valkey-cli") || !strings.Contains(ht, "ping") {
		t.Errorf("compose valkey: healthcheck %q, want valkey-cli ping", ht)
	}
	valkeyPort := 6379
	if p := flagValue(cmd, "--port"); p != "" {
		valkeyPort, _ = strconv.Atoi(p)
	}

	// idemgate replicas: at least two, sharing the config and the store.
	listen := listenPort(t, cc.where, cc.loaded.Listen)
	admin := listenPort(t, cc.where, cc.loaded.Admin.Listen)
	replicas := composeReplicas(services)
	if len(replicas) < 2 {
		t.Fatalf("compose: idemgate replicas %v, want at least two sharing Valkey", replicas)
	}
	for _, name := range replicas {
		s := services[name]
		args := strs(t, name+" command", s["command"])
		configFile := flagValue(args, "--config")
		if configFile == "" {
			configFile = "/etc/idemgate/config.yaml" // the image's CMD
		}
		mounted := false
		for _, v := range strs(t, name+" volumes", s["volumes"]) {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && parts[1] == configFile {
				src := filepath.Join(filepath.Dir(composeFile), parts[0])
				if filepath.Clean(src) != filepath.Clean(composeConfigPath) {
					t.Errorf("compose %s: mounts %s at %s, want deploy/compose/config.yaml", name, parts[0], configFile)
				}
				if len(parts) < 3 || !strings.Contains(parts[2], "ro") {
					t.Errorf("compose %s: config mount should be read-only (:ro)", name)
				}
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("compose %s: nothing mounted at --config %s", name, configFile)
		}
		ht := healthTest(t, name, s)
		if len(ht) < 3 || ht[0] != "CMD" || ht[1] != "/idemgate" || ht[2] != "healthcheck" {
			t.Errorf("compose %s: healthcheck %q, want [CMD /idemgate healthcheck ...]", name, ht)
		} else if u := flagValue(ht, "--url"); u != "" {
			pu, err := url.Parse(u)
			if err != nil || pu.Port() != strconv.Itoa(admin) || pu.Path != "/healthz" {
				t.Errorf("compose %s: healthcheck URL %s, want the admin port %d /healthz", name, u, admin)
			}
		}
		published := publishedTargets(t, name, s)
		if !slices.Contains(published, listen) {
			t.Errorf("compose %s: publishes %v, not the listen port %d", name, published, listen)
		}
		if slices.Contains(published, admin) {
			t.Errorf("compose %s: publishes the admin port %d; /admin/ must stay private", name, admin)
		}
		deps, _ := s["depends_on"].(map[string]any)
		if _, ok := deps["valkey"]; !ok {
			t.Errorf("compose %s: does not depend on valkey", name)
		}
		env := composeEnv(t, name, s)
		for _, k := range []string{"IDEMGATE_STORE_VALKEY_PASSWORD", "IDEMGATE_ADMIN_TOKEN"} {
			if env[k] == "" {
				t.Errorf("compose %s: %s not set", name, k)
			}
		}
		if env["IDEMGATE_STORE_VALKEY_PASSWORD"] != composeEnv(t, "valkey", vk)["REDISCLI_AUTH"] ||
			env["IDEMGATE_STORE_VALKEY_PASSWORD"] != interpolate(flagValue(cmd, "--requirepass"), nil) {
			t.Errorf("compose %s: IDEMGATE_STORE_VALKEY_PASSWORD differs from valkey's --requirepass/REDISCLI_AUTH", name)
		}
		grace, err := time.ParseDuration(fmt.Sprint(s["stop_grace_period"]))
		if err != nil {
			t.Errorf("compose %s: stop_grace_period %v: %v (Docker's 10s default cuts the drain short)", name, s["stop_grace_period"], err)
		} else {
			checkGrace(t, "compose "+name+" stop_grace_period", grace, 0, cc.loaded)
		}
		if s["read_only"] != true || !slices.Contains(strs(t, "cap_drop", s["cap_drop"]), "ALL") {
			t.Errorf("compose %s: want read_only: true and cap_drop: [ALL]", name)
		}
	}

	// The config points at services of this compose file.
	for _, a := range cc.loaded.Store.Valkey.Addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			t.Errorf("compose config: valkey addr %q: %v", a, err)
			continue
		}
		if s, ok := services[host]; !ok || !strings.HasPrefix(fmt.Sprint(s["image"]), "valkey/") {
			t.Errorf("compose config: valkey addr %s is not the compose valkey service", a)
		}
		if port != strconv.Itoa(valkeyPort) {
			t.Errorf("compose config: valkey addr %s, valkey listens on %d", a, valkeyPort)
		}
	}
	up := cc.loaded.Upstream.URL
	api, ok := services[up.Hostname()]
	if !ok {
		t.Fatalf("compose config: upstream %s is not a compose service", up.Host)
	}
	apiListen := flagValue(strs(t, "exampleapi command", api["command"]), "--listen")
	if apiListen == "" || listenPort(t, "exampleapi --listen", apiListen) != mustAtoi(t, up.Port()) {
		t.Errorf("compose: upstream.url %s, but %s listens on %q", up, up.Hostname(), apiListen)
	}
	if lookup(api, "build.target") != "exampleapi" {
		t.Errorf("compose %s: build target %v, want exampleapi", up.Hostname(), lookup(api, "build.target"))
	}
	for _, name := range replicas {
		deps, _ := services[name]["depends_on"].(map[string]any)
		if _, ok := deps[up.Hostname()]; !ok {
			t.Errorf("compose %s: does not depend on the upstream %s", name, up.Hostname())
		}
	}
}

// mustAtoi converts a decimal port string.
func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("port %q: %v", s, err)
	}
	return n
}

// composeReplicas returns the services built from the idemgate target, in
// name order.
func composeReplicas(services map[string]map[string]any) []string {
	var out []string
	for name, s := range services {
		if lookup(s, "build.target") == "idemgate" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
