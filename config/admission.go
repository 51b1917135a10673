package config

import (
	"runtime"

	"github.com/idemgate/idemgate/store/postgres"
	"github.com/idemgate/idemgate/store/valkey"
)

// StoreWaitingPerConn is how many keyed requests the default
// server.max_store_waiting admits per connection of a store that runs one
// statement at a time on each (PostgreSQL's pool, bolt's single writer).
//
// Why 16: a request admitted past the pool waits for its turn, about
// (waiting / connections) statement times, and must get its answer well
// inside the store timeout (2 s), or it holds its connection and goroutine
// until then and fails closed anyway. 16 statement times are 30 ms at
// 2 ms a statement (a claim with fsync on an idle local disk) and 0.7 s at
// the 45 ms a statement took per connection when the open-loop benchmark
// saturated PostgreSQL on a busy 2-CPU machine (docs/performance.md,
// "Admission"); with 64 per connection the admitted requests themselves
// ran into the timeout there.
const StoreWaitingPerConn = 16

// MinStoreWaiting is the least default server.max_store_waiting of a
// store with connections (postgres, bolt): a burst as large as the
// benchmark's closed loop (64 concurrent requests) queues briefly instead
// of being refused, whatever the pool's size.
const MinStoreWaiting = 64

// DefaultMaxStoreWaiting returns server.max_store_waiting when it is not
// set: the bound on keyed requests waiting for a store answer, derived
// from the store's capacity.
//
//   - postgres: StoreWaitingPerConn × the pool's size (store.postgres.max_conns,
//     else the DSN's pool_max_conns, else pgxpool's default, the larger of
//     4 and the CPU count), at least MinStoreWaiting;
//   - valkey: valkey.PipelineCapacity, the commands valkey-go keeps in
//     flight before callers wait (1,024 per pipelined connection,
//     store.valkey.connections of them): past it the client queues them
//     anyway;
//   - bolt: MinStoreWaiting (one writer at a time);
//   - memory: 0, no bound: its answers never wait on I/O, so nothing
//     queues for it.
func DefaultMaxStoreWaiting(s StoreConfig) int {
	switch s.Driver {
	case DriverPostgres:
		return max(MinStoreWaiting, StoreWaitingPerConn*postgresPoolSize(s.Postgres))
	case DriverValkey:
		return valkey.PipelineCapacity(s.Valkey.Connections)
	case DriverBolt:
		return MinStoreWaiting
	}
	return 0
}

// postgresPoolSize is the pool size the Postgres store will open with c,
// as postgres.PoolConfig computes it; pgxpool's default when the DSN does
// not parse (Validate reports that).
func postgresPoolSize(c PostgresConfig) int {
	if c.MaxConns > 0 {
		return c.MaxConns
	}
	if cfg, err := postgres.PoolConfig(postgres.Options{DSN: c.DSN}); err == nil {
		return int(cfg.MaxConns)
	}
	return max(4, runtime.NumCPU())
}
