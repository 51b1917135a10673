package valkey

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// serverClock bounds the Valkey server's clock from above, so that a fresh
// claim of layout 4 can set its key's expiry itself (SET ... PXAT) and
// know it without asking (PEXPIRETIME): docs/protocol.md, "Layout 4
// (Valkey)", "The expiry of a fresh claim".
//
// A sample is a claim that asked: SET ... PX px executed at the server's
// time E - px (its PEXPIRETIME E, in whole milliseconds, so the server's
// time then was below E - px + 1), at some instant between the moment the
// command was sent and the moment its reply arrived here. So at any later
// instant t, the server's clock reads less than
//
//	E - px + 1 ms + (t - sent) × (1 + maxDrift)
//
// where t - sent is measured on this process's monotonic clock, which no
// wall-clock step on idemgate's host moves. The bound is never below the
// server's clock (the safe direction: an expiry set from it just before a
// claim is sent is never earlier than the server's time at that moment
// plus px, see claim4), and above it by at most the sample's round trip,
// 2 ms (truncation and rounding) and the drift. A sample is used only
// while it is fresh (maxSampleAge), tight (maxSampleRTT), taken on the
// server in use now (no connection dialled or closed since, and no
// command written to another address: a failover, a reconnection to a
// restarted or another server; see dialNoting), and while the monotonic
// and the wall clock agree on the time elapsed since (a suspended host
// stops the monotonic clock, and the bound would then fall behind the
// server); otherwise a claim asks (PX and PEXPIRETIME), which takes a new
// sample.
type serverClock struct {
	// now reads this process's clocks; injected by tests.
	now func() reading
	// gen counts the notes of dialNoting: a sample is only good while it
	// stays the same from before the sample to the claim that uses it.
	gen atomic.Uint64
	// lastDst is the address of the last write (notedConn).
	lastDst atomic.Pointer[string]

	mu sync.Mutex
	s  clockSample
	ok bool
}

// reading is one reading of this process's clocks: mono, the monotonic
// clock (time since the serverClock was made), and wall, the wall clock.
type reading struct {
	mono time.Duration
	wall time.Time
}

// clockSample is one bound of the server's clock: its time was below
// serverMs + 1 ms when the command sent at sent was executed, and at the
// latest when its reply arrived at recv.
type clockSample struct {
	serverMs   int64
	sent, recv reading
	gen        uint64
}

const (
	// maxSampleAge is how long a sample bounds the server's clock: past
	// it, the next claim asks again. Claims at 1,000 per second then ask
	// once per 2,000.
	maxSampleAge = 2 * time.Second
	// maxSampleRTT is the widest sample kept: its round trip is how much
	// later than the server's clock the bound may be, and so how much
	// longer than configured a lease and a retention may be.
	maxSampleRTT = 2 * time.Millisecond
	// maxClockDisagreement is how far the monotonic and the wall clock may
	// disagree on the time elapsed since a sample before it is dropped
	// (NTP slews both alike; a step or a suspension moves one alone).
	maxClockDisagreement = 5 * time.Millisecond
	// maxDriftPPM bounds how much faster the server's clock may run than
	// this process's monotonic clock, in parts per million: NTP slews a
	// clock by at most 500 ppm, and each of the two may be slewed.
	maxDriftPPM = 1000
)

// newServerClock returns a clock without a sample, reading this
// process's clocks with now (nil: the real ones).
func newServerClock(now func() reading) *serverClock {
	if now == nil {
		start := time.Now()
		now = func() reading {
			t := time.Now()
			return reading{mono: t.Sub(start), wall: t.Round(0)}
		}
	}
	return &serverClock{now: now}
}

// dialed notes a connection dialled or closed, or a write to another
// server: every sample taken before it, or in flight across it, is
// dropped (see dialNoting).
func (c *serverClock) dialed() { c.gen.Add(1) }

// begin returns the reading and the generation a sample or a claim
// starts at.
func (c *serverClock) begin() (reading, uint64) {
	return c.now(), c.gen.Load()
}

