package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyFailOpenOuterDoesNotOpenTheInner: an idempotency at the top of
// a site (ordered before the blocks, so around them) whose configuration
// chose on_store_error: fail_open, and one in the handle block below it with a configuration of its own that did not,
// on another Valkey. The outer Valkey is down, so the outer handler
// forwards unprotected and holds no claim: the inner handler enforces the
// request by its own configuration, on its store that is up, so the
// upstream runs once and the retry is replayed. It used to pass the
// request through as if the outer claim covered it, and the upstream ran
// once per retry.
func TestCaddyFailOpenOuterDoesNotOpenTheInner(t *testing.T) {
	outerVK, innerVK := valkeytest.Start(t), valkeytest.Start(t)
	up := startUpstream(t)
	innerYAML := filepath.Join(t.TempDir(), "inner.yaml")
	if err := os.WriteFile(innerYAML, []byte(idemgateYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	c := runCaddy(t, caddySite{
		// The outer handler runs before the handle block, around it.
		Global: "order idempotency before invoke",
		YAML:   idemgateYAML + "  on_store_error: fail_open\n",
		Directive: fmt.Sprintf("idempotency {\n\t\tconfig $CONFIG\n\t\tstore_addrs %s\n\t\tkey_prefix outer:\n\t\tname outer\n\t}\n\t"+
			"handle /orders* {\n\t\tidempotency {\n\t\t\tconfig %s\n\t\t\tstore_addrs %s\n\t\t\tkey_prefix inner:\n\t\t\tname inner\n\t\t}\n\t\treverse_proxy %s\n\t}",
			outerVK.Addr(), innerYAML, innerVK.Addr(), strings.TrimPrefix(up.URL, "http://")),
	})
	outerVK.Kill()

	first := post(t, c.URL, "alice", "k-open", `{"amount":1}`)
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	retry := post(t, c.URL, "alice", "k-open", `{"amount":1}`)
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("the upstream ran %d times for one key, want 1: the inner handler did not choose fail_open and its store is up (retry %d replayed=%v)",
			n, retry.Status, retry.replayed())
	}
	sameResponse(t, first, retry)
}
