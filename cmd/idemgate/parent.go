package main

import (
	"context"
	"os"
	"time"
)

// parentPoll is how often the demo checks that the process that started
// it is still there (untilParentExits).
const parentPoll = 500 * time.Millisecond

// untilParentExits returns a context that also ends when the process that
// started this one exits, for the demo: `go run ./cmd/idemgate demo` runs
// the built binary as a child of the go command, and killing the go
// command by its PID (not Ctrl-C, which reaches both) left the child
// serving, holding the demo's ports. On Linux the kernel sends SIGTERM at
// the parent's death (setParentDeathSignal), which the caller's signal
// context turns into the usual graceful stop; everywhere, and as a
// fallback, the parent's PID is polled every parentPoll: an orphan is
// adopted by another process, so the PID changes.
func untilParentExits(ctx context.Context) (context.Context, context.CancelFunc) {
	ppid := os.Getppid()
	ctx, cancel := context.WithCancel(ctx)
	setParentDeathSignal()
	if os.Getppid() != ppid { // gone before the signal was set
		cancel()
		return ctx, cancel
	}
	go func() {
		t := time.NewTicker(parentPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if os.Getppid() != ppid {
				cancel()
				return
			}
		}
	}()
	return ctx, cancel
}
