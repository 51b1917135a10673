package valkey

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/valkey-io/valkey-go"
)

// Replay cache (docs/performance.md, "Replay cache"): a completed record this
// instance has seen is read with valkey-go's DoCache, server-assisted
// client-side caching. Each connection runs CLIENT TRACKING ON OPTIN, and
// DoCache sends CLIENT CACHING YES with the read, so Valkey remembers which
// connection cached the key and pushes an invalidation on that same connection
// when the key is written, deleted, expires or is evicted (and flushes
// everything on FLUSHALL). A connection that breaks drops its whole cache
// (valkey-go pipe close), so nothing read before an outage outlives it. Claims,
// completions and every other script are not tracked (OPTIN): they never fill
// the cache.
//
// The cache is only consulted for keys in seen, the record keys this
// instance has seen completed (its own Complete, a Claim answered
// Completed, a Get of a completed record): a fresh key goes straight to
// Claim, and a fresh request keeps costing 2 round trips.

// CacheFence bounds how old the last sign of life from Valkey may be when
// the replay cache answers from memory. An invalidation cannot reach a
// process whose link is silent (a partition, a frozen server), and
// valkey-go only closes such a connection, and drops its cache, once its
// keepalive PING times out (about twice Options.ConnTimeout); without a
// fence a peer's purge or tombstone went unnoticed and its record was
// replayed for that long (5 s in e2e TestFaultCacheCutOffPeer). With it, a
// cached replay is served only when Valkey answered this process less
// than CacheFence ago (a PING, or a cached read that missed); otherwise
// CachedReplay PINGs first, at most about once per CacheFence under
// steady load, and a PING that fails makes the caller claim, which fails
// closed. A silent link thus stops cached replays within CacheFence plus
// one PING's timeout. The PING vouches for the server (standalone,
// Sentinel primary); in a Cluster it reaches one node, not necessarily
// the record's. Through Sentinel, a PING or read answered after a switch
// to another primary drops every record seen on the old one
// (seen.servedBy): the PING reaches the new primary, and the old one may
// be the silent link.
const CacheFence = 100 * time.Millisecond

// DefaultCacheTTL is the longest a record stays in the client cache
// without being read again; valkey-go caps it by the key's PTTL, so a
// record with a retention end leaves the cache by that end. It only
// bounds how long an idle entry takes room: coherence comes from the
// invalidations, not from it.
const DefaultCacheTTL = time.Hour

// seenKeyBytes is what one key of the seen set costs, roughly: the key
// string (prefix, 64 hex digits, braces), its map entries and its entry in
// the ring of keys in the order added. cache_bytes
// gives the seen set an eighth of itself at this price per key.
const seenKeyBytes = 144

// cacheShares splits Options.CacheBytes: 6 parts to valkey-go's cache,
// spread over the connections to one server, 1 part to the seen set and 1
// to the records decoded from it (decoded).
const cacheShares = 8

// cacheSharesRaw is valkey-go's part of cacheShares.
const cacheSharesRaw = 6

// decodedOverhead is what a decoded record costs beyond its strings and
// body, roughly: the Record and Response, the header map and its slices.
const decodedOverhead = 512

// decoded is a completed record CachedReplay decoded from a cached read,
// with the end of its retention. Once remembered it answers the record's
// replays by itself, with no read: parsing the layout and decompressing
// the body took 16 % of idemgate's CPU per replay, and valkey-go's
// DoMultiCache with its commands another 11 % (docs/performance.md,
// "Replay cache"). It stays coherent as the client cache itself does:
// Valkey pushes an invalidation when the key is written, deleted, expires
// or is evicted, and seen.onInvalidations drops the key with its decoded
// record; a closed connection or FLUSHALL drops them all (seen.clear); a
// record decoded from a read that an invalidation may have overtaken is
// never remembered (seen.remember's epoch); a switch of Sentinel primary
// drops them all (seen.servedBy). In a Cluster (seen.verify) it answers
// only a hit of valkey-go's cache that returned the very reply it was
// decoded from (from), which saves the decoding but not the lookup. As
// for a read of the client cache, CachedReplay answers it only behind the
// fence (CacheFence) and before its retention end by this process's clock.
type decoded struct {
	rec *store.Record
	// end is the record's retention end, unix ms; 0 for none.
	end  int64
	size int64
	// src is the read rec was decoded from, kept only in a Cluster; its
	// strings are those of valkey-go's cache entry, not copies.
	src cachedRead
}

