package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestSecurityRealIPNotPassedFromClients: X-Real-IP, which backends behind nginx
// read as the client's address, is set by idemgate like X-Forwarded-For
// (README, "What the upstream receives"): from an untrusted client it is
// the client's own address whatever it sent, on the enforced and the
// passthrough path; from a peer in server.trusted_proxies it is the client
// address the peer's X-Forwarded-For chain names.
func TestSecurityRealIPNotPassedFromClients(t *testing.T) {
	up := startUpstream(t)
	var seen = make(chan [2]string, 16)
	up.Handler = func(w http.ResponseWriter, r *http.Request) {
		seen <- [2]string{r.Header.Get("X-Real-IP"), strings.Join(r.Header.Values("X-Real-IP"), "|")}
		w.WriteHeader(http.StatusCreated)
	}
	send := func(t *testing.T, url, method, key string, hdr ...string) (string, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url+"/v1/orders", strings.NewReader(`{}`))
		req.Header.Set("X-User", "alice")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		for i := 0; i < len(hdr); i += 2 {
			req.Header.Add(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("%s: status %d", method, resp.StatusCode)
		}
		select {
		case got := <-seen:
			return got[0], got[1]
		default:
			t.Fatalf("%s: the upstream was not called", method)
		}
		return "", ""
	}

	t.Run("untrusted", func(t *testing.T) {
		// 10.0.0.0/8 is trusted, the loopback test client is not.
		g := startGate(t, gateConfig{Upstream: up.URL, Extra: "server:\n  trusted_proxies: [\"10.0.0.0/8\"]\n"})
		for i, method := range []string{http.MethodPost, http.MethodGet} {
			key := ""
			if method == http.MethodPost {
				key = "real-ip-untrusted"
			}
			first, all := send(t, g.URL, method, key, "X-Real-IP", "6.6.6.6", "X-Real-IP", "7.7.7.7", "X-Forwarded-For", "8.8.8.8")
			if first != "127.0.0.1" || all != "127.0.0.1" {
				t.Errorf("request %d (%s): upstream got X-Real-IP %q, want only the client's 127.0.0.1", i, method, all)
			}
		}
	})
	t.Run("trusted chain", func(t *testing.T) {
		g := startGate(t, gateConfig{Upstream: up.URL, Extra: "server:\n  trusted_proxies: [\"127.0.0.1/32\", \"10.0.0.0/8\"]\n"})
		for _, c := range []struct {
			name string
			hdr  []string
			want string
		}{
			// A load balancer at 127.0.0.1 that appended the client
			// 203.0.113.7 behind an inner hop 10.1.2.3; the client's own
			// spoofed elements and X-Real-IP are not believed.
			{"chain", []string{"X-Forwarded-For", "6.6.6.6, 203.0.113.7", "X-Forwarded-For", "10.1.2.3", "X-Real-IP", "6.6.6.6"}, "203.0.113.7"},
			{"no chain", nil, "127.0.0.1"},
		} {
			first, all := send(t, g.URL, http.MethodPost, "real-ip-"+strings.ReplaceAll(c.name, " ", "-"), c.hdr...)
			if first != c.want || all != c.want {
				t.Errorf("%s: upstream got X-Real-IP %q, want %q", c.name, all, c.want)
			}
		}
	})
}
