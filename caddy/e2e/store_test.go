package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// noStoreYAML is idemgateYAML without a store section: the driver is
// whatever the directive or the environment make it.
const noStoreYAML = `
upstream:
  timeout: 10s
log:
  access: false
defaults:
  owner: "header:X-User"
  lease: 5s
  wait_timeout: 10s
`

// TestCaddyStoreAddrsAloneSelectsValkey: store_addrs with no driver named
// anywhere (a file without store.driver, no inline store, no
// IDEMGATE_STORE_DRIVER) is the valkey store, not the memory default: a
// key answered by one Caddy is replayed by another on the same Valkey,
// and the upstream runs once (both serve api.example: the Host is in the
// key scope in process).
func TestCaddyStoreAddrsAloneSelectsValkey(t *testing.T) {
	vk := valkeytest.Start(t)
	up := startUpstream(t)
	site := caddySite{
		YAML:        noStoreYAML,
		Idempotency: "store_addrs " + vk.Addr(),
		Hosts:       map[string]string{"api.example": "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")},
	}
	a, b := runCaddy(t, site), runCaddy(t, site)

	first := postHost(t, a.URL, "api.example", "alice", "k-6", `{"amount":6}`)
	if first.Status != 201 {
		t.Fatalf("first on Caddy A: %d %s\n%s", first.Status, first.Body, a.out.String())
	}
	sameResponse(t, first, postHost(t, b.URL, "api.example", "alice", "k-6", `{"amount":6}`))
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times across two Caddy instances on one Valkey, want 1", n)
	}
	if strings.Contains(a.out.String(), "in-memory store") {
		t.Fatalf("Caddy A warns of the in-memory store:\n%s", a.out.String())
	}
}

// TestCaddyStoreAddrsWithAnotherDriverRefused: store_addrs beside a
// driver that is named and is not valkey (inline, in the environment or in
// the file) fails provisioning with an error that names both, rather than
// run on a store that ignores the addresses.
func TestCaddyStoreAddrsWithAnotherDriverRefused(t *testing.T) {
	dir := t.TempDir()
	memoryFile := filepath.Join(dir, "memory.yaml")
	if err := os.WriteFile(memoryFile, []byte("store:\n  driver: memory\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		idempotency string
		env         []string
		driver      string // as Caddy's log quotes it in the error
		from        string // where the error says the driver comes from
	}{
		{"inline memory", "store memory", nil, `driver is \"memory\"`, "store option"},
		{"inline bolt", "store bolt\n\t\tset store.bolt.path " + filepath.Join(dir, "idem.db"), nil, `driver is \"bolt\"`, "store option"},
		{"environment", "", []string{"IDEMGATE_STORE_DRIVER=memory"}, `driver is \"memory\"`, "IDEMGATE_STORE_DRIVER"},
		{"file", "config " + memoryFile, nil, `driver is \"memory\"`, "store.driver in " + memoryFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			caddyfile := fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
}

http://127.0.0.1:1 {
	idempotency {
		%s
		store_addrs 127.0.0.1:1
	}
	respond "ok"
}
`, tc.idempotency)
			out, ok := validateCaddy(t, caddyfile, tc.env...)
			if ok {
				t.Fatalf("store_addrs with a driver named in the %s: valid, want refused:\n%s", tc.name, out)
			}
			for _, want := range []string{"store_addrs 127.0.0.1:1", tc.driver, tc.from} {
				if !strings.Contains(out, want) {
					t.Fatalf("the error does not say %q:\n%s", want, out)
				}
			}
		})
	}
}