// from reports whether rd, a hit of valkey-go's cache, is the reply d was
// decoded from. Equal strings that share their bytes compare without
// reading them, as they do while valkey-go keeps its entry.
func (d *decoded) from(rd cachedRead) bool {
	if d.src.present != rd.present || d.src.v != rd.v || d.src.e != rd.e {
		return false
	}
	return maps.Equal(d.src.f, rd.f)
}

// decodedSize estimates what a decoded rec keeps alive beyond valkey-go's
// cache (whose reply strings it shares).
func decodedSize(rec *store.Record) int64 {
	n := int64(decodedOverhead)
	if rec.Response != nil {
		n += int64(len(rec.Response.Body))
		for name, values := range rec.Response.Header {
			n += int64(len(name))
			for _, v := range values {
				n += int64(len(v))
			}
		}
	}
	return n
}

// seenEntry is what seen keeps for a key: its decoded record, once
// CachedReplay decoded one, and whether the record is a string (layouts
// 4 and 5, read with GET and PEXPIRETIME) or a hash (HGETALL). One map
// of both: noting a key costs every fresh key one insert and, once the
// set is full, one delete, in a map too large for the CPU's caches.
type seenEntry struct {
	d   *decoded
	str bool
}

// seen is the bounded set of record keys this instance has seen completed.
// Losing a key costs one round trip later (the next replay of it claims),
// never a wrong answer, so it drops the key added longest ago when full.
type seen struct {
	mu   sync.Mutex
	keys map[string]seenEntry
	// added is a ring of the keys in the order they were added, at most
	// max: a full set drops the key of the oldest entry (if still there),
	// where ranging over the map for a victim cost 1.1-1.6 us per fresh
	// key at the default bound, the iterator walking the emptied slots
	// of a map that only turns over (BenchmarkSeenAddFull). An entry
	// whose key was dropped meanwhile, or dropped and added again, only
	// drops that key a little early: every key in keys has an entry, so
	// keys never holds more than max.
	added []string
	next  int // the oldest entry of added, once it is full
	max   int
	// decodedBytes is what the decoded records in keys take (decodedSize),
	// at most maxDecoded.
	decodedBytes, maxDecoded int64
	// verify makes a decoded record answer only a cache hit that returned
	// the reply it was decoded from (decoded.from): set in a Cluster,
	// where the fence PING reaches any node and so cannot vouch for the
	// node a record was read from (New).
	verify bool
	// flushes counts the nil invalidations: connections closed with their
	// cache, and FLUSHALLs.
	flushes atomic.Int64
	// epoch counts every key dropped (not a key the full set let go of
	// to make room: that one's record did not change) and every clear,
	// under mu: a record decoded from a read is remembered only when no
	// key left the set since before the read (remember), so an
	// invalidation that came between the read and remember never leaves
	// its decoded record to be answered.
	epoch uint64
	// server is the address of the primary a Sentinel client sent to
	// when last asked (servedBy), under mu; "" otherwise.
	server string
	// heard is when (unix ns, taken before the command was sent) the last
	// command that proves the link alive was sent: a fence PING or a
	// cached read that reached the server; 0 before any (see CacheFence).
	heard atomic.Int64
}

// noteHeard records that a command sent at sent (unix ns) was answered.
func (s *seen) noteHeard(sent int64) {
	for {
		cur := s.heard.Load()
		if sent <= cur || s.heard.CompareAndSwap(cur, sent) {
			return
		}
	}
}

func newSeen(max int, maxDecoded int64) *seen {
	return &seen{keys: make(map[string]seenEntry), max: max, maxDecoded: maxDecoded}
}

