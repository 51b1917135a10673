package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyOwnerRefusalSurvivesAStoreSettingChange: user 42 (owner
// header:X-User) completes a key on Valkey; reloads then move the owner
// to authorization (another kind: allowed), tune the store's replay cache
// (a store setting: the module opens the store again, on the same Valkey
// and key prefix, user 42's record still in it), and move the owner to
// header:X-Partner. That last reload must be refused, as it is without
// the tuning in between: partner 42 would be answered user 42's response.
func TestCaddyOwnerRefusalSurvivesAStoreSettingChange(t *testing.T) {
	vk := valkeytest.Start(t)
	up := startUpstream(t)
	site := caddySite{YAML: noStoreYAML, Idempotency: "store_addrs " + vk.Addr(),
		After: "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")}
	c := runCaddy(t, site)
	if first := post(t, c.URL, "42", "k-pool", `{"amount":100}`); first.Status != http.StatusCreated {
		t.Fatalf("user 42: %d %s\n%s", first.Status, first.Body, c.out.String())
	}
	site.YAML = strings.Replace(noStoreYAML, `"header:X-User"`, "authorization", 1)
	site.Sites = otherSite(t)
	if err := c.reload(t, site); err != nil {
		t.Fatalf("reload to owner authorization: %v\n%s", err, c.out.String())
	}
	site.Idempotency += "\n\t\tset store.valkey.cache_bytes 1MiB"
	site.Sites = otherSite(t)
	if err := c.reload(t, site); err != nil {
		t.Fatalf("reload with another cache_bytes: %v\n%s", err, c.out.String())
	}
	site.YAML = strings.Replace(noStoreYAML, "header:X-User", "header:X-Partner", 1)
	site.Sites = otherSite(t)
	partnerNotReplayed(t, c, "k-pool", c.reload(t, site))
}
