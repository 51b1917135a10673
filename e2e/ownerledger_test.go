package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// ownerRoute is a route of scope "orders" taking its owners from header,
// the only thing the configurations of the owner ledger tests change.
func ownerRoute(header string) string {
	return fmt.Sprintf("  - name: orders\n    match: \"POST /v1/orders\"\n    scope: orders\n    owner: \"header:%s\"\n", header)
}

// ledgerGate is an idemgate on the Valkey at addr whose route takes its
// owners from header, not started yet (Start), on ports of its own.
func ledgerGate(t *testing.T, upstream, addr, header string) *Gate {
	t.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	adminListen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	c := gateConfig{Upstream: upstream, ValkeyAddrs: []string{addr}, Routes: ownerRoute(header), AdminToken: "t0ken"}
	if err := os.WriteFile(path, []byte(c.yaml(listen, adminListen)), 0o600); err != nil {
		t.Fatal(err)
	}
	return newGate(t, listen, adminListen, path)
}

// postAs sends the order POST with key k as the principal value v of
// owner header h.
func postAs(t *testing.T, g *Gate, h, v, k string) Answer {
	t.Helper()
	return postHeaders(10*time.Second, g.URL+"/v1/orders", "", `{"amount":100}`,
		http.Header{h: {v}, "Idempotency-Key": {k}})
}

// TestRestartToAnotherOwnerHeaderNeverReplaysAcrossPrincipals: a restart
// (how Kubernetes rolls out a changed ConfigMap) that moves a scope's
// owners from header:X-User to header:X-Partner, both of which store
// "h:42", must not answer partner 42 with user 42's stored response. The
// reload refusal (OwnerLedger) lives in memory only; the ledger record in
// the store carries it across the restart: the scope is refused with
// owner-source-conflict and nothing reaches the upstream.
func TestRestartToAnotherOwnerHeaderNeverReplaysAcrossPrincipals(t *testing.T) {
	up := startUpstream(t)
	vk := valkeytest.Start(t)

	user := ledgerGate(t, up.URL, vk.Addr(), "X-User")
	user.Start()
	if a := postAs(t, user, "X-User", "42", "k"); a.Status != http.StatusCreated || a.replayed() {
		t.Fatalf("user 42's order: %v", a)
	}
	user.Stop()

	partner := ledgerGate(t, up.URL, vk.Addr(), "X-Partner")
	partner.Start()
	a := postAs(t, partner, "X-Partner", "42", "k")
	if a.replayed() {
		t.Fatalf("partner 42 was answered user 42's stored response after the restart: %v", a)
	}
	if !a.isProblem(http.StatusInternalServerError, "owner-source-conflict") {
		t.Fatalf("partner 42 after the restart: %v, want 500 owner-source-conflict", a)
	}
	if n := up.Total(); n != 1 {
		t.Fatalf("the upstream ran %d times, want 1 (user 42's order only)", n)
	}
	const purge = "idemgate admin purge --route orders --owner idemgate:owner-ledger --key header --force"
	// The line is written before the answer, but reaches the test through
	// the process's output pipe, which the answer may overtake.
	named := func() bool {
		logs := partner.Logs()
		return strings.Contains(logs, `"recorded_owner_source":"header:X-User"`) && strings.Contains(logs, purge)
	}
	if !gatetest.Until(10*time.Second, named) {
		t.Fatalf("the refusal's log line names no recorded source or no way to clear it (%q); logs:\n%s", purge, partner.Logs())
	}

	// The operator clears the record on purpose, with the command the log
	// names: the scope is the new source's from then on (a new key: user
	// 42's record of k is still there, and purging the owner record says
	// the operator accepts that).
	args := append(strings.Fields(purge)[2:], "--admin-url", partner.AdminURL)
	if out, errOut, code := runAdminEnv(t, []string{"IDEMGATE_ADMIN_TOKEN=t0ken"}, args...); code != 0 {
		t.Fatalf("%s: exit %d: %s %s", purge, code, out, errOut)
	}
	if a := postAs(t, partner, "X-Partner", "7", "k2"); a.Status != http.StatusCreated || a.replayed() {
		t.Fatalf("partner 7 after the purge: %v, want the upstream's 201", a)
	}
	if n := up.Total(); n != 2 {
		t.Fatalf("the upstream ran %d times, want 2", n)
	}
}

// TestRestartWithTheSameOwnerSourceStillReplays: the owner record lets a
// restart with the same owner source through; a retry is replayed, not
// run again.
func TestRestartWithTheSameOwnerSourceStillReplays(t *testing.T) {
	up := startUpstream(t)
	vk := valkeytest.Start(t)
	first := ledgerGate(t, up.URL, vk.Addr(), "X-User")
	first.Start()
	a := postAs(t, first, "X-User", "42", "k")
	if a.Status != http.StatusCreated || a.replayed() {
		t.Fatalf("user 42's order: %v", a)
	}
	first.Stop()
	second := ledgerGate(t, up.URL, vk.Addr(), "X-User")
	second.Start()
	b := postAs(t, second, "X-User", "42", "k")
	if !b.replayed() || string(b.Body) != string(a.Body) {
		t.Fatalf("user 42's retry after the restart: %v, want the replay of %s", b, a.Body)
	}
	if n := up.Total(); n != 1 {
		t.Fatalf("the upstream ran %d times, want 1", n)
	}
}