// add notes key as seen completed in a hash (layouts 1 to 3).
func (s *seen) add(key string) { s.addLayout(key, false) }

// addLayout notes key as seen completed, its record a string (layout 4)
// or a hash.
func (s *seen) addLayout(key string, str bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.keys[key]; ok {
		if e.str != str {
			// Rewritten in the other layout: what was decoded is stale.
			s.epoch++
			s.deleteLocked(key)
		} else {
			return
		}
	}
	if len(s.added) < s.max {
		s.added = append(s.added, key)
	} else {
		s.deleteLocked(s.added[s.next])
		s.added[s.next] = key
		s.next = (s.next + 1) % s.max
	}
	s.keys[key] = seenEntry{str: str}
}

// lookupLayout reports whether key was seen, its decoded record if any,
// and whether key was seen completed as a string
// (layout 4), under one lock: a replay asks both, and the lock is shared
// by every replay on every core.
func (s *seen) lookupLayout(key string) (d *decoded, str, ok bool, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.keys[key]
	return e.d, e.str, ok, s.epoch
}

// remember keeps d as key's decoded record while key is still seen and
// no key left the set since epoch (lookupLayout's, taken before the read
// d was decoded from), forgetting arbitrary other decoded records to stay
// within maxDecoded.
func (s *seen) remember(key string, d *decoded, epoch uint64) {
	if d.size > s.maxDecoded {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.keys[key]
	if !ok || s.epoch != epoch {
		// Dropped meanwhile, or another key was: an invalidation of key
		// handled between the read and now may have dropped key and a
		// claim noted it again since.
		return
	}
	if e.d != nil {
		s.decodedBytes -= e.d.size
		e.d = nil
		s.keys[key] = e
	}
	// An arbitrary victim, as add drops an arbitrary key: this runs once
	// per record and instance (its first cached replay), not per replay.
	for k, o := range s.keys {
		if s.decodedBytes+d.size <= s.maxDecoded {
			break
		}
		if o.d != nil {
			s.decodedBytes -= o.d.size
			o.d = nil
			s.keys[k] = o
		}
	}
	e.d = d
	s.keys[key] = e
	s.decodedBytes += d.size
}

func (s *seen) deleteLocked(key string) {
	if e := s.keys[key]; e.d != nil {
		s.decodedBytes -= e.d.size
	}
	delete(s.keys, key)
}

// drop forgets key: its record was invalidated, or read absent.
func (s *seen) drop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch++
	s.deleteLocked(key)
}

func (s *seen) clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clearLocked()
}

func (s *seen) clearLocked() {
	s.epoch++
	clear(s.keys)
	s.decodedBytes = 0
	clear(s.added)
	s.added, s.next = s.added[:0], 0
}

// servedBy notes addr, the primary a Sentinel client sends to now, and
// clears the set when it is another than the one noted before: the
// records seen and decoded on the old primary are tracked on its
// connection alone, which valkey-go closes, and so drops its cache, only
// once its keepalive times out when that primary stalled, while the fence
// PING reaches the new one (TestCacheSentinelFailoverFromStalledPrimary).
// It reports whether it cleared.
func (s *seen) servedBy(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if addr == s.server {
		return false
	}
	switched := s.server != ""
	s.server = addr
	if switched {
		s.clearLocked()
	}
	return switched
}

// sentinelPrimary returns the address of the primary c, a Sentinel
// client, sends to now.
func sentinelPrimary(c valkey.Client) string {
	for addr := range c.Nodes() {
		return addr
	}
	return ""
}

// heardFrom notes that a command sent at sent (unix ns) was answered, and
// through Sentinel whether the primary changed (seen.servedBy), which it
// reports. A Nodes call per fence PING or missed read, never per hit.
func (s *Store) heardFrom(sent int64) (switched bool) {
	if s.client.Mode() == valkey.ClientModeSentinel {
		switched = s.seen.servedBy(sentinelPrimary(s.client))
	}
	s.seen.noteHeard(sent)
	return switched
}

