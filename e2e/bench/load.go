package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// requestBody is the 1 KiB JSON body of every POST (the same bytes for
// every key, so a reused key always matches its fingerprint).
var requestBody = func() []byte {
	head := `{"customer":"cus_00000000000042","currency":"EUR","items":[{"sku":"sku-1","qty":1}],"note":"`
	tail := `"}`
	return []byte(head + strings.Repeat("x", 1024-len(head)-len(tail)) + tail)
}()

// owners is how many distinct owners (X-User values) the load spreads over.
const owners = 16

// workload names.
const (
	wFresh       = "fresh"
	wReplay      = "replay"
	wMix         = "mix30"
	wPassthrough = "passthrough"
)

// newTargeter returns the request generator of workload against base, with
// keys under prefix (unique per target and phase so stores never share a
// key across phases); the replay workload cycles through replayKeys keys.
// Safe for concurrent use, as vegeta requires.
func newTargeter(workload, base, prefix string, replayKeys int64) vegeta.Targeter {
	url := base + "/v1/orders"
	var seq, fresh atomic.Int64
	return func(t *vegeta.Target) error {
		n := seq.Add(1)
		var key string
		var idx int64
		switch workload {
		case wFresh:
			idx = n
			key = prefix + "f" + strconv.FormatInt(n, 10)
		case wReplay:
			idx = n % replayKeys
			key = replayKey(prefix, idx)
		case wMix:
			// 3 requests in 10 reuse a key sent at least 300 fresh requests
			// earlier (completed by then at any concurrency used here).
			f := fresh.Load()
			if r := n % 10; (r == 1 || r == 4 || r == 7) && f > 600 {
				idx = f - 300 - n%256
			} else {
				idx = fresh.Add(1)
			}
			key = prefix + "m" + strconv.FormatInt(idx, 10)
		case wPassthrough:
			idx = n
		}
		t.Method = http.MethodPost
		t.URL = url
		t.Body = requestBody
		h := http.Header{
			"Content-Type": {"application/json"},
			"X-User":       {"user-" + strconv.FormatInt(idx%owners, 10)},
		}
		if key != "" {
			h["Idempotency-Key"] = []string{`"` + key + `"`}
		}
		t.Header = h
		return nil
	}
}

func replayKey(prefix string, i int64) string {
	return prefix + "r" + strconv.FormatInt(i, 10)
}

// newClient returns the load generator's HTTP/1.1 keep-alive client for one
// target; it is reused across that target's phases so connections stay warm.
func newClient(conns int) *http.Client {
	t := &http.Transport{
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		DisableCompression:  true,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}

// phaseStats is what one load phase measured on the client side.
type phaseStats struct {
	requests  int
	errors    int // transport errors and statuses outside 2xx
	codes     map[int]int
	replayed  int // answers carrying Idempotent-Replayed: true
	wall      time.Duration
	latencies []time.Duration // sorted by finish
	// answered and refused split latencies by outcome: a 2xx, or an answer
	// idemgate refused with a status (a 503 overloaded or store-unavailable, a
	// 409): what an answered request waited, and how long a refusal took
	// (admission, server.max_store_waiting: refused at once, not after the
	// store timeout). Transport errors are in neither.
	answered, refused []time.Duration
	firstErr          string
}

// merge adds o (another round of the same phase) to s; call finish after
// the last merge.
func (s *phaseStats) merge(o *phaseStats) {
	s.requests += o.requests
	s.errors += o.errors
	for c, n := range o.codes {
		s.codes[c] += n
	}
	s.replayed += o.replayed
	s.wall += o.wall
	s.latencies = append(s.latencies, o.latencies...)
	s.answered = append(s.answered, o.answered...)
	s.refused = append(s.refused, o.refused...)
	if s.firstErr == "" {
		s.firstErr = o.firstErr
	}
}

// finish sorts the latencies for quantile.
func (s *phaseStats) finish() {
	slices.Sort(s.latencies)
	slices.Sort(s.answered)
	slices.Sort(s.refused)
}

func (s *phaseStats) rps() float64 { return float64(s.requests) / s.wall.Seconds() }

// quantile returns the q-quantile latency (nearest rank).
func (s *phaseStats) quantile(q float64) time.Duration { return quantileOf(s.latencies, q) }

// quantileOf returns the q-quantile of sorted latencies (nearest rank), 0
// for none.
func quantileOf(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// attack runs tr for d: closed-loop at concurrency workers when rate is 0,
// otherwise open-loop at rate requests/s, with as many workers as needed
// (up to 10,000) so a slow answer never delays the next request's start
// (no coordinated omission).
func attack(ctx context.Context, client *http.Client, tr vegeta.Targeter, rate, workers int, d time.Duration) *phaseStats {
	opts := []func(*vegeta.Attacker){vegeta.Client(client), vegeta.Workers(uint64(workers)), vegeta.MaxBody(4096)}
	pacer := vegeta.Rate{Freq: rate, Per: time.Second}
	if rate == 0 {
		opts = append(opts, vegeta.MaxWorkers(uint64(workers)))
		pacer = vegeta.Rate{}
	} else {
		opts = append(opts, vegeta.MaxWorkers(10000))
	}
	a := vegeta.NewAttacker(opts...)
	stop := context.AfterFunc(ctx, func() { a.Stop() })
	defer stop()
	s := &phaseStats{codes: map[int]int{}, latencies: make([]time.Duration, 0, 1<<16)}
	start := time.Now()
	for res := range a.Attack(tr, pacer, d, "") {
		s.requests++
		s.latencies = append(s.latencies, res.Latency)
		switch {
		case res.Code >= 200 && res.Code <= 299:
			s.answered = append(s.answered, res.Latency)
		case res.Code != 0:
			s.refused = append(s.refused, res.Latency)
		}
		s.codes[int(res.Code)]++
		if res.Error != "" || res.Code < 200 || res.Code > 299 {
			s.errors++
			if s.firstErr == "" {
				s.firstErr = fmt.Sprintf("%d %s %s", res.Code, res.Error, res.Body)
			}
		}
		if res.Headers.Get("Idempotent-Replayed") == "true" {
			s.replayed++
		}
	}
	s.wall = time.Since(start)
	s.finish()
	return s
}

// preloadReplay completes the replayKeys replay keys of prefix, so the
// replay phase only meets completed records.
func preloadReplay(ctx context.Context, client *http.Client, base, prefix string, replayKeys int64) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= replayKeys || ctx.Err() != nil {
					return
				}
				code, _, err := post(ctx, client, base+"/v1/orders", "user-"+strconv.FormatInt(i%owners, 10), replayKey(prefix, i))
				if err == nil && code != http.StatusCreated {
					err = fmt.Errorf("preload answered %d", code)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// post sends one POST of requestBody with an owner and key and drains the
// answer; it returns the status and whether it was a replay.
func post(ctx context.Context, client *http.Client, url, owner, key string) (int, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(requestBody)))
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User", owner)
	if key != "" {
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", err
}
