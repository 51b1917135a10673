// Package valkey is the store.Store shared by idemgate instances, kept in Valkey (standalone, Sentinel or Cluster) with one atomic Lua script per operation.
package valkey

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
	"github.com/idemgate/idemgate/store/watch"
	"github.com/valkey-io/valkey-go"
)

// DefaultKeyPrefix is the KeyPrefix used when Options.KeyPrefix is empty.
const DefaultKeyPrefix = "idemgate:"

// DefaultDialTimeout is Options.DialTimeout when unset.
const DefaultDialTimeout = 2 * time.Second

// DefaultConnTimeout is Options.ConnTimeout when unset.
const DefaultConnTimeout = 3 * time.Second

// Options configures New.
type Options struct {
	// Addrs are "host:port" of the servers: any node(s) of a cluster (the
	// client detects Cluster mode itself), the standalone server, or the
	// sentinels when SentinelMaster is set.
	Addrs []string
	// Username and Password authenticate to the data servers (AUTH / ACL).
	Username string
	Password string
	// TLS, when not nil, makes every connection (sentinels included) use TLS.
	TLS *tls.Config
	// KeyPrefix starts every key and the events channel; default
	// DefaultKeyPrefix ("idemgate:").
	KeyPrefix string
	// SentinelMaster, when set, is the master name to ask the sentinels in
	// Addrs for (Sentinel mode).
	SentinelMaster string
	// SentinelUsername and SentinelPassword authenticate to the sentinels.
	SentinelUsername string
	SentinelPassword string
	// DialTimeout bounds one connection attempt; default DefaultDialTimeout.
	DialTimeout time.Duration
	// ConnTimeout is how long a connection waits for any answer before it is
	// considered dead and closed (valkey-go ConnWriteTimeout); default
	// DefaultConnTimeout. Callers bound each call with their ctx as well.
	ConnTimeout time.Duration
	// Logger receives subscription losses and re-subscriptions; nil
	// discards them.
	Logger *slog.Logger
	// OnDisruption, when set, is called from a subscription goroutine (it
	// must not block; in Cluster mode there is one per primary, which may
	// call it concurrently) each time an events subscription is lost or
	// re-established after a reconnection: the server may have been
	// unreachable, even for a process that sent no command meanwhile. The proxy uses it to hold lease takeovers back
	// after an outage (proxy.Proxy.NoteStoreFailure).
	OnDisruption func()
	// Acks, when on, makes every claim, lease extension and completion wait
	// for replica (and optionally AOF) acknowledgements; see Acks.
	Acks Acks
	// OnAck, when set, is called after every write whose acknowledgement
	// was asked for (Acks on), with the operation ("claim", "extend",
	// "complete"), the round trip of the script and its WAIT together, and
	// whether the acknowledgement came in time. It must not block. main
	// wires it to metrics.Metrics.StoreAck.
	OnAck func(op string, took time.Duration, acknowledged bool)
	// CacheBytes bounds the replay cache (store.ReplayCache;
	// docs/performance.md, "Replay cache"), in bytes; 0 (the zero value) turns
	// it off, negative is an error. It is split: six eighths are valkey-go's
	// client-side cache, divided among the connections to one server
	// (CacheSizeEachConn), so the responses cached from one standalone or
	// Sentinel primary stay within it (in Cluster, within it per node); one
	// eighth bounds the set of record keys seen completed (about 128 bytes a
	// key), and one eighth the records decoded from the cache, kept so that a
	// replay does not decode the same reply again. The sizes are estimates of
	// the entries, not heap measures.
	CacheBytes int64
	// MaxFlushDelay is how long, at most, a connection's writer pauses
	// after each write to the server while other commands are in flight
	// on it (valkey-go's ClientOption.MaxFlushDelay): the commands sent
	// meanwhile leave together in the next write, so under concurrent
	// load both this process and Valkey make fewer read and write system
	// calls per command (docs/performance.md, "Pipeline flush delay").
	// A command sent alone, with nothing else in flight, is written at
	// once. The cost is up to this much latency per store round trip
	// under load (two per fresh key), more on an otherwise idle process,
	// whose timers round the pause up. 0 (the zero value, and idemgate's
	// default) writes at once; negative is an error.
	MaxFlushDelay time.Duration
	// Connections is how many pipelined connections carry the commands
	// of this store to each Valkey server (valkey-go's
	// ClientOption.PipelineMultiplex, as a count): a power of two from 1
	// to MaxConnections; 0 (the zero value) is DefaultConnections. Fewer
	// connections gather the commands of concurrent requests into fewer
	// writes and reads, on both sides (docs/performance.md, "Connections
	// per server"). The events subscription shares them (RESP3);
	// acknowledgements' WAIT and WAITAOF take connections of their own.
	Connections int
	// Layout is the layout this store writes new records in: Layout3
	// (the default, when 0), Layout4 or Layout5. Every build from this
	// one on reads all three; a build from before reads only the layouts
	// before, so switch to a layout only once every instance sharing the
	// server runs a build that reads it (docs/protocol.md, "Rolling
	// upgrade to layout 4" and "Rolling upgrade to layout 5").
	Layout int
}

