package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// validateCaddy runs caddy validate on caddyfile, which adapts it and
// provisions every module (the idempotency handlers open their stores)
// without serving, with env added to the environment; it returns Caddy's
// output and whether the configuration is valid.
func validateCaddy(t *testing.T, caddyfile string, env ...string) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddyBinary, "validate", "--config", path, "--adapter", "caddyfile")
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir), env...)
	out, err := cmd.CombinedOutput()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatalf("caddy validate: %v", err)
	}
	return string(out), err == nil
}

// twoSites is a Caddyfile of two sites with an idempotency handler each
// (the built-in defaults: memory store), whose inline options are a and b.
func twoSites(a, b string) string {
	return fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
}

http://127.0.0.1:1 {
	idempotency {
		%s
	}
	respond "a"
}

http://127.0.0.1:2 {
	idempotency {
		%s
	}
	respond "b"
}
`, a, b)
}

// TestCaddyMetricsCollisionSaysName: two idempotency handlers in one
// configuration whose metrics collide on Caddy's registry fail to
// provision with the advice to name each, whatever Prometheus's error:
// both unnamed or alike named (an AlreadyRegisteredError), or one named
// beside one unnamed (a plain error on the label names). Each named on
// its own, they provision.
func TestCaddyMetricsCollisionSaysName(t *testing.T) {
	const hint = "give each its own name"
	for _, tc := range []struct {
		name string
		a, b string
	}{
		{"both unnamed", "", ""},
		{"named and unnamed", "name orders", ""},
		{"unnamed and named", "", "name orders"},
		{"the same name", "name orders", "name orders"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, ok := validateCaddy(t, twoSites(tc.a, tc.b))
			if ok || !strings.Contains(out, hint) {
				t.Fatalf("valid %v, want a provisioning error that says %q:\n%s", ok, hint, out)
			}
		})
	}
	if out, ok := validateCaddy(t, twoSites("name orders", "name refunds")); !ok {
		t.Fatalf("two handlers named apart: not valid:\n%s", out)
	}
}

// TestCaddyfileMistakesSayWhatToDo: a relative config path that is not
// there says it was read from Caddy's working directory, and an unknown
// option lists the options there are.
func TestCaddyfileMistakesSayWhatToDo(t *testing.T) {
	out, ok := validateCaddy(t, twoSites("config ./idemgate.yaml", "store memory"))
	if ok || !strings.Contains(out, "read from Caddy's working directory") || !strings.Contains(out, "give an absolute path") {
		t.Errorf("a missing relative config: valid %v, want a refusal naming Caddy's working directory:\n%s", ok, out)
	}
	out, ok = validateCaddy(t, twoSites("config_file ./idemgate.yaml", "store memory"))
	if ok || !strings.Contains(out, `config_file\": the options are config, store,`) {
		t.Errorf("an unknown option: valid %v, want a refusal listing the options:\n%s", ok, out)
	}
}
