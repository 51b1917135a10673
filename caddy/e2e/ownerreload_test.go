package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
)

// TestCaddyReloadToAnotherOwnerHeaderNeverReplaysAcrossPrincipals:
// owner header:X-User and header:X-Partner both store "h:42", which is why
// validate refuses them in one scope. A caddy reload that moves the owner
// from one to the other keeps the store, and user 42's records in it, where
// partner 42 would be answered them: Caddy refuses such a reload and keeps
// the running configuration, so partner 42 never gets user 42's response.
func TestCaddyReloadToAnotherOwnerHeaderNeverReplaysAcrossPrincipals(t *testing.T) {
	up := startUpstream(t)
	site := caddySite{YAML: noStoreYAML, After: "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")}
	c := runCaddy(t, site)
	if first := post(t, c.URL, "42", "k-owner", `{"amount":100}`); first.Status != http.StatusCreated {
		t.Fatalf("user 42: %d %s\n%s", first.Status, first.Body, c.out.String())
	}
	site.YAML = strings.Replace(noStoreYAML, "header:X-User", "header:X-Partner", 1)
	site.Sites += otherSite(t) // so that Caddy does not skip the reload as the configuration it runs
	partnerNotReplayed(t, c, "k-owner", c.reload(t, site))
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

// partnerNotReplayed sends partner 42's request with key (user 42's key,
// body and path) after the reload that moved the owner to header:X-Partner
// and returned reloadErr: it must not be user 42's replay, and that reload
// must have been refused.
func partnerNotReplayed(t *testing.T, c *caddyProc, key string, reloadErr error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, body, err := gatetest.Post(ctx, nil, c.URL+"/orders", "", http.Header{"Idempotency-Key": {key}, "X-Partner": {"42"}}, `{"amount":100}`)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("partner 42 was answered user 42's stored response after the reload (reload error: %v): %d %s", reloadErr, resp.StatusCode, body)
	}
	if reloadErr == nil {
		t.Fatalf("a reload that moves the owner to another header in the same scope was applied; partner 42 got %d %s", resp.StatusCode, body)
	}
}
