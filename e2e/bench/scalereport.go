package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// msf formats d in milliseconds with microsecond resolution.
func msf(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d.Nanoseconds())/1e6) }

// roundRatio returns the median over the rounds of x of D's quantile (q
// 0.5 or 0.99) over the reference's in the same round: drift of the
// machine's load between rounds cancels, and one disturbed round does not
// move a median.
func roundRatio(x *scaleRow, q float64, kind func(scaleKinds) *scaleLat) float64 {
	d, ref := kind(x.d).rounds, kind(x.ref).rounds
	qi := 0
	if q > 0.5 {
		qi = 1
	}
	var rs []float64
	for i := range min(len(d), len(ref)) {
		if ref[i][qi] > 0 {
			rs = append(rs, float64(d[i][qi])/float64(ref[i][qi]))
		}
	}
	if len(rs) == 0 {
		return 0
	}
	slices.Sort(rs)
	if len(rs)%2 == 1 {
		return rs[len(rs)/2]
	}
	return (rs[len(rs)/2-1] + rs[len(rs)/2]) / 2
}

// flat returns, for one kind and quantile, roundRatio at the row x over
// roundRatio with no filled records (the mean of the first row's and the
// control row's after the deletion, both without them): 1.0 is flat
// whatever the machine's load did.
func (r *scaleResult) flat(x *scaleRow, q float64, kind func(scaleKinds) *scaleLat) float64 {
	base, n := 0.0, 0.0
	for _, y := range r.rows {
		if y.records == 0 {
			if v := roundRatio(y, q, kind); v > 0 {
				base, n = base+v, n+1
			}
		}
	}
	if n == 0 {
		return 0
	}
	return roundRatio(x, q, kind) / (base / n)
}

// largest returns the measured row with the most records.
func (r *scaleResult) largest() *scaleRow {
	last := r.rows[0]
	for _, x := range r.rows {
		if x.label == strconv.Itoa(x.records) && x.records >= last.records {
			last = x
		}
	}
	return last
}

type scaleKind struct {
	name string
	f    func(scaleKinds) *scaleLat
}

func (r *scaleResult) kinds() []scaleKind {
	return []scaleKind{
		{"fresh", func(k scaleKinds) *scaleLat { return k.serial }},
		{fmt.Sprintf("fresh ×%d", r.concurrency), func(k scaleKinds) *scaleLat { return k.conc }},
		{"replay", func(k scaleKinds) *scaleLat { return k.replay }},
	}
}

// markdown writes the scale section of the report.
func (r *scaleResult) markdown(p func(string, ...any)) {
	if len(r.rows) == 0 {
		return
	}
	p("### Claim latency with records already stored (workload scale, target D's Valkey)\n\n")
	p("Records: the bench's completed record (one request through D, read back with HGETALL: layout 3, a %d-byte record string in 64-byte fields) cloned under new identities with pipelined HSET and PEXPIREAT from %d goroutines (%d records per pipeline), same fields and expiry as complete.lua writes. "+
		"Each size is measured %v after its fill ended (Valkey's incremental rehashing done). Claims through store/valkey from the bench process, each timed alone: %d fresh keys one at a time, %d fresh keys %d at a time, %d claims of stored records (replays, a random one of those filled) one at a time, after 200 unmeasured claims; "+
		"in %d rounds alternating with the same claims on a reference valkey-server the workload starts, which holds one record throughout, so that a change of the machine's load meets both alike. "+
		"Server µs per EVALSHA: the server's own time in the claims' scripts during the row (INFO commandstats usec over calls), without the network, the client and the scheduling. DBSIZE counts every key of D's Valkey (other workloads' records and the fresh claims of earlier rows included). The last row is measured after the filled records were deleted again (UNLINK). Cells: D / reference, ms.\n\n",
		r.recordLen, r.fillWorkers, scaleFillBatch, r.settle, r.samples, r.samples, r.concurrency, r.samples, scaleRounds)
	p("| records written | DBSIZE | used_memory MiB | fill s | fill records/s | fresh p50 | fresh p99 | fresh ×%d p50 | fresh ×%d p99 | replay p50 | replay p99 | server µs per EVALSHA | errors |\n", r.concurrency, r.concurrency)
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	pair := func(x *scaleRow, f func(scaleKinds) *scaleLat, q float64) string {
		return msf(f(x.d).quantile(q)) + " / " + msf(f(x.ref).quantile(q))
	}
	for _, x := range r.rows {
		fill, rate := "-", "-"
		if x.filled > 0 {
			fill, rate = fmt.Sprintf("%.1f", x.fillTime.Seconds()), fmt.Sprintf("%.0f", float64(x.filled)/x.fillTime.Seconds())
		}
		p("| %s | %d | %.1f | %s | %s |", x.label, x.dbsize, float64(x.usedMemory)/(1<<20), fill, rate)
		for _, k := range r.kinds() {
			p(" %s | %s |", pair(x, k.f, 0.5), pair(x, k.f, 0.99))
		}
		p(" %.1f / %.1f | %d |\n", x.dServerUs, x.refServerUs, x.d.errors()+x.ref.errors())
	}
	p("\n")
	if r.bytesPerRecord > 0 {
		p("used_memory per filled record: %.0f bytes. Deleting them took %.1f s.\n\n", r.bytesPerRecord, r.deleteTime.Seconds())
	}
	p("Flatness: in each round D's quantile over the reference's, the median over the rounds, at each size over the same without filled records (the mean of the first and the last row; 1.00 = no change):\n\n")
	p("| records written |")
	for _, k := range r.kinds() {
		p(" %s p50 | %s p99 |", k.name, k.name)
	}
	p("\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.rows {
		p("| %s |", x.label)
		for _, k := range r.kinds() {
			p(" %.2f | %.2f |", r.flat(x, 0.5, k.f), r.flat(x, 0.99, k.f))
		}
		p("\n")
	}
	last := r.largest()
	p("\nFlat within 10 %% at %d records (the target: at most 1.10 above):", last.records)
	for i, k := range r.kinds() {
		for j, q := range []float64{0.5, 0.99} {
			v := r.flat(last, q, k.f)
			sep := ","
			if i == len(r.kinds())-1 && j == 1 {
				sep = "."
			}
			p(" %s p%.0f %.2f, %s%s", k.name, q*100, v, strings.Trim(metStr(v > 0 && v <= scaleFlatTarget), "*"), sep)
		}
	}
	p("\n\n")
	for _, x := range r.rows {
		if e := firstErr(x.d) + firstErr(x.ref); e != "" {
			p("First error at %s: `%s`  \n", x.label, e)
		}
	}
}