// Store is a store.Store on Valkey. It holds one client (a connection pool)
// and one subscription to the events channel (in Cluster mode one on each
// primary), dispatched to in-process watchers by record key.
//
// Layout (byte for byte in docs/protocol.md, "Store records"): one hash per
// identity under KeyPrefix + "{" + hex(SHA-256(identity)) + "}", all times
// in unix milliseconds from the server's TIME, an expiry always set on
// running records, and Complete/Release/Delete/Tombstone PUBLISH the
// record key on KeyPrefix + "events" (a completion of layout 5 only when
// a waiter marked the record: Watch). It keeps the resource index and tombstones: resource
// indexes are sorted sets under KeyPrefix + "index:{" + hex digest + "}"
// (IndexKey) and tombstones are records in state "gone".
type Store struct {
	// calls counts the Claim and Complete calls running, whose writes
	// yieldingConn gathers.
	calls        *callCount
	client       valkey.Client
	prefix       string
	channel      string
	log          *slog.Logger
	onDisruption func()

	claim, complete, release, extend, del, get *valkey.Lua
	index, tomb                                *valkey.Lua
	completeV4, completeV5, mark               *valkey.Lua

	// layout is Options.Layout; held the claims answered Claimed, kept for
	// the completed records of layouts 4 and 5 (heldClaim).
	layout int
	held   heldClaims
	// clock bounds the server's clock for fresh claims of layouts 4 and
	// 5; nil in Cluster mode (each shard has its own clock), where every
	// fresh claim asks PEXPIRETIME.
	clock *serverClock

	acks  Acks
	onAck func(op string, took time.Duration, acknowledged bool)
	// The scripts that run with an acknowledgement, sent by hand (EVALSHA,
	// then EVAL after NOSCRIPT) in one pipeline with WAIT.
	claimSrc, completeSrc, extendSrc, complete4Src, complete5Src script
	// getSrc is get.lua, sent with an acknowledgement by Get (acks on).
	getSrc script

	watchers watch.Set[string] // by record key

	// codec compresses stored bodies and decompresses them on replay.
	codec *layout.BodyCodec

	// seen is nil when the replay cache is off (Options.CacheBytes 0).
	seen     *seen
	cacheTTL time.Duration

	stopSub   context.CancelFunc
	subDone   chan struct{}
	closeOnce sync.Once
}

var (
	_ store.Store = (*Store)(nil)
)