// TestTwoInstancesWithAnotherOwnerSourceOnOneStore: a second instance
// started with header:X-Partner beside one with header:X-User on the same
// Valkey (a rollout's old and new pods) is refused the scope whose owner
// record the first wrote, whichever answers; partner 42 never gets user
// 42's response, and the first instance goes on serving.
func TestTwoInstancesWithAnotherOwnerSourceOnOneStore(t *testing.T) {
	up := startUpstream(t)
	vk := valkeytest.Start(t)
	user := ledgerGate(t, up.URL, vk.Addr(), "X-User")
	partner := ledgerGate(t, up.URL, vk.Addr(), "X-Partner")
	user.Start()
	partner.Start()
	if a := postAs(t, user, "X-User", "42", "k"); a.Status != http.StatusCreated || a.replayed() {
		t.Fatalf("user 42's order: %v", a)
	}
	a := postAs(t, partner, "X-Partner", "42", "k")
	if a.replayed() || !a.isProblem(http.StatusInternalServerError, "owner-source-conflict") {
		t.Fatalf("partner 42 on the second instance: %v, want 500 owner-source-conflict", a)
	}
	if a := postAs(t, partner, "X-Partner", "43", "fresh"); !a.isProblem(http.StatusInternalServerError, "owner-source-conflict") {
		t.Fatalf("partner 43 with a fresh key on the second instance: %v, want 500 owner-source-conflict", a)
	}
	if b := postAs(t, user, "X-User", "42", "k"); !b.replayed() {
		t.Fatalf("user 42's retry on the first instance: %v, want a replay", b)
	}
	if n := up.Total(); n != 1 {
		t.Fatalf("the upstream ran %d times, want 1", n)
	}
}

// TestRestartToAnotherOwnerFormIsAdmitted: a restart that gives the scope
// owners of another form (an owner list of two headers, "m:[...]", which
// never equals an "h:" value) is no conflict: the new form gets an owner
// record of its own, and a request of the same key is a new operation.
func TestRestartToAnotherOwnerFormIsAdmitted(t *testing.T) {
	up := startUpstream(t)
	vk := valkeytest.Start(t)
	user := ledgerGate(t, up.URL, vk.Addr(), "X-User")
	user.Start()
	if a := postAs(t, user, "X-User", "42", "k"); a.Status != http.StatusCreated {
		t.Fatalf("user 42's order: %v", a)
	}
	user.Stop()

	listen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	adminListen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	routes := "  - name: orders\n    match: \"POST /v1/orders\"\n    scope: orders\n    owner: [\"header:X-User\", \"header:X-Tenant\"]\n"
	c := gateConfig{Upstream: up.URL, ValkeyAddrs: []string{vk.Addr()}, Routes: routes}
	if err := os.WriteFile(path, []byte(c.yaml(listen, adminListen)), 0o600); err != nil {
		t.Fatal(err)
	}
	list := runGate(t, listen, adminListen, path)
	a := postHeaders(10*time.Second, list.URL+"/v1/orders", "", `{"amount":100}`,
		http.Header{"X-User": {"42"}, "X-Tenant": {"t1"}, "Idempotency-Key": {"k"}})
	if a.Status != http.StatusCreated || a.replayed() {
		t.Fatalf("user 42 of tenant t1 after the restart to an owner list: %v, want the upstream's 201", a)
	}
	if n := up.Total(); n != 2 {
		t.Fatalf("the upstream ran %d times, want 2", n)
	}
}

// TestOwnerRecordCheckedOnceTheStoreComesUp: idemgate starts with its
// Valkey down (the owner record cannot be checked, so nothing is): keyed
// requests are refused as store failures and reach nothing; once the
// store is up, the check is made on the next request, which passes, and
// the record it wrote refuses an instance with another source.
func TestOwnerRecordCheckedOnceTheStoreComesUp(t *testing.T) {
	up := startUpstream(t)
	vk := valkeytest.Start(t)
	vk.Stop()
	user := ledgerGate(t, up.URL, vk.Addr(), "X-User")
	user.args = append(user.args, "--wait-store", "0s")
	user.Start()
	if a := postAs(t, user, "X-User", "42", "k"); !a.isProblem(http.StatusServiceUnavailable, "store-unavailable") {
		t.Fatalf("user 42 with the store down: %v, want 503 store-unavailable", a)
	}
	vk.Restart()
	var a Answer
	eventually(t, 15*time.Second, "a keyed request passing once the store is up", func() bool {
		a = postAs(t, user, "X-User", "42", "k")
		return a.Status == http.StatusCreated
	})
	if n := up.Total(); n != 1 {
		t.Fatalf("the upstream ran %d times, want 1", n)
	}
	partner := ledgerGate(t, up.URL, vk.Addr(), "X-Partner")
	partner.Start()
	if b := postAs(t, partner, "X-Partner", "42", "k"); !b.isProblem(http.StatusInternalServerError, "owner-source-conflict") {
		t.Fatalf("partner 42 on a second instance: %v, want 500 owner-source-conflict", b)
	}
	if n := up.Total(); n != 1 {
		t.Fatalf("the upstream ran %d times, want 1", n)
	}
}
