// Package valkey is the store.Store shared by idemgate instances, kept in Valkey (standalone, Sentinel or Cluster) with one atomic Lua script per operation.
package valkey

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/watch"
)

// DefaultKeyPrefix is the KeyPrefix used when Options.KeyPrefix is empty.
const DefaultKeyPrefix = "idemgate:"

// DefaultDialTimeout is Options.DialTimeout when unset.
const DefaultDialTimeout = 2 * time.Second

// DefaultConnTimeout is Options.ConnTimeout when unset.
const DefaultConnTimeout = 3 * time.Second

// maxResubscribeDelay caps the backoff between subscription attempts.
const maxResubscribeDelay = time.Second

// Every script starts with a shebang declaring its flags (#!lua, or
// #!lua flags=no-writes for get.lua), so a Valkey out of memory refuses a
// script that may write before it runs (docs/protocol.md, "Scripts").
var (
	//go:embed scripts/claim.lua
	claimLua string
	//go:embed scripts/complete.lua
	completeLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/extend.lua
	extendLua string
	//go:embed scripts/delete.lua
	deleteLua string
	//go:embed scripts/get.lua
	getLua string
)

// Scripts returns the Lua source of every script by file name (claim.lua,
// complete.lua, ...), as sent to the server; for docs and tests.
func Scripts() map[string]string {
	return map[string]string{
		"claim.lua": claimLua, "complete.lua": completeLua, "release.lua": releaseLua,
		"extend.lua": extendLua, "delete.lua": deleteLua, "get.lua": getLua,
	}
}

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
	// OnDisruption, when set, is called from the subscription goroutine
	// (it must not block) each time the events subscription is lost or
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
}

// Acks asks the primary to confirm that a write reached its replicas
// before the write counts: WAIT Replicas Timeout (or WAITAOF 1 Replicas
// Timeout with AOFLocal), sent right after the script, in one pipeline on
// the same dedicated connection, because WAIT counts the acknowledgements
// of its own connection's writes only. The zero value is off.
type Acks struct {
	// Replicas is how many replicas must acknowledge each claim, extension
	// and completion; 0 asks none (acks off unless AOFLocal).
	Replicas int
	// AOFLocal also requires the write to be fsynced to the primary's
	// append-only file (WAITAOF 1 Replicas Timeout); WAITAOF then counts
	// only the replicas that fsynced it to their own AOF. Primary and
	// replicas must run with appendonly yes, else every write fails closed.
	AOFLocal bool
	// Timeout is the longest the primary waits for the acknowledgements;
	// at least 1 ms when acks are on. A write not acknowledged by then
	// fails with store.ErrNotAcknowledged.
	Timeout time.Duration
}

// On reports whether any acknowledgement is asked for.
func (a Acks) On() bool { return a.Replicas > 0 || a.AOFLocal }

// Store is a store.Store on Valkey. It holds one client (a connection pool)
// and one subscription to the events channel, dispatched to in-process
// watchers by record key.
//
// Layout (byte for byte in docs/protocol.md, "Store records"): one hash per
// identity under KeyPrefix + "{" + hex(SHA-256(identity)) + "}", all times
// in unix milliseconds from the server's TIME, an expiry always set on
// running records, and Complete/Release/Delete PUBLISH the record key on
// KeyPrefix + "events".
type Store struct {
	client       valkey.Client
	prefix       string
	channel      string
	log          *slog.Logger
	onDisruption func()

	claim, complete, release, extend, del, get *valkey.Lua

	acks  Acks
	onAck func(op string, took time.Duration, acknowledged bool)
	// The scripts that run with an acknowledgement, sent by hand (EVALSHA,
	// then EVAL after NOSCRIPT) in one pipeline with WAIT.
	claimSrc, completeSrc, extendSrc script

	watchers watch.Set[string] // by record key

	stopSub   context.CancelFunc
	subDone   chan struct{}
	closeOnce sync.Once
}

var _ store.Store = (*Store)(nil)