// New connects to Valkey, subscribes to the events channel and returns the
// store once the subscription is confirmed (in Cluster mode, on every
// primary). It returns an error wrapping
// store.ErrUnavailable when no server can be reached or ctx ends first.
func New(ctx context.Context, opts Options) (*Store, error) {
	if len(opts.Addrs) == 0 {
		return nil, errors.New("valkey store: Options.Addrs is empty")
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = DefaultKeyPrefix
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.ConnTimeout <= 0 {
		opts.ConnTimeout = DefaultConnTimeout
	}
	if opts.Acks.Replicas < 0 {
		return nil, fmt.Errorf("valkey store: Options.Acks.Replicas %d must be >= 0", opts.Acks.Replicas)
	}
	if opts.CacheBytes < 0 {
		return nil, fmt.Errorf("valkey store: Options.CacheBytes %d must be >= 0 (0 = no replay cache)", opts.CacheBytes)
	}
	if opts.MaxFlushDelay < 0 {
		return nil, fmt.Errorf("valkey store: Options.MaxFlushDelay %v must be >= 0 (0 writes at once)", opts.MaxFlushDelay)
	}
	if opts.Connections == 0 {
		opts.Connections = DefaultConnections
	}
	if !ValidConnections(opts.Connections) {
		return nil, fmt.Errorf("valkey store: Options.Connections %d must be a power of two from 1 to %d", opts.Connections, MaxConnections)
	}
	if opts.Layout == 0 {
		opts.Layout = Layout3
	}
	if opts.Layout != Layout3 && opts.Layout != Layout4 && opts.Layout != Layout5 {
		return nil, fmt.Errorf("valkey store: Options.Layout %d must be %d, %d or %d", opts.Layout, Layout3, Layout4, Layout5)
	}
	if opts.Acks.On() && opts.Acks.Timeout < time.Millisecond {
		return nil, fmt.Errorf("valkey store: Options.Acks.Timeout %v must be >= 1ms when acks are on", opts.Acks.Timeout)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	co := valkey.ClientOption{
		InitAddress:  opts.Addrs,
		Username:     opts.Username,
		Password:     opts.Password,
		TLSConfig:    opts.TLS,
		DisableCache: true,
		// Manual cancellation of a ctx is only honoured in pipeline mode
		// (valkey-go README, "Context Cancellation").
		AlwaysPipelining:  true,
		ConnWriteTimeout:  opts.ConnTimeout,
		MaxFlushDelay:     opts.MaxFlushDelay,
		ClientName:        "idemgate",
		PipelineMultiplex: pipelineMultiplex(opts.Connections),
	}
	co.Dialer.Timeout = opts.DialTimeout
	// In Cluster mode the events subscriptions follow the primaries
	// valkey-go knows (subscribePrimaries); without a periodic scan it
	// learns of a promoted replica only when a command of this process is
	// redirected to it, and the watchers of that shard's records would
	// wait for that.
	co.ClusterOption.ShardsRefreshInterval = topologyRefresh
	// Only layout 4 and 5 claims use the clock.
	var clock *serverClock
	if opts.Layout != Layout3 {
		clock = newServerClock(nil)
	}
	calls := new(callCount)
	co.DialCtxFn = dialNoting(clock, calls)
	var sn *seen
	if opts.CacheBytes > 0 {
		eachConn, seenKeys, decodedBytes := cacheSizes(opts.CacheBytes, opts.Connections)
		sn = newSeen(seenKeys, decodedBytes)
		co.DisableCache = false
		co.CacheSizeEachConn = eachConn
		// Only reads sent with DoCache are tracked (OPTIN, valkey-go's
		// default), and this process's own writes invalidate its cache
		// too (no NOLOOP): a purge through this instance ends its own
		// cached replays.
		co.ClientTrackingOptions = []string{"OPTIN"}
		co.OnInvalidations = sn.onInvalidations
	}
	if opts.SentinelMaster != "" {
		co.Sentinel = valkey.SentinelOption{
			MasterSet: opts.SentinelMaster,
			Username:  opts.SentinelUsername,
			Password:  opts.SentinelPassword,
			TLSConfig: opts.TLS,
		}
		co.Sentinel.Dialer.Timeout = opts.DialTimeout
	}
	codec, err := layout.NewBodyCodec()
	if err != nil {
		return nil, fmt.Errorf("valkey store: %w", err)
	}
	client, err := valkey.NewClient(co)
	if err != nil {
		return nil, unavailable("connect", err)
	}
	s := &Store{
		calls:        calls,
		client:       client,
		prefix:       opts.KeyPrefix,
		channel:      opts.KeyPrefix + "events",
		log:          log,
		onDisruption: opts.OnDisruption,
		// Claim is safe to retry: a claim whose record already holds its
		// token answers Claimed again (and restarts its lease). Extend only
		// moves the lease forward.
		// Complete, Release and Delete would answer false on a retry after
		// a lost reply, so they are never retried blindly.
		claim:    valkey.NewLuaScriptRetryable(claimLua),
		complete: valkey.NewLuaScript(completeLua),
		// complete4.lua, like complete.lua, answers 0 when run again.
		completeV4: valkey.NewLuaScript(complete4Lua),
		completeV5: valkey.NewLuaScript(complete5Lua),
		// mark.lua only sets a mark: safe to run twice.
		mark:    valkey.NewLuaScriptRetryable(markLua),
		layout:  opts.Layout,
		release: valkey.NewLuaScript(releaseLua),
		extend:  valkey.NewLuaScriptRetryable(extendLua),
		del:     valkey.NewLuaScript(deleteLua),
		get:     valkey.NewLuaScriptReadOnly(getLua),
		// Index only adds an entry, and Tombstone only turns a record whose
		// completion is the indexed one: both are safe to run twice.
		index:   valkey.NewLuaScriptRetryable(indexLua),
		tomb:    valkey.NewLuaScriptRetryable(tombstoneLua),
		subDone: make(chan struct{}),
		codec:   codec,

		seen:     sn,
		cacheTTL: DefaultCacheTTL,

		acks:        opts.Acks,
		onAck:       opts.OnAck,
		claimSrc:    newScript(claimLua),
		completeSrc: newScript(completeLua),
		extendSrc:   newScript(extendLua),

		complete4Src: newScript(complete4Lua),
		complete5Src: newScript(complete5Lua),
		getSrc:       newScript(getLua),
	}
	if clock != nil && client.Mode() != valkey.ClientModeCluster {
		s.clock = clock
	}
	if sn != nil && client.Mode() == valkey.ClientModeSentinel {
		sn.servedBy(sentinelPrimary(client))
	}
	if sn != nil && client.Mode() == valkey.ClientModeCluster {
		// In a Cluster the fence PING reaches any node, so a record
		// decoded from a node that stalled and failed over was answered
		// until its connection timed out
		// (TestCacheClusterFailoverFromStalledPrimary): each hit asks
		// valkey-go's cache, which reads the slot's current primary, and
		// a decoded record answers only the reply it came from.
		sn.verify = true
	}
	subCtx, stop := context.WithCancel(context.Background())
	s.stopSub = stop
	ready := make(chan struct{})
	go s.subscribe(subCtx, ready)
	select {
	case <-ready:
		return s, nil
	case <-ctx.Done():
		_ = s.Close()
		return nil, unavailable("subscribe", ctx.Err())
	}
}

// KeyPrefix returns the prefix of every key of this store (Options.KeyPrefix).
func (s *Store) KeyPrefix() string { return s.prefix }

// Channel returns the events channel: KeyPrefix + "events".
func (s *Store) Channel() string { return s.channel }

func unavailable(op string, err error) error {
	return &store.OpError{Store: "valkey", Op: op, Err: err}
}

func (s *Store) exec(ctx context.Context, op string, l *valkey.Lua, id store.Identity, args ...string) (valkey.ValkeyResult, string, error) {
	return s.execKey(ctx, op, l, s.Key(id), args...)
}

// execKey runs l on the one key given (a record key or an index key).
func (s *Store) execKey(ctx context.Context, op string, l *valkey.Lua, key string, args ...string) (valkey.ValkeyResult, string, error) {
	if err := ctx.Err(); err != nil {
		return valkey.ValkeyResult{}, "", unavailable(op, err)
	}
	res := await(ctx, func() valkey.ValkeyResult { return l.Exec(ctx, s.client, []string{key}, args) })
	if err := res.Error(); err != nil && !valkey.IsValkeyNil(err) {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%w)", cerr, err)
		}
		return res, key, unavailable(op, err)
	}
	return res, key, nil
}

