package proxy_test

import (
	"net/http"
	"net/netip"
	"net/url"
	"testing"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
)

// TestForwardingHeadersTrustedAndUntrusted: a spoofed X-Forwarded-For and
// Forwarded from an untrusted peer are replaced by the peer's address; from
// a trusted proxy they are appended to (server.trusted_proxies). The owner and
// the fingerprint do not see any of it: the same key with another spoofed
// chain is a replay, not a second run or a 422. Both the enforced and the
// passthrough path send the same fields. X-Real-IP is never passed on as
// sent: the peer's address, or from a trusted proxy the client its chain
// names.
func TestForwardingHeadersTrustedAndUntrusted(t *testing.T) {
	spoof := []string{"X-Forwarded-For", "6.6.6.6", "Forwarded", "for=6.6.6.6", "X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "https", "X-Real-IP", "8.8.8.8"}
	cases := []struct {
		name            string
		trusted         []netip.Prefix
		xff, fwd, xhost string
		proto, realIP   string
	}{
		{"untrusted", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, "127.0.0.1", "for=127.0.0.1;host=\"HOST\";proto=http", "HOST", "http", "127.0.0.1"},
		{"trusted", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, "6.6.6.6, 127.0.0.1", "for=6.6.6.6, for=127.0.0.1;host=\"HOST\";proto=http", "evil.example", "https", "6.6.6.6"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, created, func(o *proxy.Options, _ *policy.Route, _ *[]policy.Route) { o.TrustedProxies = c.trusted })
			front, _ := url.Parse(h.front.URL)
			check := func(what string) {
				t.Helper()
				h.up.mu.Lock()
				last := h.up.last
				h.up.mu.Unlock()
				want := map[string]string{"X-Forwarded-For": c.xff, "Forwarded": replaceHost(c.fwd, front.Host),
					"X-Forwarded-Host": replaceHost(c.xhost, front.Host), "X-Forwarded-Proto": c.proto, "X-Real-IP": c.realIP}
				for name, v := range want {
					if got := last.Header.Values(name); len(got) != 1 || got[0] != v {
						t.Errorf("%s: upstream got %s %q, want %q", what, name, got, v)
					}
				}
			}
			r := h.do("POST", "/v1/orders", "alice", "k1", "{}", spoof...)
			if r.status != 201 {
				t.Fatalf("first: %d %s", r.status, r.body)
			}
			check("enforced")
			// Another spoofed chain: the same operation, replayed.
			r = h.do("POST", "/v1/orders", "alice", "k1", "{}", "X-Forwarded-For", "7.7.7.7", "Forwarded", "for=7.7.7.7")
			if r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" || h.up.count("/v1/orders") != 1 {
				t.Fatalf("retry with another chain: %d replayed=%q upstream=%d", r.status, r.header.Get("Idempotent-Replayed"), h.up.count("/v1/orders"))
			}
			h.do("GET", "/v1/orders", "alice", "", "", spoof...)
			check("passthrough")
		})
	}
}

func replaceHost(s, host string) string {
	out := ""
	for i := 0; i < len(s); i++ {
		if i+4 <= len(s) && s[i:i+4] == "HOST" {
			out += host
			i += 3
			continue
		}
		out += string(s[i])
	}
	return out
}

// TestPassHost: upstream.pass_host sends the client's Host; without it the
// upstream gets its own.
func TestPassHost(t *testing.T) {
	for _, pass := range []bool{false, true} {
		h := newHarness(t, created, func(o *proxy.Options, _ *policy.Route, _ *[]policy.Route) { o.PassHost = pass })
		req, _ := http.NewRequest("POST", h.front.URL+"/v1/orders", nil)
		req.Host = "api.example.com"
		req.Header.Set("X-User", "alice")
		req.Header.Set("Idempotency-Key", "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h.up.mu.Lock()
		got := h.up.last.Host
		h.up.mu.Unlock()
		up, _ := url.Parse(h.up.URL)
		want := up.Host
		if pass {
			want = "api.example.com"
		}
		if got != want {
			t.Errorf("pass_host %t: upstream Host %q, want %q", pass, got, want)
		}
	}
}