// onInvalidations is valkey-go's ClientOption.OnInvalidations: it runs on
// a connection's reader goroutine, so it only edits the set. nil means
// everything (a FLUSHALL, or a connection closed with its cache).
func (s *seen) onInvalidations(msgs []valkey.ValkeyMessage) {
	if msgs == nil {
		s.clear()
		s.flushes.Add(1)
		return
	}
	for _, m := range msgs {
		if k, err := m.ToString(); err == nil {
			s.drop(k)
		}
	}
}

// cacheSizes splits cacheBytes (> 0) into valkey-go's CacheSizeEachConn
// for conns connections per server, the seen set's key count and the
// bytes of decoded records.
func cacheSizes(cacheBytes int64, connections int) (eachConn, seenKeys int, decodedBytes int64) {
	conns := int64(connections)
	// Divided before multiplied: any int64 bound is accepted, and
	// cacheBytes*6 overflows from 1.5 EiB up (4 EiB gave 1 byte).
	eachConn = int(max(cacheBytes/cacheShares*cacheSharesRaw/conns, 1))
	seenKeys = int(max(cacheBytes/cacheShares/seenKeyBytes, 1))
	decodedBytes = cacheBytes / cacheShares
	return eachConn, seenKeys, decodedBytes
}

var _ store.ReplayCache = (*Store)(nil)

