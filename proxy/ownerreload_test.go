package proxy_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/reload"
	"github.com/idemgate/idemgate/store/memory"
)

// TestReloadToAnotherOwnerHeaderNeverReplaysAcrossPrincipals: header:X-User
// and header:X-Partner both store the owner "h:42", which is why validate
// refuses them in one scope. A reload that moves a route from one to the
// other without moving its scope leaves user 42's records in that scope,
// where partner 42 would be answered them: such a reload is refused and the
// running policy stays, so partner 42 never gets user 42's response.
func TestReloadToAnotherOwnerHeaderNeverReplaysAcrossPrincipals(t *testing.T) {
	ownerHeader := "X-User"
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(ownerHeader)
	r, err := reload.New(reload.Options{
		Path: path,
		Load: func(string) (*policy.Policy, error) {
			d := baseRoute()
			d.Owner = identity.OwnerSource{Kind: identity.OwnerHeader, Header: ownerHeader}
			return policy.New(d, nil)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t, created)
	target, _ := url.Parse(up.URL)
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	p, err := proxy.New(proxy.Options{Upstream: target, Store: st, Timeout: 5 * time.Second, Policy: r.Current})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	h := &harness{t: t, up: up, store: st, front: front}

	if first := h.do("POST", "/v1/orders", "42", "k", `{"amount":100}`); first.status != http.StatusCreated {
		t.Fatalf("user 42's request: %d %s", first.status, first.body)
	}
	ownerHeader = "X-Partner"
	write(ownerHeader)
	reloadErr := r.Reload()

	res := h.do("POST", "/v1/orders", "", "k", `{"amount":100}`, "X-Partner", "42")
	if res.header.Get(proxy.ReplayedHeader) == "true" {
		t.Fatalf("partner 42 was answered user 42's stored response after the reload (reload error: %v): %d %s", reloadErr, res.status, res.body)
	}
	if reloadErr == nil {
		t.Fatalf("a reload that moves the owner to another header in the same scope was applied; partner 42 got %d %s", res.status, res.body)
	}
	if c := h.up.count("/v1/orders"); c != 1 {
		t.Fatalf("upstream ran %d times, want 1", c)
	}
}
