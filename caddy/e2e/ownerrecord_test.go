package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// partnerPost sends partner 42's order with key to url (Host host when
// not ""): user 42's key, body and path, owner header X-Partner.
func partnerPost(t *testing.T, url, host, key string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, body, err := gatetest.Post(ctx, nil, url+"/orders", host, http.Header{"Idempotency-Key": {key}, "X-Partner": {"42"}}, `{"amount":100}`)
	if err != nil {
		t.Fatal(err)
	}
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}
}

// wantOwnerConflict fails t unless a is the 500 owner-source-conflict
// problem, not a replay.
func wantOwnerConflict(t *testing.T, what string, a answer) {
	t.Helper()
	if a.Header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("%s was answered user 42's stored response: %d %s", what, a.Status, a.Body)
	}
	if a.Status != http.StatusInternalServerError || !strings.HasSuffix(problemType(a), "owner-source-conflict") {
		t.Fatalf("%s: %d %s, want 500 owner-source-conflict", what, a.Status, a.Body)
	}
}

// TestCaddyRestartToAnotherOwnerHeaderNeverReplaysAcrossPrincipals: a
// reload is refused (TestCaddyReloadToAnotherOwnerHeaderNeverReplaysAcrossPrincipals),
// but a Caddy restarted with the owner moved from header:X-User to
// header:X-Partner in one scope has no memory of the first source: the
// owner record in the Valkey it shares with its former self refuses the
// scope, and the upstream runs once.
func TestCaddyRestartToAnotherOwnerHeaderNeverReplaysAcrossPrincipals(t *testing.T) {
	vk := valkeytest.Start(t)
	up := startUpstream(t)
	site := caddySite{YAML: noStoreYAML, Idempotency: "store_addrs " + vk.Addr(), After: "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")}
	c := runCaddy(t, site)
	if first := post(t, c.URL, "42", "k-owner", `{"amount":100}`); first.Status != http.StatusCreated {
		t.Fatalf("user 42: %d %s\n%s", first.Status, first.Body, c.out.String())
	}
	c.stop()
	site.YAML = strings.Replace(noStoreYAML, "header:X-User", "header:X-Partner", 1)
	c.writeConfig(t, site)
	c = c.restart(t)
	wantOwnerConflict(t, "partner 42 after the restart", partnerPost(t, c.URL, "", "k-owner"))
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}

// TestCaddyTwoInstancesWithAnotherOwnerHeaderOnOneValkey: a second Caddy
// started with header:X-Partner beside one with header:X-User on one
// Valkey, serving one host, is refused the scope; the first goes on
// replaying.
func TestCaddyTwoInstancesWithAnotherOwnerHeaderOnOneValkey(t *testing.T) {
	vk := valkeytest.Start(t)
	up := startUpstream(t)
	site := func(yaml string) caddySite {
		return caddySite{YAML: yaml, Idempotency: "store_addrs " + vk.Addr(),
			Hosts: map[string]string{"api.example": "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")}}
	}
	users := runCaddy(t, site(noStoreYAML))
	partners := runCaddy(t, site(strings.Replace(noStoreYAML, "header:X-User", "header:X-Partner", 1)))
	first := postHost(t, users.URL, "api.example", "42", "k-owner", `{"amount":100}`)
	if first.Status != http.StatusCreated {
		t.Fatalf("user 42: %d %s\n%s", first.Status, first.Body, users.out.String())
	}
	wantOwnerConflict(t, "partner 42 on the second Caddy", partnerPost(t, partners.URL, "api.example", "k-owner"))
	sameResponse(t, first, postHost(t, users.URL, "api.example", "42", "k-owner", `{"amount":100}`))
	if n := up.execs.Load(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
}
