package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// runAdminEnv runs the real binary's admin command with exactly env (PATH
// added first) and returns stdout, stderr and the exit status.
func runAdminEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"admin"}, args...)...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestAdminCLIURLFromConfigEnvAndFlag: idemgate admin finds the admin
// listener from --config (its admin.listen, and its admin.token), from
// IDEMGATE_ADMIN_URL, or from --admin-url, in the precedence flag > env >
// config > default; routes answers JSON when asked; a purge of a record
// that does not exist exits 3.
func TestAdminCLIURLFromConfigEnvAndFlag(t *testing.T) {
	up := startUpstream(t)
	g := startGateYAML(t, "upstream: {url: \""+up.URL+"\"}\nstore: {driver: memory}\ndefaults: {owner: \"header:X-User\"}\n")
	token := "IDEMGATE_ADMIN_TOKEN=" + testAdminToken
	// A config whose admin listener is a closed port: used to show that
	// the environment and the flag win over it.
	dead := filepath.Join(t.TempDir(), "dead.yaml")
	if err := os.WriteFile(dead, fmt.Appendf(nil, "upstream: {url: %q}\nadmin: {listen: \"127.0.0.1:%d\"}\n", up.URL, valkeytest.FreePort(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	reaches := func(name string, env []string, args ...string) {
		t.Helper()
		out, errOut, code := runAdminEnv(t, env, append([]string{"routes"}, args...)...)
		if code != 0 || !strings.Contains(out, `- name: "default"`) {
			t.Errorf("%s: exit %d\n%s%s", name, code, out, errOut)
		}
	}
	// The config's admin.listen and admin.token, nothing else given.
	reaches("--config", nil, "--config", g.config)
	reaches("IDEMGATE_ADMIN_URL", []string{token, "IDEMGATE_ADMIN_URL=" + g.AdminURL})
	reaches("IDEMGATE_ADMIN_URL over --config", []string{token, "IDEMGATE_ADMIN_URL=" + g.AdminURL}, "--config", dead)
	reaches("--admin-url over IDEMGATE_ADMIN_URL", []string{token, "IDEMGATE_ADMIN_URL=http://127.0.0.1:1"}, "--admin-url", g.AdminURL, "--config", dead)
	if _, errOut, code := runAdminEnv(t, []string{token}, "routes", "--config", dead); code != 1 || !strings.Contains(errOut, "connect") {
		t.Errorf("--config naming a closed admin port: exit %d, want 1:\n%s", code, errOut)
	}

	// JSON on request, YAML by default.
	out, errOut, code := runAdminEnv(t, nil, "routes", "--json", "--config", g.config)
	var doc struct {
		Routes []map[string]any `json:"routes"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Routes) != 1 || doc.Routes[0]["name"] != "default" || doc.Routes[0]["owner"] != "header:X-User" {
		t.Fatalf("routes --json: exit %d, %+v\n%s%s", code, doc, out, errOut)
	}
	for accept, want := range map[string]string{"application/json": "application/json", "": "application/yaml", "*/*": "application/yaml", "application/yaml, application/json;q=0.5": "application/yaml"} {
		req, _ := http.NewRequest(http.MethodGet, g.AdminURL+"/admin/routes", nil)
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, want) {
			t.Errorf("GET /admin/routes with Accept %q: %d %s, want %s", accept, resp.StatusCode, ct, want)
		}
	}

	// Purge: a record that exists exits 0, one that does not exits 3.
	if a := mustPost(t, g.URL+"/v1/orders", "carol", "k1", `{}`); a.Status != 201 {
		t.Fatalf("first: %d %s", a.Status, a.Body)
	}
	rec := []string{"--config", g.config, "--route", "default", "--owner-value", "carol", "--key", "k1"}
	if out, errOut, code := runAdminEnv(t, nil, append([]string{"purge"}, rec...)...); code != 0 || strings.TrimSpace(out) != "purged" {
		t.Fatalf("purge: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := runAdminEnv(t, nil, append([]string{"purge"}, rec...)...); code != 3 || !strings.Contains(errOut, "admin-record-not-found") {
		t.Fatalf("purge of a record that does not exist: exit %d, want 3\n%s", code, errOut)
	}
	if _, errOut, code := runAdminEnv(t, nil, "purge", "--config", g.config, "--route", "nope", "--owner-value", "carol", "--key", "k1"); code == 3 || code == 0 {
		t.Errorf("purge on an unknown route: exit %d, want a failure other than 3\n%s", code, errOut)
	}
}