// observe records a sample: the server's time, in whole ms, when a
// command sent at sent (generation gen) was executed. It is kept only if
// no connection was dialled since sent and its round trip is at most
// maxSampleRTT; it then replaces the sample kept, if any.
func (c *serverClock) observe(serverMs int64, sent reading, gen uint64) {
	recv := c.now()
	if c.gen.Load() != gen || recv.mono-sent.mono > maxSampleRTT || recv.mono < sent.mono {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s, c.ok = clockSample{serverMs: serverMs, sent: sent, recv: recv, gen: gen}, true
}

// upperMs returns a time in unix ms that the server's clock has not
// reached yet, nor reaches before the current instant (see serverClock),
// the reading of this process's clocks it is of (within measures a
// claim's call from it), and the generation it holds for; ok is false
// when no usable sample exists, and the caller must ask the server.
func (c *serverClock) upperMs() (ms int64, at reading, gen uint64, ok bool) {
	c.mu.Lock()
	s, have := c.s, c.ok
	c.mu.Unlock()
	now, g := c.begin()
	if !have || s.gen != g {
		return 0, now, 0, false
	}
	ms, gen, ok = s.upperAt(now)
	return ms, now, gen, ok
}

// upperAt is upperMs at reading now.
func (s clockSample) upperAt(now reading) (ms int64, gen uint64, ok bool) {
	mono := now.mono - s.sent.mono
	wall := now.wall.Sub(s.sent.wall)
	if mono < 0 || mono-(s.recv.mono-s.sent.mono) > maxSampleAge || wall-mono > maxClockDisagreement || mono-wall > maxClockDisagreement {
		return 0, 0, false
	}
	elapsed := max(mono, wall)
	elapsed += elapsed * maxDriftPPM / 1_000_000
	// Rounded up to the millisecond: the expiry is set in whole ms.
	return s.serverMs + 1 + int64((elapsed+time.Millisecond-1)/time.Millisecond), s.gen, true
}

// boundedCall is the longest a fresh claim with lease that set its
// expiry from a bound may take, from the moment it read the bound to its
// reply: a tenth of the lease, and never under maxSampleRTT. The server
// may have run the SET that much later than the bound is of (a server
// busy or pausing its writes, a process stopped before the SET left), and
// the lease is then short by up to that much (and the drift) from the
// moment the server ran it: nine tenths of it remain, and the holder's
// first Extend, a third of a lease after the answer (the engine's
// heartbeat), comes well before they end. A slower claim repeats itself
// with claim.lua, by the server's TIME (claim4). Not a fixed few
// milliseconds: on a saturated machine most answers take longer than
// that, and each repeat costs a round trip and a script.
func boundedCall(lease time.Duration) time.Duration {
	return max(maxSampleRTT, lease/10)
}

// within reports whether at most limit has passed since at, a reading of
// c.now, by both this process's monotonic and its wall clock (a stopped
// process moves both; a suspended host only the wall clock).
func (c *serverClock) within(at reading, limit time.Duration) bool {
	now := c.now()
	return max(now.mono-at.mono, now.wall.Sub(at.wall)) <= limit
}

// same reports whether no connection was dialled since generation gen:
// a claim whose command may have gone to another server than the sample's
// (a failover during the call) must not trust the expiry it set.
func (c *serverClock) same(gen uint64) bool { return c.gen.Load() == gen }

// dialNoting returns a valkey-go DialCtxFn that dials as valkey-go does by
// default (TLS when cfg is set), gathers writes while more than
// gatherAbove of calls run (yieldingConn) and, when c is not nil, notes on
// c each dial (before and after), the close of each connection it
// dialled, and each write to another address than the write before it. A sample in flight across
// any of them is dropped, and so is every sample before them. The last is
// what a Sentinel failover needs: valkey-go dials the new primary, checks
// its role, switches to it and only then closes the old connection, so a
// sample can run on the old primary after the dial, and a claim can go to
// the new one before the close; its first write there drops that sample,
// and the claim, seeing it, repeats itself with claim.lua
// (TestLayout4SentinelFailoverDropsClockBound).
func dialNoting(c *serverClock, calls *callCount) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	return func(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		if c != nil {
			c.dialed()
			defer c.dialed()
		}
		var conn net.Conn
		var err error
		if cfg != nil {
			td := tls.Dialer{NetDialer: d, Config: cfg}
			conn, err = td.DialContext(ctx, "tcp", dst)
		} else {
			conn, err = d.DialContext(ctx, "tcp", dst)
		}
		if err != nil {
			return nil, err
		}
		conn = yieldingConn{Conn: conn, calls: calls}
		if c == nil {
			return conn, nil
		}
		return &notedConn{Conn: conn, c: c, dst: dst}, nil
	}
}

// notedConn is a connection whose close, and whose writes after writes to
// another address, are noted on c (see dialNoting).
type notedConn struct {
	net.Conn
	c   *serverClock
	dst string
}

// Write notes a write to another address than the last write's, then
// writes: before the bytes leave, so that a command's reply always comes
// after the note.
func (n *notedConn) Write(b []byte) (int, error) {
	if last := n.c.lastDst.Load(); last == nil || *last != n.dst {
		n.c.lastDst.Store(&n.dst)
		n.c.dialed()
	}
	return n.Conn.Write(b)
}

// Close notes the close, then closes the connection.
func (n *notedConn) Close() error {
	n.c.dialed()
	return n.Conn.Close()
}
