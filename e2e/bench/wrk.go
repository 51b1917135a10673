package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/e2e/internal/aptget"
)

// Loaders of the closed-loop phases (-loader). A throughput ratio on a
// saturated machine is roughly (loader + B) / (loader + D), so a loader
// that costs more than the targets pulls every ratio towards 1: wrk, a
// user's tool, costs a fraction of vegeta's CPU per request. vegeta stays
// the open-loop driver, where a fixed rate is the point.
const (
	loaderWrk    = "wrk"
	loaderVegeta = "vegeta"
)

// wrkInstallHint is printed when wrk is missing and cannot be installed.
const wrkInstallHint = "wrk is the closed-loop load generator: install it (Debian: apt-get install wrk) or run with -loader vegeta"

// ensureWrk returns the wrk binary, installing Debian's wrk with apt-get
// first when install is set and it is missing.
func ensureWrk(ctx context.Context, log io.Writer, install bool) (string, error) {
	if bin, err := exec.LookPath("wrk"); err == nil {
		return bin, nil
	}
	if !install {
		return "", errors.New(wrkInstallHint)
	}
	fmt.Fprintln(log, "wrk not found: installing it with apt-get ...")
	apt, err := aptget.New(ctx, log, wrkInstallHint)
	if err != nil {
		return "", err
	}
	if err := apt.Install("wrk"); err != nil {
		return "", fmt.Errorf("apt-get install wrk: %w; %s", err, wrkInstallHint)
	}
	return exec.LookPath("wrk")
}

// wrkScript makes wrk send newTargeter's requests: the same 1 KiB body,
// owners and key shapes, each thread with its own sequence (keys carry
// the thread's number, so threads never share a fresh key), and reports
// what the phase needs as one line "WRK {json}" from done(): requests,
// duration, errors, statuses outside 2xx, replays counted from
// Idempotent-Replayed, and the latency at every 0.1 % step.
const wrkScript = `
local threads = {}
local nthreads = 0
function setup(thread)
  thread:set("tid", nthreads)
  nthreads = nthreads + 1
  table.insert(threads, thread)
end
function init(args)
  workload, prefix, replayKeys, body = args[1], args[2], tonumber(args[3]), args[4]
  n, fresh, replayed, bad = 0, 0, 0, 0
end
function request()
  n = n + 1
  local idx, key
  if workload == "fresh" then
    idx = n
    key = prefix .. "t" .. tid .. "f" .. n
  elseif workload == "replay" then
    idx = (n + tid * 7919) % replayKeys
    key = prefix .. "r" .. idx
  elseif workload == "mix30" then
    local r = n % 10
    if (r == 1 or r == 4 or r == 7) and fresh > 600 then
      idx = fresh - 300 - n % 256
    else
      fresh = fresh + 1
      idx = fresh
    end
    key = prefix .. "t" .. tid .. "m" .. idx
  else
    idx = n
  end
  local h = {["Content-Type"] = "application/json", ["X-User"] = "user-" .. (idx % 16)}
  if key then
    h["Idempotency-Key"] = '"' .. key .. '"'
  end
  return wrk.format("POST", "/v1/orders", h, body)
end
function response(status, headers, body)
  if status < 200 or status > 299 then
    bad = bad + 1
  end
  if headers["Idempotent-Replayed"] == "true" then
    replayed = replayed + 1
  end
end
function done(summary, latency, requests)
  local rep, b = 0, 0
  for _, t in ipairs(threads) do
    rep = rep + t:get("replayed")
    b = b + t:get("bad")
  end
  local e = summary.errors
  local q = {}
  for i = 1, 1000 do
    q[i] = latency:percentile(i / 10)
  end
  io.write(string.format('WRK {"requests":%d,"duration_us":%d,"transport_errors":%d,"bad_status":%d,"replayed":%d,"latency_us":[%s]}\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, b, rep, table.concat(q, ",")))
end
`

// wrkResult is the line wrkScript's done() writes.
type wrkResult struct {
	Requests        int     `json:"requests"`
	DurationUS      int64   `json:"duration_us"`
	TransportErrors int     `json:"transport_errors"`
	BadStatus       int     `json:"bad_status"`
	Replayed        int     `json:"replayed"`
	LatencyUS       []int64 `json:"latency_us"`
}

// wrkLoad runs wrk closed-loop against base for d (whole seconds, at
// least one: wrk's resolution) with conns connections on 2 threads,
// sending workload's requests with keys under prefix, and returns what it
// measured and wrk's own CPU seconds. Latencies are wrk's 1,000 quantiles
// (each 0.1 %), so quantile reads the same figures from them.
func wrkLoad(ctx context.Context, bin, dir, workload, base, prefix string, replayKeys int64, conns int, d time.Duration) (*phaseStats, float64, error) {
	script := filepath.Join(dir, "bench.lua")
	if _, err := os.Stat(script); err != nil {
		if err := os.WriteFile(script, []byte(wrkScript), 0o600); err != nil {
			return nil, 0, err
		}
	}
	secs := max(1, int(d.Round(time.Second)/time.Second))
	threads := min(2, conns)
	cmd := exec.CommandContext(ctx, bin, "-t", strconv.Itoa(threads), "-c", strconv.Itoa(conns), "-d", strconv.Itoa(secs)+"s",
		"--timeout", "30s", "-s", script, base+"/v1/orders", "--", workload, prefix, strconv.FormatInt(max(replayKeys, 1), 10), string(requestBody))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, 0, fmt.Errorf("wrk: %w\n%s", err, out.String())
	}
	cpu := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	var res *wrkResult
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "WRK "); ok {
			res = &wrkResult{}
			if err := json.Unmarshal([]byte(line), res); err != nil {
				return nil, 0, fmt.Errorf("wrk summary %q: %w", line, err)
			}
		}
	}
	if res == nil {
		return nil, 0, fmt.Errorf("wrk printed no summary:\n%s", out.String())
	}
	s := &phaseStats{codes: map[int]int{}, requests: res.Requests, replayed: res.Replayed,
		errors: res.TransportErrors + res.BadStatus, wall: time.Duration(res.DurationUS) * time.Microsecond}
	for _, us := range res.LatencyUS {
		s.latencies = append(s.latencies, time.Duration(us)*time.Microsecond)
	}
	if s.errors > 0 {
		s.firstErr = fmt.Sprintf("wrk: %d transport errors, %d answers outside 2xx", res.TransportErrors, res.BadStatus)
	}
	s.finish()
	return s, cpu, nil
}
