package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"time"
)

// wBig is the large-body workload (docs/performance.md, "1 MiB request and
// response bodies"): POST /v1/big with a 1 MiB
// body and a fresh key, which the upstream echoes (1 MiB back).
const wBig = "big"

// bigBodySize is the big workload's request (and so response) body size:
// 1 MiB, exactly idemgate's default max_request_bytes and
// max_response_bytes, so the default config stores every answer.
const bigBodySize = 1 << 20

// bigConcurrency is how many big requests are in flight at once: each
// holds megabytes in every process it crosses, so the default 64 would
// measure the machine's memory more than the proxy.
const bigConcurrency = 16

// bigBody returns a JSON document of exactly n bytes carrying base64 of
// random bytes, as an uploaded file travels: zstd saves about a quarter of
// it, so Valkey keeps it compressed.
func bigBody(n int) []byte {
	const head, tail = `{"file":"`, `"}`
	raw := make([]byte, base64.StdEncoding.DecodedLen(n-len(head)-len(tail)))
	rng := rand.New(rand.NewPCG(17, 1))
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	b := append([]byte(head), base64.StdEncoding.EncodeToString(raw)...)
	for len(b) < n-len(tail) {
		b = append(b, 'A')
	}
	return append(b[:n-len(tail)], tail...)
}

// runBig measures the big workload on every target, closed loop at
// bigConcurrency for o.duration after o.warmup, and prints per target the
// throughput, the body bytes moved, and the peak RSS above the idle
// baseline (VmRSS read before the warm-up) per request in flight, as a
// multiple of the body size. Its rows join the report like any workload's.
func runBig(ctx context.Context, o options, targets []*target, rep *report) error {
	body := bigBody(bigBodySize)
	for _, t := range targets {
		c := newClient(bigConcurrency * 2)
		idleKB, err := t.proc.memKB("VmRSS")
		if err != nil {
			return err
		}
		prefix := fmt.Sprintf("big-%s-%d-", t.id, time.Now().UnixNano())
		if o.warmup > 0 {
			bigLoad(ctx, c, t.base, prefix+"warm-", body, o.warmup)
		}
		x, err := measure(ctx, t, func() *phaseStats {
			return bigLoad(ctx, c, t.base, prefix, body, o.duration)
		})
		c.CloseIdleConnections()
		if err != nil {
			return err
		}
		x.workload, x.mode = wBig, "closed"
		if x.s.errors > 0 {
			// The target's own account of the failure, before its log
			// goes with the temporary directory.
			if log, err := os.ReadFile(t.proc.log); err == nil {
				fmt.Fprintf(os.Stderr, "big on %s: %d errors; the end of its log:\n%s\n", t.id, x.s.errors, log[max(0, len(log)-2000):])
			}
		}
		rep.rows = append(rep.rows, x)
		perReq := float64(x.peakRSSKB-idleKB) * 1024 / bigConcurrency / bigBodySize
		fmt.Fprintf(os.Stderr, "%-11s %-8s %s: %8.1f req/s %7.1f MiB/s each way, p50 %v p99 %v, errors %d; RSS idle %.1f MiB, peak %.1f MiB: %.2f x the body per request in flight (%d); CPU %.1f ms/request %s\n",
			wBig, "closed", t.id, x.s.rps(), x.s.rps()*bigBodySize/(1<<20), x.s.quantile(0.5), x.s.quantile(0.99), x.s.errors,
			float64(idleKB)/1024, float64(x.peakRSSKB)/1024, perReq, bigConcurrency, x.cpuSec*1000/float64(max(1, x.s.requests)), x.s.firstErr)
	}
	return nil
}

// bigLoad posts body to base/v1/big from bigConcurrency workers for d,
// each request with a fresh key under prefix, and checks that every answer
// is 201 with the whole body echoed.
func bigLoad(ctx context.Context, c *http.Client, base, prefix string, body []byte, d time.Duration) *phaseStats {
	return closedLoop(ctx, bigConcurrency, d, func(ctx context.Context, _ int, n int64) (int, bool, error) {
		code, replayed, err := bigPost(ctx, c, base, prefix+strconv.FormatInt(n, 10), "user-"+strconv.FormatInt(n%owners, 10), body)
		if err != nil || code != http.StatusCreated {
			err = fmt.Errorf("%d %v", code, err)
		}
		return code, replayed, err
	})
}

// bigPost sends one big request and drains the answer; it returns the
// status, whether the answer was a replay, and an error when the answer
// is not the whole body echoed.
func bigPost(ctx context.Context, c *http.Client, base, key, owner string, body []byte) (int, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/big", bytes.NewReader(body))
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User", owner)
	req.Header.Set("Idempotency-Key", `"`+key+`"`)
	resp, err := c.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && n != int64(len(body)) {
		err = fmt.Errorf("answer of %d bytes, want %d", n, len(body))
	}
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", err
}
