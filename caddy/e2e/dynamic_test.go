package e2e

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// dnsServer starts a DNS server on a loopback UDP port, stopped in
// t.Cleanup, that answers every A question with 127.0.0.1 and any other
// with no record; it returns its address.
func dnsServer(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := buf[:n]
			end := 12 // the question: its name's labels, then type and class
			for end < len(q) && q[end] != 0 {
				end += int(q[end]) + 1
			}
			end += 5
			if len(q) < 12 || end > len(q) {
				continue
			}
			a := binary.BigEndian.Uint16(q[end-4:]) == 1
			resp := append([]byte{q[0], q[1], 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0}, q[12:end]...)
			if a {
				resp[7] = 1
				resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1)
			}
			_, _ = pc.WriteTo(resp, from)
		}
	}()
	return pc.LocalAddr().String()
}

// TestCaddyDynamicUpstreamDialFailureReleasesKey: reverse_proxy's dynamic
// upstreams resolve under the request's context, and the resolver's dials
// to the DNS server reach the module's trace: they are no connection to
// an upstream, so a dial failure to the upstream they name still releases
// the key (502 upstream-unreachable) and the retry runs once it is up.
func TestCaddyDynamicUpstreamDialFailureReleasesKey(t *testing.T) {
	vk := valkeytest.Start(t)
	port := valkeytest.FreePort(t) // nothing listens there yet
	c := runCaddy(t, caddySite{
		YAML:        fmt.Sprintf(conflictYAML, "10s"),
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-dynamic:", vk.Addr()),
		After: fmt.Sprintf("reverse_proxy {\n\t\tdynamic a {\n\t\t\tname up.test\n\t\t\tport %d\n\t\t\tresolvers %s\n\t\t\tversions ipv4\n\t\t\trefresh 1ns\n\t\t}\n\t}",
			port, dnsServer(t)),
	})
	a := post(t, c.URL, "alice", "k", `{"amount":1}`)
	if a.Status != http.StatusBadGateway || !strings.HasSuffix(problemType(a), "upstream-unreachable") {
		t.Fatalf("upstream down: %d %q, want 502 upstream-unreachable\n%s", a.Status, a.Body, c.out.String())
	}
	checkRetryRunsOnce(t, c.URL, "k", `{"amount":1}`, serveOn(t, port), "up")
}
