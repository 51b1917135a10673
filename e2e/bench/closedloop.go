package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// closedLoop keeps conc calls in flight for d, each worker making its next
// call as soon as the previous one is answered, and collects what they
// report. call makes the n-th call (n counts from 1 across workers) from
// worker w; it returns the status to count (0 for none), whether the
// answer was a replay, and an error when the answer was not the one
// expected. A call cut by the end of the phase is not a result: one made
// with the phase's ctx done, or one that failed once the phase's deadline
// had passed (a client's own deadline timer may fire before ctx's).
func closedLoop(ctx context.Context, conc int, d time.Duration, call func(ctx context.Context, w int, n int64) (code int, replayed bool, err error)) *phaseStats {
	s := &phaseStats{codes: map[int]int{}}
	var mu sync.Mutex
	var seq atomic.Int64
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	end, _ := ctx.Deadline()
	var wg sync.WaitGroup
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n := seq.Add(1)
				t0 := time.Now()
				code, replayed, err := call(ctx, w, n)
				if ctx.Err() != nil || (err != nil && !time.Now().Before(end)) {
					return
				}
				mu.Lock()
				s.requests++
				s.latencies = append(s.latencies, time.Since(t0))
				if code != 0 {
					s.codes[code]++
				}
				if replayed {
					s.replayed++
				}
				if err != nil {
					s.errors++
					if s.firstErr == "" {
						s.firstErr = err.Error()
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	s.wall = time.Since(start)
	s.finish()
	return s
}
