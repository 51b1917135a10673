package valkeytest

import (
	"net"
	"strconv"
	"sync"
	"testing"
)

// handedOut holds the ports FreePort returned in this test process. The
// kernel may give a port just closed to the next bind to port 0, so two
// calls in a row could return the same port: a test that puts both in one
// configuration (a listen address and an admin address) would then start
// a process that refuses it. This set is the one piece of state the helper
// keeps; it only grows, by a port or two per server a test starts.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a loopback TCP port that is free, and whose port+10000
// (the cluster bus port) is free as well, at the time of the call. It
// never returns a port it returned before in the same test process.
func FreePort(t testing.TB) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("valkeytest: listen on 127.0.0.1:0: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if port+10000 > 65535 || handedOut.ports[port] {
			_ = l.Close()
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		_ = l.Close()
		if err != nil {
			continue
		}
		_ = bus.Close()
		handedOut.ports[port] = true
		return port
	}
	t.Fatalf("valkeytest: found no free port pair (p, p+10000) on 127.0.0.1")
	return 0
}
