// Package awaitonce runs a function once, after an end is marked and the
// last call counted before or after it has left: a store closed once its
// last configuration and its last call are gone, an engine closed once a
// service's shutdown began and its last request ended.
package awaitonce

import (
	"sync"
	"sync/atomic"
)

// Await counts calls (Enter, Leave) and runs the function End names once
// End has been called and no call runs, in whichever order they come.
// (With sequentially consistent atomics, a Leave that ends the last call
// while End runs sees the end marked, or End sees no call: one of them
// runs the function.) Its zero value is ready; it must not be copied.
type Await struct {
	calls atomic.Int64
	ended atomic.Bool
	once  sync.Once
	then  func()
}

// Enter counts a call.
func (a *Await) Enter() { a.calls.Add(1) }

// Leave ends a call Enter counted, and runs the function when it was the
// last and End has been called.
func (a *Await) Leave() {
	if a.calls.Add(-1) == 0 && a.ended.Load() {
		a.once.Do(a.then)
	}
}

// End marks the end, with then to run once no call runs, and reports
// whether then ran on this goroutine (no call was running). Call it once.
func (a *Await) End(then func()) (ran bool) {
	a.then = then
	a.ended.Store(true)
	if a.calls.Load() == 0 {
		a.once.Do(func() { ran = true; then() })
	}
	return ran
}

// Idle reports whether no call runs now.
func (a *Await) Idle() bool { return a.calls.Load() == 0 }
