package drivers_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/config/drivers"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestOpen opens each local driver and Valkey from their config sections,
// claims once on each, and refuses what it cannot open.
func TestOpen(t *testing.T) {
	srv := valkeytest.Start(t)
	for _, c := range []config.StoreConfig{
		{Driver: config.DriverMemory},
		{Driver: config.DriverBolt, Bolt: config.BoltConfig{Path: filepath.Join(t.TempDir(), "idemgate.db")}},
		{Driver: config.DriverValkey, Valkey: config.ValkeyConfig{Addrs: []string{srv.Addr()}, KeyPrefix: "drivers:"}},
	} {
		t.Run(c.Driver, func(t *testing.T) {
			st, err := drivers.Open(t.Context(), c, drivers.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res, err := st.Claim(ctx, store.ClaimParams{Identity: store.Identity{Owner: "o", Scope: "s", Key: "k"}, Fingerprint: "fp", Token: "t", Lease: time.Minute})
			if err != nil || res.State != store.Claimed {
				t.Fatalf("Claim: %+v, %v", res, err)
			}
		})
	}
	t.Run("unreachable valkey", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := drivers.Open(ctx, config.StoreConfig{Driver: config.DriverValkey, Valkey: config.ValkeyConfig{Addrs: []string{"127.0.0.1:1"}}}, drivers.Options{})
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("err = %v, want store.ErrUnavailable", err)
		}
	})
	t.Run("unknown driver", func(t *testing.T) {
		_, err := drivers.Open(t.Context(), config.StoreConfig{Driver: "etcd"}, drivers.Options{})
		if err == nil || !strings.Contains(err.Error(), `"etcd"`) {
			t.Fatalf("err = %v, want one naming the driver", err)
		}
	})
}
