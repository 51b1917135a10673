package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// runAdmin runs the real binary's admin command with the token in its
// environment.
func runAdmin(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runAdminEnv(t, append(os.Environ(), "IDEMGATE_ADMIN_TOKEN="+testAdminToken), args...)
}

// TestAdminLookupsAndCLI: admin lookups by a record's stored owner form,
// on the real binary. The
// missing-owner problem names the field; a record is found from the raw
// owner value; the stored form is named when an owner in another form finds
// nothing; idemgate admin get|purge|routes work over the admin API with the
// token from the environment.
func TestAdminLookupsAndCLI(t *testing.T) {
	up := startUpstream(t)
	g := startGateYAML(t, "upstream: {url: \""+up.URL+"\"}\nstore: {driver: memory}\ndefaults: {owner: \"header:X-User\"}\n")
	if a := mustPost(t, g.URL+"/v1/orders", "", "k1", `{}`); a.Status != 400 || !strings.Contains(string(a.Body), "header X-User is absent or empty") {
		t.Fatalf("missing owner: %d %s", a.Status, a.Body)
	}
	if a := mustPost(t, g.URL+"/v1/orders", "carol", "k1", `{}`); a.Status != 201 {
		t.Fatalf("first: %d %s", a.Status, a.Body)
	}
	admin := []string{"--admin-url", g.AdminURL, "--route", "default", "--key", "k1"}

	out, errOut, code := runAdmin(t, append([]string{"get", "--owner-value", "carol"}, admin...)...)
	if code != 0 || !strings.Contains(out, `"owner":"h:carol"`) || !strings.Contains(out, `"state":"completed"`) {
		t.Fatalf("get --owner-value carol: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code = runAdmin(t, append([]string{"get", "--owner", "carol"}, admin...)...)
	if code != 1 || !strings.Contains(errOut, "404") || !strings.Contains(errOut, "owner=h:carol") {
		t.Fatalf("get --owner carol: exit %d, want 1 naming h:carol:\n%s", code, errOut)
	}
	out, _, code = runAdmin(t, append([]string{"get", "--owner", "h:carol"}, admin...)...)
	if code != 0 || !strings.Contains(out, `"owner":"h:carol"`) {
		t.Fatalf("get --owner h:carol: exit %d\n%s", code, out)
	}
	out, errOut, code = runAdmin(t, "routes", "--admin-url", g.AdminURL)
	if code != 0 || !strings.Contains(out, `- name: "default"`) || !strings.Contains(out, `owner: "header:X-User"`) {
		t.Fatalf("routes: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = runAdmin(t, append([]string{"purge", "--owner-value", "carol"}, admin...)...)
	if code != 0 || strings.TrimSpace(out) != "purged" {
		t.Fatalf("purge: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code = runAdmin(t, append([]string{"get", "--owner-value", "carol"}, admin...)...); code != 1 || !strings.Contains(errOut, "admin-record-not-found") {
		t.Fatalf("get after purge: exit %d\n%s", code, errOut)
	}
	// Purged: the next request with the key runs again.
	if a := mustPost(t, g.URL+"/v1/orders", "carol", "k1", `{}`); a.Status != 201 || a.replayed() || up.Total() != 2 {
		t.Fatalf("after purge: %d replayed=%v upstream=%d", a.Status, a.replayed(), up.Total())
	}
	// Without a token the command refuses before sending anything.
	cmd := exec.Command(binary, append([]string{"admin", "get", "--owner-value", "carol"}, admin...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if err := cmd.Run(); err == nil {
		t.Error("admin without IDEMGATE_ADMIN_TOKEN succeeded")
	}
}
