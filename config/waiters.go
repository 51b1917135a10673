package config

import "runtime"

// WaitersPerProc is the default cap on waiters per GOMAXPROCS
// (DefaultMaxWaiters).
//
// Why 1024 per core: a waiter holds a goroutine (a few KiB of stack) and a
// client connection (net/http's 4 KiB read and write buffers, the request),
// measured at about 14 KiB while it waits and 18-25 KiB at the peak, plus
// 23-26 KiB for the keep-alive connection (docs/performance.md, "Flat
// costs"), so 1024 per core is 40-50 MiB per core, small next to what a
// core of idemgate serves otherwise. The cap matters at the other end of
// the wait: when the running call completes, every waiter claims again at
// once and gets its replay, about 0.1 ms of CPU each (a replay's cost in
// docs/performance.md), so 1024 waiters per core drain in about 0.1 s. A
// larger herd only lengthens that burst and the memory an attacker can pin
// with one slow key; the bench's storm of 1,000 duplicates stays under it
// even on one core.
const WaitersPerProc = 1024

// DefaultMaxWaiters returns the cap on waiters used when none is
// configured: WaitersPerProc per GOMAXPROCS, which Go sets from the CPUs
// the process may use (its cgroup's CPU limit included), so it follows the
// machine or the container.
func DefaultMaxWaiters() int { return WaitersPerProc * runtime.GOMAXPROCS(0) }
