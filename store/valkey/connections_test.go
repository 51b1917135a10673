package valkey_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestConnectionsPerServer: Options.Connections is how many connections
// carry commands to the server, one by default; any other count adds
// exactly that many, and one that is not a power of two from 1 to
// MaxConnections is refused.
func TestConnectionsPerServer(t *testing.T) {
	srv := valkeytest.Start(t)
	count := func(conns int) int {
		t.Helper()
		name := "conns-" + strings.Repeat("x", conns)
		s := newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: randomPrefix(), Layout: valkey.Layout5, Connections: conns})
		// Commands from many callers at once, so that every connection
		// is dialled.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done := make(chan error, 64)
		for i := range 64 {
			go func() {
				_, err := s.Claim(ctx, store.ClaimParams{
					Identity:    store.Identity{Scope: name, Owner: "o", Key: strings.Repeat("k", i+1)},
					Fingerprint: "fp", Token: "token", Lease: time.Minute,
				})
				done <- err
			}()
		}
		for range 64 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		list, err := srv.CLI("CLIENT", "LIST")
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		return strings.Count(list, "name=idemgate")
	}
	one, dflt, four := count(1), count(0), count(4)
	t.Logf("connections named idemgate: %d with 1, %d by default, %d with 4", one, dflt, four)
	if dflt != one {
		t.Errorf("default opened %d connections, 1 opened %d: want the default to be %d", dflt, one, valkey.DefaultConnections)
	}
	if four-one != 3 {
		t.Errorf("4 connections opened %d, 1 opened %d: want 3 more", four, one)
	}
	for _, n := range []int{-1, 3, 6, 2 * valkey.MaxConnections} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := valkey.New(ctx, valkey.Options{Addrs: []string{srv.Addr()}, Connections: n})
		cancel()
		if err == nil {
			_ = s.Close()
			t.Errorf("Connections %d accepted; want an error", n)
		} else if !strings.Contains(err.Error(), "power of two") {
			t.Errorf("Connections %d: %v; want it to say a power of two", n, err)
		}
	}
}
