package valkey

import (
	"net"
	"runtime"
	"sync/atomic"
)

// gatherAbove is how many Claim and Complete calls must be running on a
// Store for its writes to Valkey to yield first (yieldingConn). Below it a
// yield has little to gather and costs a wake-up: with 2 requests in
// flight, yielding on every write cut a fresh key's throughput from about
// 2,400 to 1,600 a second on the 2-core reference machine, where at 64 it
// halved Valkey's reads per fresh key (docs/performance.md, "Gathering
// commands before a write").
const gatherAbove = 4

// callCount counts the Claim and Complete calls running on a Store: the
// commands that may be gathered into one write.
type callCount struct{ n atomic.Int64 }

func (c *callCount) enter() { c.n.Add(1) }
func (c *callCount) leave() { c.n.Add(-1) }

// yieldingConn is a connection to Valkey whose writes, while more than
// gatherAbove calls run, first let the process's other runnable goroutines
// run (runtime.Gosched). valkey-go's writer goroutine flushes as soon as
// its queue is empty, so on a busy process each command tended to leave in
// a write of its own, and Valkey to wake for it; while the writer yields,
// the requests that were ready to run queue their commands, and the
// writer's next flush carries them all. Unlike valkey-go's MaxFlushDelay
// (store.valkey.max_flush_delay) it waits on no timer: with nothing else
// to run the yield returns at once, and with nothing else in flight it is
// skipped.
type yieldingConn struct {
	net.Conn
	calls *callCount
}

// Write yields first while more than gatherAbove calls run, then writes.
func (y yieldingConn) Write(b []byte) (int, error) {
	if y.calls.n.Load() > gatherAbove {
		runtime.Gosched()
	}
	return y.Conn.Write(b)
}
