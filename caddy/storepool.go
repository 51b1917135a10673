package caddyidem

import (
	"fmt"
	"path/filepath"
	"sync"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/awaitonce"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/policy"
)

// stores holds the stores of every idempotency handler of the process,
// keyed by storeKey, across Caddy's configurations: a reload provisions
// the new configuration (which loads the store the old one opened) before
// it cleans up the old one (which lets go of it), so a store whose
// settings a reload keeps is never closed nor opened again. Its records
// stay (the memory store's included), a bolt file stays locked by this
// process alone, and a call that runs across the reload keeps its claim
// in the store where its duplicates, arriving at the new configuration,
// find it. Caddy's reverse_proxy keeps its upstreams' state the same way
// (its package variable hosts): a package variable because Caddy builds a
// module from its zero value (ModuleInfo.New) and nothing of the process
// outlives a configuration to carry the pool in.
var stores = caddy.NewUsagePool()

// storeKey is what identifies a store in stores: the driver and every
// setting it is opened with, so that a reload that changes one of them
// gets a store opened with the new settings (and the old one is closed
// once no configuration uses it and its calls in flight have ended). A
// bolt store is its file alone, the only setting it has, as an absolute
// path. A memory store is also its handler's name: the records of two
// handlers of one configuration (which have distinct names, or collide
// on their metrics) stay apart, as they would in two processes.
type storeKey struct {
	driver   string
	identity string
}

func newStoreKey(name string, c config.StoreConfig) (storeKey, error) {
	switch c.Driver {
	case config.DriverMemory:
		return storeKey{driver: c.Driver, identity: name}, nil
	case config.DriverBolt:
		path, err := filepath.Abs(c.Bolt.Path)
		if err != nil {
			return storeKey{}, fmt.Errorf("store.bolt.path %q: %w", c.Bolt.Path, err)
		}
		return storeKey{driver: c.Driver, identity: path}, nil
	case config.DriverValkey:
		return storeKey{driver: c.Driver, identity: fmt.Sprintf("%#v", c.Valkey)}, nil
	case config.DriverPostgres:
		return storeKey{driver: c.Driver, identity: fmt.Sprintf("%#v", c.Postgres)}, nil
	}
	// config.Load refused any other driver already.
	return storeKey{}, fmt.Errorf("store.driver %q: no such driver", c.Driver)
}

// pooledStore is one store in stores, with the handler calls running on
// it. Caddy cleans a configuration up as soon as its servers have begun
// their graceful shutdown, not when its requests have ended, so the last
// configuration to let go of a store may still run calls on it: the
// store is closed when both have happened, in whichever order.
type pooledStore struct {
	*middleware.SharedStore
	calls     awaitonce.Await
	closeOnce sync.Once
	closeErr  error
}

// owners holds, per place records live (recordsAt) and handler name, the
// owner sources of every policy the handlers of that name provisioned on
// a store there (admit). Not in pooledStore: a reload that changes a
// store setting the records do not depend on (cache_bytes, a password, a
// pool size) opens the store again, on the same records, and a ledger of
// its own would have forgotten header:X-User by then
// (TestCaddyOwnerRefusalSurvivesAStoreSettingChange). A package variable
// for the reason stores is one.
var owners = ownerLedgers{m: map[[2]string]*policy.OwnerLedger{}}

// ownerLedgers is the type of owners.
type ownerLedgers struct {
	mu sync.Mutex
	m  map[[2]string]*policy.OwnerLedger // recordsAt, handler name
}

// admit remembers pol as a policy of the handler named name on the store
// c, unless a route of it takes owners of one kind from another source
// than a policy that handler provisioned before, on a store keeping the
// same records, did in the same scope (policy.OwnerLedger): that policy's
// records are still there, kept across the reload, under owner values
// the new source gives other principals (header:X-User 42 and
// header:X-Partner 42 are both "h:42"), so the reload is refused and the
// running configuration stays.
func admit(name string, c config.StoreConfig, pol *policy.Policy) error {
	k := [2]string{recordsAt(name, c), name}
	owners.mu.Lock()
	l := owners.m[k]
	if l == nil {
		l = &policy.OwnerLedger{}
		owners.m[k] = l
	}
	owners.mu.Unlock()
	if err := l.Admit(pol); err != nil {
		return fmt.Errorf("owner source changed within a scope of records this store keeps: %w", err)
	}
	return nil
}

// recordsAt names where the records of a store opened with c may live,
// on the safe side: the key prefix, the table, the file, a memory store's
// handler. Not the addresses or the DSN, which a failover, a node added
// to a cluster or a rotated password change while the records stay: two
// stores told apart only by them count as one, and at worst a reload
// that moves owners to a fresh server is refused, never one that finds
// the old owners' records admitted.
func recordsAt(name string, c config.StoreConfig) string {
	switch c.Driver {
	case config.DriverValkey:
		return fmt.Sprintf("valkey %q", c.Valkey.KeyPrefix)
	case config.DriverPostgres:
		return fmt.Sprintf("postgres %q", c.Postgres.Table)
	case config.DriverBolt:
		if path, err := filepath.Abs(c.Bolt.Path); err == nil {
			return "bolt " + path
		}
		return "bolt " + c.Bolt.Path
	}
	return c.Driver + " " + name
}

// enter counts a call that runs on the store; leave ends it.
func (p *pooledStore) enter() { p.calls.Enter() }

func (p *pooledStore) leave() { p.calls.Leave() }

// idle reports whether no call runs on the store (nor waits for the
// responses a configuration left to record).
func (p *pooledStore) idle() bool { return p.calls.Idle() }

// Destruct implements caddy.Destructor: the last configuration that used
// the store is gone. It closes the store now if no call runs on it, and
// the last call to end closes it otherwise.
func (p *pooledStore) Destruct() error {
	if p.calls.End(func() { _ = p.close() }) {
		return p.close() // closed just now: its error
	}
	return nil
}

func (p *pooledStore) close() error {
	p.closeOnce.Do(func() { p.closeErr = p.SharedStore.Close() })
	return p.closeErr
}
