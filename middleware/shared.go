package middleware

import (
	"context"
	"log/slog"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/engine"
)

// SharedStore is a store that outlives the middlewares built on it
// (Options.Shared), for a host that replaces its configuration while it
// serves: Caddy's reload provisions a new middleware before it stops the
// previous one. On one SharedStore the new middleware finds the records
// the previous one wrote, and a call still running in the previous one
// holds its claim in the same store, extended by its heartbeat, so a
// duplicate that reaches the new middleware waits for it (woken by the
// same store's notifications) and is replayed its answer, or is refused
// 409, instead of running it a second time. A store of each middleware's
// own would lose the first (memory) or be locked by the second (bolt).
//
// What the store reports reaches every middleware built on it whose ctx
// has not ended: its state (idemgate_store_up, set at once on a middleware
// that joins), the replica acknowledgement waits, and the disruptions
// that make each engine hold lease takeovers back (the Valkey or
// PostgreSQL subscription lost). It is the engine's shared store
// (engine.Store), so an engine built with engine.New takes it too. Safe
// for concurrent use.
type SharedStore = engine.Store

// SharedOptions configure OpenShared.
type SharedOptions struct {
	// Logger receives the store's warnings and connection lines; nil
	// discards them.
	Logger *slog.Logger
	// WaitStore is Options.WaitStore: how long OpenShared waits for the
	// store to answer before it returns an error; 0 returns after the
	// first attempt and connects in the background (keyed requests are
	// refused 503 store-unavailable meanwhile).
	WaitStore time.Duration
}

// OpenShared opens the store cfg names (cfg.Store; the rest of cfg is not
// used) as New would, for the middlewares built with Options.Shared. It is
// not closed when their ctx ends: Close closes it, and returns once it is
// closed (a bolt file is unlocked). Its errors are New's about the store:
// an invalid store section, WaitStore passed without the store answering.
func OpenShared(cfg *config.Config, opts SharedOptions) (*SharedStore, error) {
	return engine.OpenStore(context.Background(), cfg, engine.StoreOptions{
		Logger: opts.Logger, WaitStore: opts.WaitStore, WaitName: "Options.WaitStore", FirstAttemptWait: firstAttemptWait,
	})
}
