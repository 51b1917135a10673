package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
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
	return tally(n, after-before, codes, replayed, errs, lat), nil
}

// tally counts the outcome of n requests of a one-key storm from their
// statuses, replay marks, errors and latencies (each slice of length n),
// given how many reached the upstream.
func tally(n int, upstreamCalls int64, codes []int, replayed []bool, errs []error, lat []time.Duration) *dupStats {
	s := &dupStats{requests: n, upstreamCalls: upstreamCalls, codes: map[int]int{}}
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
	s.p50, s.p99, s.max = lat[n/2], lat[max(0, n*99/100-1)], lat[n-1]
	return s
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

// idleConns opens n keep-alive connections to base (raw TCP, so each is
// surely its own connection), sends one POST with a fresh key on each, keeps
// them open and idle for settle, reads p's RSS, then closes them.
func idleConns(ctx context.Context, base, prefix string, p *proc, n int, settle time.Duration) (*idleStats, error) {
	s := &idleStats{conns: n}
	var err error
	if s.rssBeforeKB, err = p.memKB("VmRSS"); err != nil {
		return nil, err
	}
	p.resetPeak()
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	conns := make([]net.Conn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				c, err := oneRequest(u.Host, fmt.Sprintf("user-%d", i%owners), fmt.Sprintf("%sidle%d", prefix, i))
				mu.Lock()
				conns[i] = c
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
	select {
	case <-time.After(settle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.fds = p.fds()
	if s.rssIdleKB, err = p.memKB("VmRSS"); err != nil {
		return nil, err
	}
	if s.peakKB, err = p.memKB("VmHWM"); err != nil {
		return nil, err
	}
	return s, nil
}

// oneRequest dials host, sends one keep-alive POST with owner and key, reads
// the answer and returns the still open connection.
func oneRequest(host, owner, key string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	head := fmt.Sprintf("POST /v1/orders HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nX-User: %s\r\nIdempotency-Key: \"%s\"\r\nContent-Length: %d\r\n\r\n",
		host, owner, key, len(requestBody))
	if _, err := c.Write(append([]byte(head), requestBody...)); err != nil {
		return c, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return c, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = c.SetDeadline(time.Time{})
	if resp.StatusCode != http.StatusCreated || resp.Close {
		return c, fmt.Errorf("idle request answered %d (close %v)", resp.StatusCode, resp.Close)
	}
	return c, nil
}
