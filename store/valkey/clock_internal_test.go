package valkey

import (
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// fakeClocks are this process's clocks, moved by hand: mono and wall
// advance together unless a test steps one alone.
type fakeClocks struct{ r reading }

func (f *fakeClocks) read() reading { return f.r }

func (f *fakeClocks) advance(d time.Duration) {
	f.r.mono += d
	f.r.wall = f.r.wall.Add(d)
}

func newFakeClock() (*serverClock, *fakeClocks) {
	f := &fakeClocks{r: reading{mono: time.Hour, wall: time.UnixMilli(1_800_000_000_000)}}
	return newServerClock(f.read), f
}

// TestServerClockNeverBelowServer: whatever instant between the send and
// the reply the server ran the sampled SET at, and however its clock is
// offset from this process's, the bound is at or above the server's clock
// at every later instant the sample is used (drift within maxDriftPPM),
// and above it by no more than the sample's round trip, 1 ms of the
// server's truncation, 1 ms of rounding up and the drift allowance.
func TestServerClockNeverBelowServer(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		c, f := newFakeClock()
		// The server's clock in µs at this process's mono 0, and its rate.
		offsetUs := rng.Int64N(1<<40) - 1<<39
		ppm := rng.Int64N(2*maxDriftPPM+1) - maxDriftPPM
		server := func(mono time.Duration) int64 {
			us := mono.Microseconds()
			return offsetUs + us + us*ppm/1_000_000
		}
		rtt := time.Duration(rng.Int64N(int64(maxSampleRTT)))
		exec := time.Duration(rng.Int64N(int64(rtt) + 1))
		sent, gen := c.begin()
		execUs := server(sent.mono + exec)
		f.advance(rtt)
		// SET ... PX px ran at execUs: its PEXPIRETIME less px is that
		// time truncated to the millisecond.
		c.observe(floorDiv(execUs, 1000), sent, gen)
		f.advance(time.Duration(rng.Int64N(int64(maxSampleAge))))
		upper, _, g, ok := c.upperMs()
		if !ok || g != gen {
			t.Fatalf("case %d: no bound from a fresh, tight sample", i)
		}
		nowUs := server(f.r.mono)
		if upper*1000 < nowUs {
			t.Fatalf("case %d: bound %d ms below the server's clock %d µs (rtt %v, exec %v, ppm %d)", i, upper, nowUs, rtt, exec, ppm)
		}
		slack := rtt + 2*time.Millisecond + 2*(maxSampleAge+maxSampleRTT)*maxDriftPPM/1_000_000
		if time.Duration(upper*1000-nowUs)*time.Microsecond > slack {
			t.Fatalf("case %d: bound %d ms above the server's clock %d µs by more than %v", i, upper, nowUs, slack)
		}
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// TestServerClockDropsSamples: a sample too wide, too old, taken across
// a new connection (a failover or a reconnection), or one the wall clock
// no longer agrees with (a host suspended, a wall-clock step) bounds
// nothing, so the claim asks the server.
func TestServerClockDropsSamples(t *testing.T) {
	sample := func(c *serverClock, f *fakeClocks, rtt time.Duration) {
		sent, gen := c.begin()
		f.advance(rtt)
		c.observe(1_000_000, sent, gen)
	}
	cases := []struct {
		name string
		run  func(c *serverClock, f *fakeClocks)
	}{
		{"no sample", func(c *serverClock, f *fakeClocks) {}},
		{"round trip over maxSampleRTT", func(c *serverClock, f *fakeClocks) { sample(c, f, maxSampleRTT+time.Microsecond) }},
		{"older than maxSampleAge", func(c *serverClock, f *fakeClocks) {
			sample(c, f, time.Millisecond)
			f.advance(maxSampleAge + time.Millisecond)
		}},
		{"dialled during the sample", func(c *serverClock, f *fakeClocks) {
			sent, gen := c.begin()
			c.dialed()
			f.advance(time.Millisecond)
			c.observe(1_000_000, sent, gen)
		}},
		{"dialled after the sample", func(c *serverClock, f *fakeClocks) {
			sample(c, f, time.Millisecond)
			c.dialed()
		}},
		{"host suspended (monotonic clock stopped)", func(c *serverClock, f *fakeClocks) {
			sample(c, f, time.Millisecond)
			f.r.wall = f.r.wall.Add(time.Second)
		}},
		{"wall clock stepped back", func(c *serverClock, f *fakeClocks) {
			sample(c, f, time.Millisecond)
			f.advance(100 * time.Millisecond)
			f.r.wall = f.r.wall.Add(-time.Second)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, f := newFakeClock()
			tc.run(c, f)
			if ms, _, _, ok := c.upperMs(); ok {
				t.Fatalf("bound %d ms, want none", ms)
			}
		})
	}
	// And one that is good, for contrast: 1 ms round trip, used 1 s later.
	c, f := newFakeClock()
	sample(c, f, time.Millisecond)
	f.advance(time.Second)
	if ms, _, _, ok := c.upperMs(); !ok || ms != 1_000_000+1+1003 {
		t.Fatalf("bound %d ms (%v), want 1_000_000 + 1 + ceil((1 s + 1 ms) × 1.001) = %d", ms, ok, 1_000_000+1+1003)
	}
	// A connection dialled between the bound and the claim's reply is seen.
	_, _, gen, _ := c.upperMs()
	c.dialed()
	if c.same(gen) {
		t.Fatal("a dial after the bound left its generation current")
	}
}

// TestServerClockDropsOnWriteElsewhere: a write to another address than
// the last write's (valkey-go switched to a new primary) drops the
// sample, and so does a close; writes to the sample's own address keep it.
func TestServerClockDropsOnWriteElsewhere(t *testing.T) {
	c, f := newFakeClock()
	conn := func(dst string) *notedConn {
		a, b := net.Pipe()
		t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
		go func() { _, _ = io.Copy(io.Discard, b) }()
		return &notedConn{Conn: a, c: c, dst: dst}
	}
	old, other, sameAddr := conn("10.0.0.1:6379"), conn("10.0.0.2:6379"), conn("10.0.0.1:6379")
	if _, err := old.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	sent, gen := c.begin()
	f.advance(time.Millisecond)
	c.observe(1_000_000, sent, gen)
	for _, w := range []*notedConn{old, sameAddr, old} {
		if _, err := w.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, _, _, ok := c.upperMs(); !ok {
			t.Fatalf("a write to %s, the sample's address, dropped the bound", w.dst)
		}
	}
	if _, err := other.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, _, _, ok := c.upperMs(); ok {
		t.Fatal("a write to another address kept the bound")
	}
	sent, gen = c.begin()
	f.advance(time.Millisecond)
	c.observe(1_000_000, sent, gen)
	_ = sameAddr.Close()
	if _, _, _, ok := c.upperMs(); ok {
		t.Fatal("a close kept the bound")
	}
}

// TestServerClockWithin: a claim is trusted with the expiry it set from a
// bound only while at most boundedCall (a tenth of its lease, at least
// maxSampleRTT) has passed since it read the bound, by the monotonic
// clock (a process stopped, a server slow to run it) and by the wall
// clock alike (a suspended host stops the monotonic clock alone).
func TestServerClockWithin(t *testing.T) {
	for _, c := range []struct{ lease, limit time.Duration }{
		{10 * time.Second, time.Second},
		{300 * time.Millisecond, 30 * time.Millisecond},
		{5 * time.Millisecond, maxSampleRTT},
	} {
		if got := boundedCall(c.lease); got != c.limit {
			t.Errorf("boundedCall(%v) = %v, want %v", c.lease, got, c.limit)
		}
	}
	limit := boundedCall(10 * time.Second)
	c, f := newFakeClock()
	at := c.now()
	f.advance(limit)
	if !c.within(at, limit) {
		t.Fatalf("within after %v = false, want true", limit)
	}
	f.advance(time.Nanosecond)
	if c.within(at, limit) {
		t.Fatalf("within after %v = true, want false", limit+time.Nanosecond)
	}
	at = c.now()
	f.r.wall = f.r.wall.Add(2 * limit)
	if c.within(at, limit) {
		t.Fatalf("within after the wall clock alone moved %v (a suspended host) = true, want false", 2*limit)
	}
	at = c.now()
	f.r.mono += 2 * limit
	if c.within(at, limit) {
		t.Fatalf("within after the monotonic clock alone moved %v = true, want false", 2*limit)
	}
}
