package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyShortFormRefused: "idempotency /etc/idemgate/idemgate.yaml"
// is read by Caddy as a path matcher, not as the configuration file: the
// handler would run without its configuration, for that path alone, and
// every keyed POST would reach the upstream unprotected. Caddy must refuse
// it with an error that says to write config in the block, or the
// handler must protect: one key sent three times runs once. A
// configuration path as the directive's argument is refused the same way,
// while a path matcher of request paths is read as Caddy reads it.
func TestCaddyShortFormRefused(t *testing.T) {
	vk := valkeytest.Start(t)
	up := startUpstream(t)
	yaml := fmt.Sprintf(`
store:
  driver: valkey
  valkey:
    addrs: [%q]
    key_prefix: "caddy-short:"
log:
  access: false
defaults:
  owner: "header:X-User"
`, vk.Addr())
	site := caddySite{YAML: yaml, Directive: "idempotency $CONFIG", After: "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")}
	c, err := tryRunCaddy(t, site)
	if err == nil {
		for range 3 {
			if a := post(t, c.URL, "alice", "k-short", `{"amount":1}`); a.Status != 201 {
				t.Fatalf("%d %s", a.Status, a.Body)
			}
		}
		t.Fatalf("Caddy ran the short form, and one key sent three times ran %d times, want 1:\n%s", up.execs.Load(), c.out.String())
	}
	if !strings.Contains(err.Error(), "path matcher") || !strings.Contains(err.Error(), "idempotency { config /") {
		t.Fatalf("Caddy refused the short form without saying to use config:\n%v", err)
	}

	dir := t.TempDir()
	existing := filepath.Join(dir, "idemgate-conf")
	if err := os.WriteFile(existing, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		directive, want string
	}{
		{"idempotency /etc/idemgate/idemgate.yml", "idempotency { config /etc/idemgate/idemgate.yml }"},
		{"idempotency " + existing, "idempotency { config " + existing + " }"},
		{"idempotency idemgate.yaml", "idempotency { config idemgate.yaml }"},
		{"idempotency /api/* idemgate.yaml", "idempotency { config idemgate.yaml }"},
		{"idempotency /api/*", ""},
	} {
		out, err := adapt(t, fmt.Sprintf("http://127.0.0.1:1 {\n\t%s\n\treverse_proxy 127.0.0.1:2\n}\n", tc.directive))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: a path matcher of request paths refused: %v\n%s", tc.directive, err, out)
		case tc.want == "" && !strings.Contains(out, `"path":["/api/*"]`):
			t.Errorf("%s: adapted without its path matcher:\n%s", tc.directive, out)
		case tc.want != "" && (err == nil || !strings.Contains(out, tc.want)):
			t.Errorf("%s: adapted (error %v), want an error saying %q:\n%s", tc.directive, err, tc.want, out)
		}
	}
}

// TestCaddyNoConfigWarns: an idempotency handler without config runs on
// the built-in defaults and the memory store, which a reader of the
// Caddyfile may not expect: Caddy says so at warn level, and how to name
// the file.
func TestCaddyNoConfigWarns(t *testing.T) {
	c := runCaddy(t, caddySite{Directive: "idempotency", After: `respond "ok"`})
	out := c.out.String()
	if !strings.Contains(out, `"level":"warn"`) || !strings.Contains(out, "no config: built-in defaults") || !strings.Contains(out, "config <path>") {
		t.Fatalf("no warning that the handler runs without its configuration:\n%s", out)
	}
}

// adapt runs caddy adapt on caddyfile and returns its output.
func adapt(t *testing.T, caddyfile string) (string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(path, []byte(caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(caddyBinary, "adapt", "--config", path, "--adapter", "caddyfile").CombinedOutput()
	return string(out), err
}
