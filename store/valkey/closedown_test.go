package valkey_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCloseWhileDownStaysClosed: a store closed while its Valkey is down
// (a Caddy reload onto other store settings during an outage) opens no
// connection once Valkey is back, and leaves no goroutine of its own.
func TestCloseWhileDownStaysClosed(t *testing.T) {
	srv := valkeytest.Start(t)
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := valkey.New(ctx, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix(), Layout: valkey.Layout5})
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10s while Valkey was down")
	}
	srv.Restart()
	// valkey-go reconnects within its backoff; sampled for 4s, any
	// connection of a closed store fails.
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); {
		list, err := srv.CLI("CLIENT", "LIST")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(list, "name=idemgate") {
			t.Fatalf("a closed store connected to Valkey once it was back:\n%s", list)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+2 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after Close, %d before New:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}
