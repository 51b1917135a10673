package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"
)

// dupStats is the outcome of the one-key storm: many concurrent requests
// with the same idempotency key against a slow upstream.
type dupStats struct {
	requests      int
	upstreamCalls int64 // how many reached the upstream
	codes         map[int]int
	replayed      int
	errors        int
	firstErr      string
	p50, p99, max time.Duration
}

// duplicates sends n requests at once, all with one key and owner, to the
// slow path (the upstream delays it) and counts upstream executions.
func duplicates(ctx context.Context, base, upstream, key string, n int) (*dupStats, error) {
	before, err := upstreamSlowCalls(upstream)
	if err != nil {
		return nil, err
	}
	client := newClient(n)
	defer client.CloseIdleConnections()
	start := make(chan struct{})
	lat := make([]time.Duration, n)
	codes := make([]int, n)
	replayed := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			t0 := time.Now()
			codes[i], replayed[i], errs[i] = post(ctx, client, base+"/v1/slow-orders", "user-dup", key)
			lat[i] = time.Since(t0)
		}()
	}
	close(start)
	wg.Wait()
	after, err := upstreamSlowCalls(upstream)
	if err != nil {
		return nil, err
	}
	s := &dupStats{requests: n, upstreamCalls: after - before, codes: map[int]int{}}
	for i := range n {
		s.codes[codes[i]]++
		if replayed[i] {
			s.replayed++
		}
		if errs[i] != nil || codes[i] < 200 || codes[i] > 299 {
			s.errors++
			if s.firstErr == "" {
				s.firstErr = fmt.Sprintf("status %d err %v", codes[i], errs[i])
			}
		}
	}
	slices.Sort(lat)
	s.p50, s.p99, s.max = lat[n/2], lat[n*99/100-1], lat[n-1]
	return s, nil
}

func upstreamSlowCalls(upstream string) (int64, error) {
	resp, err := http.Get(upstream + "/stats")
	if err != nil {
		return 0, fmt.Errorf("upstream stats: %w", err)
	}
	defer resp.Body.Close()
	var v struct {
		SlowCalls int64 `json:"slow_calls"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return 0, fmt.Errorf("upstream stats: %w", err)
	}
	return v.SlowCalls, nil
}

// idleStats is the resident memory of a target holding n idle keep-alive
// client connections.
type idleStats struct {
	conns       int
	fds         int // open file descriptors of the target while idle
	rssBeforeKB int64
	rssIdleKB   int64
	peakKB      int64
	errors      int
	firstErr    string
}

// idleConns opens n keep-alive connections to base, sends one POST with a
// fresh key on each (all at once, so each needs its own connection), leaves
// them idle for settle and reads pid's RSS.
func idleConns(ctx context.Context, base, prefix string, pid, n int, settle time.Duration) (*idleStats, error) {
	s := &idleStats{conns: n}
	var err error
	if s.rssBeforeKB, err = memKB(pid, "VmRSS"); err != nil {
		return nil, err
	}
	_ = resetPeak(pid)
	client := newClient(n)
	defer client.CloseIdleConnections()
	start := make(chan struct{})
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			code, _, err := post(ctx, client, base+"/v1/orders", fmt.Sprintf("user-%d", i%owners), fmt.Sprintf("%sidle%d", prefix, i))
			if err != nil || code != http.StatusCreated {
				mu.Lock()
				s.errors++
				if s.firstErr == "" {
					s.firstErr = fmt.Sprintf("status %d err %v", code, err)
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	select {
	case <-time.After(settle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if s.rssIdleKB, err = memKB(pid, "VmRSS"); err != nil {
		return nil, err
	}
	if s.peakKB, err = memKB(pid, "VmHWM"); err != nil {
		return nil, err
	}
	return s, nil
}
