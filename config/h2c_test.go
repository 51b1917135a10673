package config

import "testing"

// TestH2CUpstreamURL: h2c:// is an upstream scheme, globally and per
// route (HTTP/2 with prior knowledge without TLS, proxy.SchemeH2C).
func TestH2CUpstreamURL(t *testing.T) {
	c, err := Load(writeFile(t, "upstream: {url: 'h2c://127.0.0.1:50051'}\n"+
		"routes: [{name: billing, match: 'POST /billing.v1.Billing/Charge', upstream: 'h2c://billing:50051'}]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Upstream.URL.Scheme != "h2c" {
		t.Fatalf("upstream.url scheme %q", c.Upstream.URL.Scheme)
	}
	for _, r := range c.Policy.Routes() {
		if r.Name == "billing" && (r.Upstream == nil || r.Upstream.Scheme != "h2c") {
			t.Fatalf("route upstream %v", r.Upstream)
		}
	}
}