// CachedReplay implements store.ReplayCache: for a record key this instance
// has seen completed, it reads the record with DoCache (HGETALL, cached
// until Valkey invalidates it or its PTTL runs out). It answers
// (nil, CacheSkipped, nil) when the cache is off (Options.CacheBytes 0) or
// the key was not seen, with no round trip. Only a completed record is
// returned; any other state, or a record whose retention end has passed by
// this process's clock, answers nil so the caller claims (the claim then
// decides by the server's clock). A record this instance decoded from a
// cached read before answers from memory with no read at all while Valkey
// has not invalidated it (decoded). With acks on, a read the client cache
// did not answer is followed by Get, which acknowledges the record: one
// that is not acknowledged answers Get's error (store.ErrNotAcknowledged)
// and the key is forgotten until a claim or Get acknowledges it again.
// Errors wrap store.ErrUnavailable.
func (s *Store) CachedReplay(ctx context.Context, id store.Identity) (*store.Record, store.CacheResult, error) {
	if s.seen == nil {
		return nil, store.CacheSkipped, nil
	}
	key := s.Key(id)
	memo, str, ok, epoch := s.seen.lookupLayout(key)
	if !ok {
		return nil, store.CacheSkipped, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, store.CacheSkipped, unavailable("cached-replay", err)
	}
	// The fence's clock read stands for when the read is sent: no later
	// than the read, so the Valkey answer it notes is never dated late.
	now, switched, err := s.fence(ctx)
	if err != nil {
		return nil, store.CacheSkipped, err
	}
	if switched {
		// memo and str came from the old primary's records.
		return nil, store.CacheSkipped, nil
	}
	if memo != nil && !s.seen.verify {
		return s.answerDecoded(key, id, memo, now)
	}
	sent := now.UnixNano()
	read := func() cachedRead {
		if str {
			return s.readString(ctx, key)
		}
		res := s.client.DoCache(ctx, s.client.B().Hgetall().Key(key).Cache(), s.cacheTTL)
		if err := res.Error(); err != nil {
			return cachedRead{hit: res.IsCacheHit(), err: err}
		}
		f, err := res.AsStrMap()
		if err != nil {
			err = fmt.Errorf("reply: %w", err)
		}
		return cachedRead{f: f, hit: res.IsCacheHit(), err: err}
	}
	var rd cachedRead
	if _, ok := ctx.Deadline(); ok {
		// valkey-go ends a call by its deadline itself (await is for manual
		// cancels, which it may notice only after a reconnect), and a read
		// answered late changes nothing. A hit is answered without I/O, and
		// await's goroutine and channel were a tenth of a cached replay's CPU.
		rd = read()
	} else if rd, ok = awaitCall(ctx, read); !ok {
		rd = cachedRead{err: ctx.Err()}
	}
	result := store.CacheMiss
	if rd.hit {
		result = store.CacheHit
	}
	if rd.err != nil {
		return nil, result, unavailable("cached-replay", rd.err)
	}
	if memo != nil && result == store.CacheHit && memo.from(rd) {
		return s.answerDecoded(key, id, memo, now)
	}
	if result == store.CacheMiss {
		s.heardFrom(sent)
		if s.acks.On() {
			// Read from the server, with no acknowledgement: the record
			// may be a completion still waiting for its own. Get reads it
			// again with one (see Get); the entry this read filled is
			// what the next hits answer, and a change of the record since
			// this read invalidates it. Not acknowledged, the key is
			// forgotten, so that entry is never answered, until a claim or
			// Get acknowledges the record and notes the key again.
			if rec, err := s.Get(ctx, id); err != nil || rec == nil || rec.State != store.Completed {
				s.seen.drop(key)
				return nil, result, err
			}
		}
	}
	if str {
		return s.cachedString(id, key, epoch, rd, result)
	}
	f := rd.f
	if len(f) == 0 {
		// Absent: purged or ended. Valkey invalidates it too; dropping it
		// now spares the next request this read.
		s.seen.drop(key)
		return nil, result, nil
	}
	if v, ok := f[v4Field]; ok && !strings.HasPrefix(v, v4Completed) {
		return nil, result, nil
	} else if !ok && f["s"] != "completed" {
		return nil, result, nil
	}
	x, err := strconv.ParseInt(f["x"], 10, 64)
	if _, ok := f[v4Field]; ok {
		// Layout 4: the key's own expiry, -1 for none.
		x, err = strconv.ParseInt(f[v4Expiry], 10, 64)
		x = max(x, 0)
	}
	if err != nil {
		return nil, result, unavailable("cached-replay", fmt.Errorf("bad retention end %q: %w", f["x"], err))
	}
	// valkey-go ends the entry at the key's PTTL as measured by the
	// server, plus the reply's transit; refusing from this clock as well
	// only ever sends a request to Claim, never serves a replay.
	if x != 0 && x <= time.Now().UnixMilli() {
		return nil, result, nil
	}
	r, err := parseFields(s.codec, 0, f)
	if err != nil {
		return nil, result, unavailable("cached-replay", err)
	}
	if result == store.CacheHit && r.Identity == id {
		// Only a reply the client cache answered is remembered: Valkey
		// tracks its key for this connection, so a change of the record
		// reaches onInvalidations.
		s.seen.remember(key, s.decoded(r, x, rd), epoch)
	}
	if r.Identity != id {
		// A different identity under the same key would be a SHA-256
		// collision; never replay it.
		return nil, result, unavailable("cached-replay", errors.New("the record key holds another identity"))
	}
	return r, result, nil
}

// answerDecoded is CachedReplay's answer from memo, key's decoded record,
// with now the fence's clock read.
func (s *Store) answerDecoded(key string, id store.Identity, memo *decoded, now time.Time) (*store.Record, store.CacheResult, error) {
	if memo.end != 0 && memo.end <= now.UnixMilli() {
		// Ended by this clock: Valkey's invalidation is on its way.
		s.seen.drop(key)
		return nil, store.CacheSkipped, nil
	}
	if memo.rec.Identity != id {
		// A SHA-256 collision (CachedReplay): never replay it.
		return nil, store.CacheHit, unavailable("cached-replay", errors.New("the record key holds another identity"))
	}
	return memo.rec, store.CacheHit, nil
}

// decoded is what CachedReplay remembers of r, decoded from rd with
// retention end x (unix ms, 0 for none): rd itself only where a hit must
// match it (seen.verify).
func (s *Store) decoded(r *store.Record, x int64, rd cachedRead) *decoded {
	d := &decoded{rec: r, end: x, size: decodedSize(r)}
	if s.seen.verify {
		d.src = cachedRead{f: rd.f, v: rd.v, e: rd.e, present: rd.present}
	}
	return d
}

