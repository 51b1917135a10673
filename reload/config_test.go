package reload_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/reload"
)

// loadConfig is the Load cmd/idemgate passes: the whole config file is
// validated, only its policy is kept.
func loadConfig(path string) (*policy.Policy, error) {
	c, err := config.Load(path, nil)
	if err != nil {
		return nil, err
	}
	return c.Policy, nil
}

const configHead = `upstream:
  url: "http://127.0.0.1:3000"
routes:
  - name: create-order
    match: "POST /v1/orders"
`

func routeNames(p *policy.Policy) []string {
	var out []string
	for _, r := range p.Routes() {
		out = append(out, r.Name)
	}
	return out
}

// TestRealConfigEdits runs the Reloader against real YAML and config.Load:
// an edit with a bad value is rejected with its key path and the running
// policy stays; the corrected edit is applied.
func TestRealConfigEdits(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "idemgate.yaml")
	replace := func(content string) {
		t.Helper()
		tmp := filepath.Join(dir, "idemgate.yaml.new")
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	replace(configHead)
	sig := make(chan os.Signal, 1)
	reg := prometheus.NewRegistry()
	r, err := reload.New(reload.Options{Path: path, Load: loadConfig, Registerer: reg, Signals: sig, Debounce: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if got := strings.Join(routeNames(r.Current()), ","); got != "create-order,default" {
		t.Fatalf("initial routes = %q", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	before := r.Current()
	replace(configHead + `  - name: refunds
    match: "POST /v1/refunds"
    lease: -1s
`)
	// The explicit reload does not depend on when the watcher started.
	err = r.Reload()
	var fe *policy.FieldError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "routes[1].lease") {
		t.Fatalf("Reload error = %v, want a *policy.FieldError naming routes[1].lease", err)
	}
	if r.Current() != before {
		t.Fatal("a rejected config replaced the policy")
	}
	if got := reloads(t, reg, "failure"); got < 1 {
		t.Errorf("failure count = %v, want >= 1", got)
	}

	replace(configHead + `  - name: refunds
    match: "POST /v1/refunds"
    lease: 5s
`)
	sig <- os.Interrupt // any value on the channel reloads
	deadline := time.Now().Add(10 * time.Second)
	for strings.Join(routeNames(r.Current()), ",") != "create-order,refunds,default" {
		if time.Now().After(deadline) {
			t.Fatalf("corrected config never applied; routes %v", routeNames(r.Current()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := r.Current().Routes()[1].Lease; got != 5*time.Second {
		t.Errorf("refunds lease = %v, want 5s", got)
	}
}

// reloads reads idemgate_config_reloads_total{result} from reg.
func reloads(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "idemgate_config_reloads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no idemgate_config_reloads_total{result=%q} on the registry", result)
	return 0
}

// TestReloadAppliesOverrides: a Reloader whose Load merges the same
// overrides as the start (cmd/idemgate passes one loader to both) accepts
// an edited file that leaves out what an override supplies; one that
// reloads the file alone rejects it, which is how every reload of
// `serve --config F --upstream U` used to fail.
func TestReloadAppliesOverrides(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	noUpstream := "routes:\n  - name: create-order\n    match: \"POST /v1/orders\"\n"
	if err := os.WriteFile(path, []byte(noUpstream), 0o600); err != nil {
		t.Fatal(err)
	}
	overrides := map[string]string{"upstream.url": "http://127.0.0.1:3000"}
	withFlags := func(path string) (*policy.Policy, error) {
		c, err := config.Load(path, nil, config.WithOverrides(overrides))
		if err != nil {
			return nil, err
		}
		return c.Policy, nil
	}
	r, err := reload.New(reload.Options{Path: path, Load: withFlags})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := os.WriteFile(path, []byte(noUpstream+"  - name: refunds\n    match: \"POST /v1/refunds\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatalf("Reload with the overrides: %v", err)
	}
	if got := strings.Join(routeNames(r.Current()), ","); got != "create-order,refunds,default" {
		t.Errorf("routes after the reload = %q", got)
	}
	// The file alone is not a valid configuration.
	if _, err := loadConfig(path); err == nil || !strings.Contains(err.Error(), "upstream.url") {
		t.Errorf("the file without the overrides: %v, want upstream.url required", err)
	}
}

// TestRestartRequiredKeys: a reload that changes upstream.url, listen and
// store.driver next to the policy applies the policy, keeps the old values,
// and says so: a warning naming each key and
// idemgate_config_reloads_total{result="restart_required"} (it used to log
// "config reloaded" and nothing else).
func TestRestartRequiredKeys(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "idemgate.yaml")
	if err := os.WriteFile(path, []byte(configHead), 0o600); err != nil {
		t.Fatal(err)
	}
	initial, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	var logs strings.Builder
	reg := prometheus.NewRegistry()
	r, err := reload.New(reload.Options{
		Path: path,
		Load: func(p string) (*policy.Policy, error) {
			c, err := config.Load(p, nil)
			if err != nil {
				return nil, err
			}
			keys = config.RestartKeys(initial, c)
			return c.Policy, nil
		},
		Initial:     initial.Policy,
		Logger:      slog.New(slog.NewTextHandler(&logs, nil)),
		Registerer:  reg,
		RestartKeys: func() []string { return keys },
	})
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(configHead, "127.0.0.1:3000", "127.0.0.1:3001", 1) +
		"  - name: refunds\n    match: \"POST /v1/refunds\"\nlisten: \"127.0.0.1:8081\"\nstore: {driver: bolt}\n"
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := routeNames(r.Current()); len(got) != 3 {
		t.Errorf("policy not applied: %v", got)
	}
	if !strings.Contains(logs.String(), `level=WARN msg="config reloaded, but some changed keys need a restart; their old values stay in force until then"`) ||
		// server.max_store_waiting is derived from the store driver when
		// unset, so the new driver's default is a change a restart applies.
		!strings.Contains(logs.String(), "keys=listen,server.max_store_waiting,store.driver,upstream.url") {
		t.Errorf("no warning naming the keys:\n%s", logs.String())
	}
	if v := counterValue(t, reg, "restart_required"); v != 1 {
		t.Errorf("restart_required = %v, want 1", v)
	}
	// Only the policy changes: no warning, no count.
	if err := os.WriteFile(path, []byte(configHead), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if v := counterValue(t, reg, "restart_required"); v != 1 {
		t.Errorf("restart_required after a policy-only reload = %v, want 1", v)
	}
}

func counterValue(t *testing.T, g prometheus.Gatherer, result string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "idemgate_config_reloads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series result=%q", result)
	return 0
}
