package valkey_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCacheCoherenceManyConnections: with 4 connections per server, the
// records an instance decoded (read twice, then answered from memory)
// stop being replayed once another instance deletes them, a client
// flushes the server or moves their expiry, in hashes and in layout 5:
// the invalidation reaches the connection that tracked each key, whichever
// carried the write.
func TestCacheCoherenceManyConnections(t *testing.T) {
	srv := valkeytest.Start(t)
	for _, layout := range []int{valkey.Layout3, 5} {
		for _, action := range []string{"delete", "flushall", "flushdb", "expire"} {
			t.Run(fmt.Sprintf("layout%d-%s", layout, action), func(t *testing.T) {
				prefix := randomPrefix()
				mk := func() *valkey.Store {
					return newStore(t, valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: prefix, CacheBytes: 1 << 20, Connections: 4, Layout: layout})
				}
				s1, s2 := mk(), mk()
				rc := raw(t, srv.Addr())
				var ids []store.Identity
				for i := 0; i < 16; i++ {
					id, _ := completeOne(t, s2, fmt.Sprintf("k%d", i), time.Hour)
					if _, err := s1.Get(t.Context(), id); err != nil {
						t.Fatal(err)
					}
					cached(t, s1, id)
					cached(t, s1, id)
					if rec, res := cached(t, s1, id); rec == nil || res != store.CacheHit {
						t.Fatalf("before: %v %v", rec, res)
					}
					ids = append(ids, id)
				}
				switch action {
				case "delete":
					for _, id := range ids {
						if ok, err := s2.Delete(t.Context(), id); err != nil || !ok {
							t.Fatal(ok, err)
						}
					}
				case "flushall":
					if err := rc.Do(t.Context(), rc.B().Flushall().Build()).Error(); err != nil {
						t.Fatal(err)
					}
				case "flushdb":
					if err := rc.Do(t.Context(), rc.B().Flushdb().Build()).Error(); err != nil {
						t.Fatal(err)
					}
				case "expire":
					for _, id := range ids {
						if err := rc.Do(t.Context(), rc.B().Pexpire().Key(s2.Key(id)).Milliseconds(1).Build()).Error(); err != nil {
							t.Fatal(err)
						}
					}
				}
				deadline := time.Now().Add(200 * time.Millisecond)
				for _, id := range ids {
					for {
						rec, _ := cached(t, s1, id)
						if rec == nil {
							break
						}
						if time.Now().After(deadline) {
							t.Fatalf("%s: still replays %s 200 ms after", action, id.Key)
						}
						time.Sleep(time.Millisecond)
					}
				}
			})
		}
	}
}