// fence makes sure Valkey answered this process less than CacheFence ago,
// sending a PING when it did not (CacheFence says why). It returns the
// time it read before any PING, for the caller's own read to use, and
// whether the PING found that Sentinel had switched to another primary
// (heardFrom). Errors wrap store.ErrUnavailable.
func (s *Store) fence(ctx context.Context) (time.Time, bool, error) {
	now := time.Now()
	if h := s.seen.heard.Load(); h != 0 && now.Sub(time.Unix(0, h)) < CacheFence {
		return now, false, nil
	}
	err := await(ctx, func() valkey.ValkeyResult {
		return s.client.Do(ctx, s.client.B().Ping().Build())
	}).Error()
	if err != nil {
		return now, false, unavailable("cached-replay", fmt.Errorf("fence PING: %w", ctxWrap(ctx, err)))
	}
	return now, s.heardFrom(now.UnixNano()), nil
}

// sawCompleted notes that the record at key is completed, so its next
// replay asks the cache first.
func (s *Store) sawCompleted(key string) {
	if s.seen != nil {
		s.seen.add(key)
	}
}

// sawCompleted4 is sawCompleted for a record of layout 4 (a string).
func (s *Store) sawCompleted4(key string) {
	if s.seen != nil {
		s.seen.addLayout(key, true)
	}
}

// cachedRead is one read of CachedReplay: the record's fields (empty when
// absent), or for a record of layout 4 its value (absent: false) and
// expiry, whether the client cache answered it, or the error.
type cachedRead struct {
	f       map[string]string
	v       string
	e       int64
	present bool
	hit     bool
	err     error
}

// cachedString is CachedReplay's answer from rd, the read of a record of
// layout 4 (readString), as for a hash but with no map of fields built,
// compared and parsed per replay.
func (s *Store) cachedString(id store.Identity, key string, epoch uint64, rd cachedRead, result store.CacheResult) (*store.Record, store.CacheResult, error) {
	if !rd.present {
		// Absent: purged or ended (CachedReplay).
		s.seen.drop(key)
		return nil, result, nil
	}
	if !strings.HasPrefix(rd.v, v4Completed) {
		return nil, result, nil
	}
	// The key's own expiry, -1 for none; refused from this clock as well
	// (CachedReplay).
	x := max(rd.e, 0)
	if x != 0 && x <= time.Now().UnixMilli() {
		return nil, result, nil
	}
	r, err := parseRecord4(s.codec, 0, rd.v, rd.e)
	if err != nil {
		return nil, result, unavailable("cached-replay", err)
	}
	if result == store.CacheHit && r.Identity == id {
		s.seen.remember(key, s.decoded(r, x, rd), epoch)
	}
	if r.Identity != id {
		// A SHA-256 collision (CachedReplay): never replay it.
		return nil, result, unavailable("cached-replay", errors.New("the record key holds another identity"))
	}
	return r, result, nil
}

// readString reads a record of layout 4 through the client cache: its
// value (GET) and its expiry (PEXPIRETIME), both tracked, so a change of
// the key invalidates both. The fields are {v4Field: record, v4Expiry:
// expiry}, what parseFields reads; an absent key has none.
func (s *Store) readString(ctx context.Context, key string) cachedRead {
	rs := s.client.DoMultiCache(ctx,
		valkey.CT(s.client.B().Get().Key(key).Cache(), s.cacheTTL),
		valkey.CT(s.client.B().Pexpiretime().Key(key).Cache(), s.cacheTTL))
	out := cachedRead{hit: rs[0].IsCacheHit() && rs[1].IsCacheHit()}
	v, err := rs[0].ToString()
	if valkey.IsValkeyNil(err) {
		return out
	}
	if err != nil {
		out.err = err
		return out
	}
	e, err := rs[1].AsInt64()
	if err != nil {
		out.err = fmt.Errorf("PEXPIRETIME: %w", err)
		return out
	}
	if e == -2 {
		return out // gone between the two reads
	}
	out.v, out.e, out.present = v, e, true
	return out
}