// boolOp runs l on the record key given (s.Key of its identity, computed
// once by a caller that needs it again) and reads its 0/1 reply.
func (s *Store) boolOp(ctx context.Context, op string, l *valkey.Lua, key string, wake bool, args ...string) (bool, error) {
	res, _, err := s.execKey(ctx, op, l, key, args...)
	if err != nil {
		return false, err
	}
	n, err := res.AsInt64()
	if err != nil {
		return false, unavailable(op, fmt.Errorf("reply: %w", err))
	}
	if n == 1 && wake {
		// The PUBLISH reaches this process too; waking here saves a round trip.
		s.wake(key)
	}
	return n == 1, nil
}

// intOp runs a writing script (l, or sc with its acknowledgement when acks
// are on) on the record key and reads its integer reply; 1 means it
// wrote and wakes this process's watchers of key, and with acks on counts
// only once acknowledged; 0 (not held) with acks on counts only from a
// primary that could acknowledge (notHeldAcked).
func (s *Store) intOp(ctx context.Context, op string, l *valkey.Lua, sc script, key string, args []string) (int64, error) {
	if s.acks.On() {
		w, err := s.writeAcked(ctx, op, sc, key, args, false)
		if err != nil {
			return 0, err
		}
		n, err := w.res.AsInt64()
		if err != nil {
			return 0, unavailable(op, fmt.Errorf("reply: %w", err))
		}
		if n == 0 {
			return 0, s.notHeldAcked(op, w)
		}
		if n != 1 {
			return n, nil
		}
		// The record changed on the primary whether or not it was
		// acknowledged: waiters re-read it.
		s.wake(key)
		return n, s.acked(op, w)
	}
	res, _, err := s.execKey(ctx, op, l, key, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.AsInt64()
	if err != nil {
		return 0, unavailable(op, fmt.Errorf("reply: %w", err))
	}
	if n == 1 {
		// The PUBLISH reaches this process too; waking here saves a round trip.
		s.wake(key)
	}
	return n, nil
}

// Release implements store.Store with release.lua. Errors wrap
// store.ErrUnavailable.
func (s *Store) Release(ctx context.Context, id store.Identity, token string) (bool, error) {
	ok, err := s.boolOp(ctx, "release", s.release, s.Key(id), true, token, s.channel, tokenPrefix(v4Running, token))
	if err == nil {
		s.held.drop(token)
	}
	return ok, err
}

// Extend implements store.Store with extend.lua. Errors wrap
// store.ErrUnavailable, or store.ErrInvalid for a lease
// store.ValidateLease rejects.
func (s *Store) Extend(ctx context.Context, id store.Identity, token string, lease time.Duration) (bool, error) {
	if err := store.ValidateLease(lease); err != nil {
		return false, err
	}
	args := []string{token, ms(lease), tokenPrefix(v4Running, token)}
	if s.acks.On() {
		return s.boolOpAcked(ctx, "extend", s.extendSrc, s.Key(id), false, args)
	}
	return s.boolOp(ctx, "extend", s.extend, s.Key(id), false, args...)
}

// Delete implements store.Store with delete.lua. Errors wrap
// store.ErrUnavailable.
func (s *Store) Delete(ctx context.Context, id store.Identity) (bool, error) {
	return s.boolOp(ctx, "delete", s.del, s.Key(id), true, s.channel)
}

// Get implements store.Store with get.lua. Errors wrap store.ErrUnavailable.
//
// With acks on, get.lua goes in one pipeline with fenceCmd and the
// acknowledgement, and a completed record is answered only once
// acknowledged (else an error wrapping store.ErrNotAcknowledged): its
// completion may still wait for its own acknowledgement, and a failover
// that lost it would let the operation run again after a client was
// handed its result.
func (s *Store) Get(ctx context.Context, id store.Identity) (*store.Record, error) {
	key := s.Key(id)
	var (
		now int64
		v   []string
		err error
		w   ackedWrite
	)
	if s.acks.On() {
		if w, err = s.writeAcked(ctx, "get", s.getSrc, key, nil, true); err == nil {
			now, v, err = parseGetReply("get", w.res)
		}
	} else {
		now, v, err = s.getReply(ctx, "get", key)
	}
	if err != nil || v == nil {
		return nil, err
	}
	// Built here, not returned by getReply: a map that does not escape
	// costs no allocation (TestHotPathAllocationCeilings, waitReplay).
	f := make(map[string]string, len(v)/2)
	for i := 1; i+1 < len(v); i += 2 {
		f[v[i]] = v[i+1]
	}
	r, err := parseFields(s.codec, now, f)
	if err != nil {
		return nil, unavailable("get", err)
	}
	if r.State == store.Completed {
		if s.acks.On() {
			if err := s.ackedReport("get", w, nil); err != nil {
				return nil, err
			}
		}
		if _, str := f[v4Field]; str {
			s.sawCompleted4(key)
		} else {
			s.sawCompleted(key)
		}
	}
	return r, nil
}

// getFields is getReply with the fields in a map.
func (s *Store) getFields(ctx context.Context, op, key string) (int64, map[string]string, error) {
	now, v, err := s.getReply(ctx, op, key)
	if err != nil || v == nil {
		return now, nil, err
	}
	f := make(map[string]string, len(v)/2)
	for i := 1; i+1 < len(v); i += 2 {
		f[v[i]] = v[i+1]
	}
	return now, f, nil
}

// getReply reads the record at key with get.lua: the server's time and
// get.lua's reply, {now, name, value, ...} (a layout 4 record as v4Field
// and v4Expiry), nil when absent. Errors wrap store.ErrUnavailable, with
// op.
func (s *Store) getReply(ctx context.Context, op, key string) (int64, []string, error) {
	res, _, err := s.execKey(ctx, op, s.get, key)
	if err != nil {
		return 0, nil, err
	}
	return parseGetReply(op, res)
}

// parseGetReply reads get.lua's reply res as getReply answers it.
func parseGetReply(op string, res valkey.ValkeyResult) (int64, []string, error) {
	if valkey.IsValkeyNil(res.Error()) {
		return 0, nil, nil
	}
	v, err := replyStrings(res)
	if err != nil || len(v)%2 != 1 {
		return 0, nil, unavailable(op, fmt.Errorf("reply %d fields: %w", len(v), err))
	}
	now, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil {
		return 0, nil, unavailable(op, fmt.Errorf("bad time %q: %w", v[0], err))
	}
	return now, v, nil
}

// Ping implements store.Store with PING. With Acks.Replicas > 0 it also
// checks that every primary has that many replicas able to acknowledge
// (INFO replication), and otherwise returns an error wrapping
// store.ErrNotAcknowledged that says which primary lacks them: readiness
// then tells why every keyed request fails closed. Errors wrap
// store.ErrUnavailable.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return unavailable("ping", err)
	}
	if err := await(ctx, func() valkey.ValkeyResult { return s.client.Do(ctx, s.client.B().Ping().Build()) }).Error(); err != nil {
		return unavailable("ping", err)
	}
	return s.checkReplicas(ctx)
}

// Close stops the subscription, wakes every watcher and closes the
// connections. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.stopSub()
		s.client.Close()
		<-s.subDone
		s.watchers.Close()
	})
	return nil
}
