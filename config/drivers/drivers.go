// Package drivers opens the store a configuration names (store.driver and
// its section): the one place that maps config.StoreConfig to a driver's
// options, for the standalone proxy (cmd/idemgate) and the engine in
// process (package middleware) alike.
package drivers

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/bolt"
	"github.com/idemgate/idemgate/store/memory"
	"github.com/idemgate/idemgate/store/postgres"
	"github.com/idemgate/idemgate/store/valkey"
)

// Options are what Open passes to the driver besides its settings.
type Options struct {
	// Logger receives the driver's warnings; nil discards.
	Logger *slog.Logger
	// OnDisruption is called when the driver noticed an outage that may
	// have lost notifications (valkey.Options.OnDisruption,
	// postgres.Options.OnDisruption); nil ignores it.
	OnDisruption func()
	// OnAck observes each write that waited for replica acknowledgements
	// (valkey.Options.OnAck: the operation, how long the wait took, whether
	// enough replicas confirmed); nil ignores it.
	OnAck func(op string, took time.Duration, acknowledged bool)
}

// Open connects to the store c names: memory, bolt (its file), valkey
// (standalone, Sentinel or Cluster) or postgres (creating its tables when
// missing). It returns the driver's error, which for valkey and postgres
// wraps store.ErrUnavailable when the server cannot be reached, or an
// error naming a driver this build does not have.
func Open(ctx context.Context, c config.StoreConfig, o Options) (store.Store, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch c.Driver {
	case config.DriverMemory:
		log.Warn("using the in-memory store: records are lost on restart and not shared between instances; use store.driver: valkey in production")
		return memory.New(), nil
	case config.DriverValkey:
		v := c.Valkey
		var tlsConfig *tls.Config
		if v.TLS {
			tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		return valkey.New(ctx, valkey.Options{
			Addrs:          v.Addrs,
			Username:       v.Username,
			Password:       v.Password,
			TLS:            tlsConfig,
			KeyPrefix:      v.KeyPrefix,
			SentinelMaster: v.SentinelMaster,
			Logger:         log,
			OnDisruption:   o.OnDisruption,
			Acks:           valkey.Acks{Replicas: v.Acks.Replicas, AOFLocal: v.Acks.AOFLocal, Timeout: v.Acks.Timeout},
			OnAck:          o.OnAck,
			CacheBytes:     v.CacheBytes,
			Layout:         v.Layout,
			MaxFlushDelay:  v.MaxFlushDelay,
			Connections:    v.Connections,
		})
	case config.DriverPostgres:
		opts := PostgresOptions(c.Postgres)
		opts.Logger, opts.OnDisruption = log, o.OnDisruption
		return postgres.New(ctx, opts)
	case config.DriverBolt:
		b, err := bolt.New(c.Bolt.Path, bolt.WithLogger(log))
		if err != nil {
			return nil, err
		}
		log.Warn("using the bolt store: records survive restarts on this machine, but only one process can open the file, so run a single instance; use store.driver: valkey to share records between instances",
			"path", c.Bolt.Path)
		return b, nil
	}
	return nil, fmt.Errorf("store driver %q is not available in this build", c.Driver)
}

// PostgresOptions maps the store.postgres section to the store's options
// (idemgate migrate uses them too).
func PostgresOptions(c config.PostgresConfig) postgres.Options {
	return postgres.Options{DSN: c.DSN, Table: c.Table, MaxConns: int32(c.MaxConns)}
}