// New connects to Valkey, subscribes to the events channel and returns the
// store once the subscription is confirmed. It returns an error wrapping
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
		AlwaysPipelining: true,
		ConnWriteTimeout: opts.ConnTimeout,
		ClientName:       "idemgate",
	}
	co.Dialer.Timeout = opts.DialTimeout
	if opts.SentinelMaster != "" {
		co.Sentinel = valkey.SentinelOption{
			MasterSet: opts.SentinelMaster,
			Username:  opts.SentinelUsername,
			Password:  opts.SentinelPassword,
			TLSConfig: opts.TLS,
		}
		co.Sentinel.Dialer.Timeout = opts.DialTimeout
	}
	client, err := valkey.NewClient(co)
	if err != nil {
		return nil, unavailable("connect", err)
	}
	s := &Store{
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
		release:  valkey.NewLuaScript(releaseLua),
		extend:   valkey.NewLuaScriptRetryable(extendLua),
		del:      valkey.NewLuaScript(deleteLua),
		get:      valkey.NewLuaScriptReadOnly(getLua),
		subDone:  make(chan struct{}),

		acks:        opts.Acks,
		onAck:       opts.OnAck,
		claimSrc:    newScript(claimLua),
		completeSrc: newScript(completeLua),
		extendSrc:   newScript(extendLua),
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

// Key returns the record key of id under prefix: prefix + "{" + lowercase
// hex SHA-256 of IdentityBytes(id) + "}". The braces make the whole digest
// the Cluster hash tag.
func Key(prefix string, id store.Identity) string {
	sum := sha256.Sum256(IdentityBytes(id))
	return prefix + "{" + hex.EncodeToString(sum[:]) + "}"
}

// IdentityBytes is the unambiguous encoding of id that Key hashes: for
// Owner, Scope and Key in that order, the field's length in bytes as an
// 8-byte big-endian unsigned integer followed by the field's bytes.
func IdentityBytes(id store.Identity) []byte {
	b := make([]byte, 0, 24+len(id.Owner)+len(id.Scope)+len(id.Key))
	for _, f := range []string{id.Owner, id.Scope, id.Key} {
		b = binary.BigEndian.AppendUint64(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

// Key returns the record key of id in this store (see the package func Key).
func (s *Store) Key(id store.Identity) string { return Key(s.prefix, id) }

// KeyPrefix returns the prefix of every key of this store (Options.KeyPrefix).
func (s *Store) KeyPrefix() string { return s.prefix }

// Channel returns the events channel: KeyPrefix + "events".
func (s *Store) Channel() string { return s.channel }

func unavailable(op string, err error) error {
	return fmt.Errorf("valkey store: %s: %w: %w", op, store.ErrUnavailable, err)
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func msTime(v string) (time.Time, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("bad time %q: %w", v, err)
	}
	if n == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(n), nil
}

func (s *Store) exec(ctx context.Context, op string, l *valkey.Lua, id store.Identity, args ...string) (valkey.ValkeyResult, string, error) {
	if err := ctx.Err(); err != nil {
		return valkey.ValkeyResult{}, "", unavailable(op, err)
	}
	key := s.Key(id)
	res := await(ctx, func() valkey.ValkeyResult { return l.Exec(ctx, s.client, []string{key}, args) })
	if err := res.Error(); err != nil && !valkey.IsValkeyNil(err) {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%w)", cerr, err)
		}
		return res, key, unavailable(op, err)
	}
	return res, key, nil
}

// await runs call and returns its result, or ctx's error as soon as ctx is
// done: valkey-go honours deadlines but may wait out a reconnect (up to
// DialTimeout) before noticing a manual cancel. An abandoned call still ends
// within DialTimeout + ConnTimeout, and its outcome is unknown to the caller,
// which fails closed.
func await(ctx context.Context, call func() valkey.ValkeyResult) valkey.ValkeyResult {
	if ctx.Done() == nil {
		return call()
	}
	done := make(chan valkey.ValkeyResult, 1)
	go func() { done <- call() }()
	select {
	case res := <-done:
		return res
	case <-ctx.Done():
		return valkey.NewErrorResult(ctx.Err())
	}
}

// Claim implements store.Store with claim.lua. Errors wrap
// store.ErrUnavailable; an empty token, a lease under 1ms or a negative
// retention is rejected with an error that does not.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	// An empty token would let two claimers both hold the record (a claim
	// finding its own token answers Claimed); a sub-millisecond lease would
	// end the moment it starts.
	if p.Token == "" {
		return store.ClaimResult{}, errors.New("valkey store: claim: empty token")
	}
	if p.Lease < time.Millisecond {
		return store.ClaimResult{}, fmt.Errorf("valkey store: claim: lease %v must be >= 1ms", p.Lease)
	}
	if p.Retention < 0 {
		return store.ClaimResult{}, fmt.Errorf("valkey store: claim: negative retention %v", p.Retention)
	}
	noTakeover := "0"
	if p.NoTakeover {
		noTakeover = "1"
	}
	args := []string{p.Identity.Owner, p.Identity.Scope, p.Identity.Key, p.Fingerprint, p.Token,
		ms(p.Lease), ms(p.Retention), noTakeover, p.Recipe}
	if s.acks.On() {
		w, err := s.writeAcked(ctx, "claim", s.claimSrc, p.Identity, args)
		if err != nil {
			return store.ClaimResult{}, err
		}
		out, err := parseClaim(w.res)
		if err != nil {
			return store.ClaimResult{}, unavailable("claim", err)
		}
		// Only a claim wrote the record; any other answer reads what is
		// there and needs no acknowledgement (a replay reads a completion
		// whose own writer waits for its acknowledgement).
		if out.State == store.Claimed {
			if err := s.acked("claim", w); err != nil {
				return store.ClaimResult{}, err
			}
		}
		return out, nil
	}
	res, _, err := s.exec(ctx, "claim", s.claim, p.Identity, args...)
	if err != nil {
		return store.ClaimResult{}, err
	}
	out, err := parseClaim(res)
	if err != nil {
		return store.ClaimResult{}, unavailable("claim", err)
	}
	return out, nil
}

func replyStrings(res valkey.ValkeyResult) ([]string, error) {
	arr, err := res.ToArray()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(arr))
	for i := range arr {
		if arr[i].IsNil() {
			continue
		}
		if out[i], err = arr[i].ToString(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func parseClaim(res valkey.ValkeyResult) (store.ClaimResult, error) {
	v, err := replyStrings(res)
	if err != nil {
		return store.ClaimResult{}, fmt.Errorf("claim reply: %w", err)
	}
	// Built only on failure: formatting a completed reply quotes the whole
	// stored response, which cost more than the rest of Claim.
	bad := func() error { return fmt.Errorf("claim reply %q: unexpected shape", v) }
	// The recipe is last in every reply but the completed one (whose
	// trailers follow it); a layout 1 record has none (nil).
	if len(v) < 4 {
		return store.ClaimResult{}, bad()
	}
	recipe := v[len(v)-1]
	switch v[0] {
	case "claimed", "running", "abandoned":
		lease, err := msTime(v[2])
		if err != nil {
			return store.ClaimResult{}, err
		}
		out := store.ClaimResult{Fingerprint: v[1], Recipe: recipe, LeaseEnd: lease}
		switch v[0] {
		case "claimed":
			if len(v) != 5 {
				return store.ClaimResult{}, bad()
			}
			out.State, out.Takeover = store.Claimed, v[3] == "1"
		case "running":
			if len(v) != 4 {
				return store.ClaimResult{}, bad()
			}
			out.State = store.Running
		default:
			if len(v) != 4 {
				return store.ClaimResult{}, bad()
			}
			out.State = store.Abandoned
		}
		return out, nil
	case "completed":
		if len(v) != 9 {
			return store.ClaimResult{}, bad()
		}
		resp, err := decodeResponse(v[2], v[3], v[4], v[5], v[6], v[8])
		if err != nil {
			return store.ClaimResult{}, err
		}
		return store.ClaimResult{State: store.Completed, Fingerprint: v[1], Recipe: v[7], Response: resp}, nil
	}
	return store.ClaimResult{}, bad()
}

func (s *Store) boolOp(ctx context.Context, op string, l *valkey.Lua, id store.Identity, wake bool, args ...string) (bool, error) {
	res, key, err := s.exec(ctx, op, l, id, args...)
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

// Complete implements store.Store with complete.lua. Errors wrap
// store.ErrUnavailable; a Status outside 100..599 is rejected.
func (s *Store) Complete(ctx context.Context, id store.Identity, token string, resp store.Response) (bool, error) {
	if resp.Status < 100 || resp.Status > 599 {
		return false, fmt.Errorf("valkey store: complete: status %d outside 100..599", resp.Status)
	}
	omitted := "0"
	if resp.Omitted {
		omitted = "1"
	}
	args := []string{token, strconv.Itoa(resp.Status), string(EncodeHeader(resp.Header)), string(resp.Body), omitted, s.channel}
	// The trailers follow the re-confirm flag (ARGV[8]); "" writes no
	// "tr" field, so records without trailers keep their layout.
	trailer := string(EncodeHeader(resp.Trailer))
	if s.acks.On() {
		// "1": a repeat by the completing token re-confirms the record
		// (store contract, rule 3), so a completion that was not
		// acknowledged can be retried and its WAIT then means something.
		return s.boolOpAcked(ctx, "complete", s.completeSrc, id, true, append(args, "1", trailer))
	}
	return s.boolOp(ctx, "complete", s.complete, id, true, append(args, "0", trailer)...)
}

// Release implements store.Store with release.lua. Errors wrap
// store.ErrUnavailable.
func (s *Store) Release(ctx context.Context, id store.Identity, token string) (bool, error) {
	return s.boolOp(ctx, "release", s.release, id, true, token, s.channel)
}

// Extend implements store.Store with extend.lua. Errors wrap
// store.ErrUnavailable; a lease under 1ms is rejected.
func (s *Store) Extend(ctx context.Context, id store.Identity, token string, lease time.Duration) (bool, error) {
	if lease < time.Millisecond {
		return false, fmt.Errorf("valkey store: extend: lease %v must be >= 1ms", lease)
	}
	if s.acks.On() {
		return s.boolOpAcked(ctx, "extend", s.extendSrc, id, false, []string{token, ms(lease)})
	}
	return s.boolOp(ctx, "extend", s.extend, id, false, token, ms(lease))
}

// Delete implements store.Store with delete.lua. Errors wrap
// store.ErrUnavailable.
func (s *Store) Delete(ctx context.Context, id store.Identity) (bool, error) {
	return s.boolOp(ctx, "delete", s.del, id, true, s.channel)
}

// Get implements store.Store with get.lua. Errors wrap store.ErrUnavailable.
func (s *Store) Get(ctx context.Context, id store.Identity) (*store.Record, error) {
	res, _, err := s.exec(ctx, "get", s.get, id)
	if err != nil {
		return nil, err
	}
	if valkey.IsValkeyNil(res.Error()) {
		return nil, nil
	}
	v, err := replyStrings(res)
	if err != nil || len(v)%2 != 1 {
		return nil, unavailable("get", fmt.Errorf("reply %d fields: %w", len(v), err))
	}
	r, err := parseRecord(v)
	if err != nil {
		return nil, unavailable("get", err)
	}
	return r, nil
}

func parseRecord(v []string) (*store.Record, error) {
	now, err := msTime(v[0])
	if err != nil {
		return nil, err
	}
	f := make(map[string]string, len(v)/2)
	for i := 1; i+1 < len(v); i += 2 {
		f[v[i]] = v[i+1]
	}
	r := &store.Record{
		Identity:    store.Identity{Owner: f["o"], Scope: f["r"], Key: f["k"]},
		Fingerprint: f["f"],
		Recipe:      f["fr"],
	}
	if r.CreatedAt, err = msTime(f["c"]); err != nil {
		return nil, err
	}
	if r.RetentionEnd, err = msTime(f["x"]); err != nil {
		return nil, err
	}
	switch f["s"] {
	case "completed":
		r.State = store.Completed
		if r.Response, err = decodeResponse(f["st"], f["h"], f["b"], f["om"], f["sa"], f["tr"]); err != nil {
			return nil, err
		}
	case "running":
		r.Token = f["t"]
		if r.LeaseEnd, err = msTime(f["l"]); err != nil {
			return nil, err
		}
		r.State = store.Running
		if !r.LeaseEnd.After(now) {
			r.State = store.Abandoned
		}
	default:
		return nil, fmt.Errorf("record state %q", f["s"])
	}
	return r, nil
}

func decodeResponse(status, header, body, omitted, storedAt, trailer string) (*store.Response, error) {
	code, err := strconv.Atoi(status)
	if err != nil {
		return nil, fmt.Errorf("bad status %q: %w", status, err)
	}
	h, err := DecodeHeader([]byte(header))
	if err != nil {
		return nil, err
	}
	at, err := msTime(storedAt)
	if err != nil {
		return nil, err
	}
	resp := &store.Response{Status: code, Header: h, Body: []byte(body), Omitted: omitted == "1", StoredAt: at}
	if trailer != "" {
		if resp.Trailer, err = DecodeHeader([]byte(trailer)); err != nil {
			return nil, fmt.Errorf("trailers: %w", err)
		}
	}
	return resp, nil
}

// EncodeHeader is the unambiguous encoding of h stored in the record's "h"
// field: for each header name in byte order, for each of its values in
// order, the name's length as a 4-byte big-endian unsigned integer, the
// name, the value's length likewise, the value. A nil or empty h encodes to
// no bytes. Names are kept exactly as in the map (not canonicalized).
func EncodeHeader(h http.Header) []byte {
	names := make([]string, 0, len(h))
	size := 0
	for name, vals := range h {
		names = append(names, name)
		for _, v := range vals {
			size += 8 + len(name) + len(v)
		}
	}
	slices.Sort(names)
	b := make([]byte, 0, size)
	for _, name := range names {
		for _, v := range h[name] {
			b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
			b = append(b, name...)
			b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

// DecodeHeader reverses EncodeHeader; no bytes decode to a nil header. It
// returns an error for truncated input.
func DecodeHeader(b []byte) (http.Header, error) {
	if len(b) == 0 {
		return nil, nil
	}
	h := http.Header{}
	next := func() (string, error) {
		if len(b) < 4 {
			return "", errors.New("header encoding truncated")
		}
		n := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(len(b)) < uint64(n) {
			return "", errors.New("header encoding truncated")
		}
		s := string(b[:n])
		b = b[n:]
		return s, nil
	}
	for len(b) > 0 {
		name, err := next()
		if err != nil {
			return nil, err
		}
		v, err := next()
		if err != nil {
			return nil, err
		}
		h[name] = append(h[name], v)
	}
	return h, nil
}

// Watch implements store.Store: the watcher is woken by the PUBLISH of
// Complete, Release and Delete from any process, and spuriously whenever the
// subscription is lost or re-established.
func (s *Store) Watch(id store.Identity) (<-chan struct{}, func()) {
	return s.watchers.Watch(s.Key(id))
}

func (s *Store) wake(key string) { s.watchers.Wake(key) }

func (s *Store) wakeAll() { s.watchers.WakeAll() }

// subscribe keeps one SUBSCRIBE to the events channel until ctx ends,
// re-subscribing with backoff after errors. Every (re)subscription wakes all
// watchers, since notifications may have been missed meanwhile.
func (s *Store) subscribe(ctx context.Context, ready chan struct{}) {
	defer close(s.subDone)
	var readyOnce sync.Once
	delay := 50 * time.Millisecond
	for {
		var subscribed atomic.Bool
		hctx := valkey.WithOnSubscriptionHook(ctx, func(sub valkey.PubSubSubscription) {
			if sub.Kind != "subscribe" || sub.Channel != s.channel {
				return
			}
			// valkey-go re-subscribes by itself after a reconnection, so a
			// second confirmation in one Receive is the other sign of an
			// outage.
			if subscribed.Swap(true) && s.onDisruption != nil {
				s.onDisruption()
			}
			s.wakeAll()
			readyOnce.Do(func() { close(ready) })
		})
		err := s.client.Receive(hctx, s.client.B().Subscribe().Channel(s.channel).Build(), func(m valkey.PubSubMessage) {
			s.wake(m.Message)
		})
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("valkey store: events subscription lost; re-subscribing", "channel", s.channel, "err", err)
		if s.onDisruption != nil {
			s.onDisruption()
		}
		s.wakeAll()
		if subscribed.Load() {
			delay = 50 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, maxResubscribeDelay)
	}
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
