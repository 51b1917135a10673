// Package sweep runs the background sweep of the stores that keep expired
// records until a sweep removes them (store.Sweeper: memory, bolt,
// Postgres), one loop for the three.
package sweep

import (
	"context"
	"time"
)

// Loop is a running background sweep. Stop ends it.
type Loop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Start calls sweep every interval in a goroutine of its own until Stop;
// failed, when non-nil, is told of every sweep that failed (with what it
// removed before failing) unless Stop was the cause. An interval <= 0
// starts nothing: the Loop is already stopped.
func Start(every time.Duration, sweep func(context.Context) (int, error), failed func(removed int, err error)) *Loop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Loop{cancel: cancel, done: make(chan struct{})}
	if every <= 0 {
		close(l.done)
		return l
	}
	go func() {
		defer close(l.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if n, err := sweep(ctx); err != nil && ctx.Err() == nil && failed != nil {
					failed(n, err)
				}
			}
		}
	}()
	return l
}

// Stop ends the loop, cancelling a sweep under way, and returns once it
// has ended. It is safe to call more than once.
func (l *Loop) Stop() {
	l.cancel()
	<-l.done
}
