package policy

import (
	"net/http/httptest"
	"testing"
)

// TestAttackMatchHostIsCaseInsensitive: host names are case-insensitive and
// a fully qualified name may end in a dot (RFC 3986 section 3.2.2, RFC 1034
// section 3.1), so "API.Example.COM" and "api.example.com." name the host
// of a host-specific route. Matched byte for byte, any such variant fell
// through to the defaults route, skipping the route's enforcement while the
// upstream, which gets the host in X-Forwarded-Host, served the same host.
func TestAttackMatchHostIsCaseInsensitive(t *testing.T) {
	p := mustNew(t, testRoute("api", "POST api.example.com/v1/orders"), testRoute("shop", "POST Shop.Example.com/v1/orders"))
	for host, want := range map[string]string{
		"api.example.com":         "api",
		"API.Example.COM":         "api",
		"api.example.com.":        "api",
		"API.EXAMPLE.COM.:8443":   "api",
		"api.example.com:8443":    "api",
		"shop.example.com":        "shop",
		"SHOP.example.com.":       "shop",
		"other.example.com":       "default",
		"api.example.com..":       "default",
		"[::1]:8080":              "default",
		"api.example.com.evil.io": "default",
	} {
		req := httptest.NewRequest("POST", "/v1/orders", nil)
		req.Host = host
		if got := p.Match(req).Name; got != want {
			t.Errorf("host %q matched %s, want %s", host, got, want)
		}
	}
	if got := p.Routes()[1].Match; got != "POST Shop.Example.com/v1/orders" {
		t.Errorf("route keeps its pattern as written, got %q", got)
	}
}
