package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/idemgate/idemgate/store"
	storevalkey "github.com/idemgate/idemgate/store/valkey"
)

// wScale is the workload that measures claim latency on target D's Valkey
// at growing numbers of completed records already stored (docs/performance.md,
// "Flat costs").
const wScale = "scale"

// scaleFlatTarget is the largest ratio of a claim latency at a size to the
// same latency at the first size that still counts as flat (the target: flat
// within 10 %).
const scaleFlatTarget = 1.10

// scaleTemplate is one completed record the bench's real request left in
// Valkey through idemgate, taken apart so that it can be cloned under other
// identities: the record's hash fields other than the p fields, the
// identity's netstrings replaced and the rest of the layout 3 record string
// (fingerprint, recipe, created, stored at, response) kept byte for byte.
type scaleTemplate struct {
	id          store.Identity
	fingerprint string
	recipe      string
	expiry      string // field x: unix ms, also the key's PEXPIREAT
	token       string // field ct
	rest        string // the record string after the three identity netstrings
	recordLen   int    // length of the whole record string (the p fields joined)
}

// scaleLat is the claim latency of one kind of claim at one size.
type scaleLat struct {
	samples  int
	errors   int
	firstErr string
	lat      []time.Duration // sorted
	wall     time.Duration
	// rounds holds each round's p50 and p99, in the order measured, so
	// that D's can be compared with the reference's round by round.
	rounds [][2]time.Duration
}

// add merges o (another round of the same kind) into s; sort afterwards.
func (s *scaleLat) add(o *scaleLat) {
	slices.Sort(o.lat)
	s.rounds = append(s.rounds, [2]time.Duration{o.quantile(0.5), o.quantile(0.99)})
	s.samples += o.samples
	s.errors += o.errors
	if s.firstErr == "" {
		s.firstErr = o.firstErr
	}
	s.lat = append(s.lat, o.lat...)
	s.wall += o.wall
}

func (s *scaleLat) quantile(q float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	i := int(q*float64(len(s.lat))+0.5) - 1
	return s.lat[max(0, min(i, len(s.lat)-1))]
}

// scaleRow is the state of Valkey and the claim latencies at one size.
type scaleRow struct {
	records    int // records the workload had written when measured
	label      string
	dbsize     int64 // every key in Valkey (other workloads' records included)
	usedMemory int64
	filled     int           // records written by the fill step before this row
	fillTime   time.Duration // its wall time
	d          scaleKinds    // on D's Valkey, the one filled
	ref        scaleKinds    // on the reference Valkey, empty, in alternating rounds
	// dServerUs and refServerUs are the servers' own time per EVALSHA
	// during the row (INFO commandstats usec over calls): the script's
	// execution without the network, the client and the scheduling.
	dServerUs, refServerUs float64
}

// scaleKinds are the three kinds of claim measured on one server.
type scaleKinds struct {
	serial *scaleLat // fresh-key claims, one at a time
	conc   *scaleLat // fresh-key claims at o.scaleConc at once
	replay *scaleLat // claims of stored completed records (replays), one at a time
}

func newScaleKinds() scaleKinds {
	return scaleKinds{serial: &scaleLat{}, conc: &scaleLat{}, replay: &scaleLat{}}
}

func (k scaleKinds) all() []*scaleLat { return []*scaleLat{k.serial, k.conc, k.replay} }

func (k scaleKinds) errors() int { return k.serial.errors + k.conc.errors + k.replay.errors }

// scaleSide is one Valkey server the claims are timed on: its store, its
// address and how to pick a stored completed record to replay.
type scaleSide struct {
	st     *storevalkey.Store
	addr   string
	stored func() store.Identity
}

// evalshaUsec returns the calls of EVALSHA on the server at addr and the
// microseconds the server spent in them (INFO commandstats).
func evalshaUsec(addr string) (calls, usec int64, err error) {
	info, err := valkeyCommand(addr, "INFO", "commandstats")
	if err != nil {
		return 0, 0, fmt.Errorf("INFO commandstats: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				calls, _ = strconv.ParseInt(v, 10, 64)
			} else if v, ok := strings.CutPrefix(kv, "usec="); ok {
				usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return calls, usec, nil
}

// scaleRounds is how many rounds each row's samples are split into,
// alternating between D's Valkey and the reference, so that a change of
// the machine's load meets both alike.
const scaleRounds = 20

// scaleResult is what the scale workload reports.
type scaleResult struct {
	rows           []*scaleRow
	recordLen      int     // bytes of the layout 3 record string of one record
	bytesPerRecord float64 // used_memory growth per filled record, over the largest fill
	concurrency    int
	samples        int
	fillWorkers    int
	deleteTime     time.Duration
	settle         time.Duration
}

// runScale fills target D's Valkey with completed records to each of
// o.scaleSizes in turn and measures claim latency at each, then deletes the
// records it wrote and measures once more (a control for drift of the
// machine's load over the run).
func runScale(ctx context.Context, o options, d *target, ps *procs, rep *report) error {
	if d == nil || d.meter == nil {
		return errors.New("workload scale needs target D (idemgate with Valkey)")
	}
	addr := d.meter.(valkeyMeter).p.addr
	ref, err := startValkey(ctx, ps, "valkey-scale-reference", "")
	if err != nil {
		return err
	}
	defer ref.stop()
	res, err := measureScale(ctx, o, d.base, addr, ref.addr)
	if err != nil {
		return fmt.Errorf("scale: %w", err)
	}
	rep.scale = res
	return nil
}

// measureScale does the work of runScale against idemgate at base (for the
// template record), the Valkey server at addr that it fills, and the
// reference server at refAddr that stays empty but for one record.
func measureScale(ctx context.Context, o options, base, addr, refAddr string) (*scaleResult, error) {
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true, ClientName: "bench-scale"})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	defer c.Close()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	tpl, err := scaleTemplateFrom(ctx, c, base, run)
	if err != nil {
		return nil, err
	}
	st, err := storevalkey.New(ctx, storevalkey.Options{Addrs: []string{addr}})
	if err != nil {
		return nil, fmt.Errorf("store/valkey: %w", err)
	}
	defer st.Close()
	refC, err := vk.NewClient(vk.ClientOption{InitAddress: []string{refAddr}, DisableCache: true, ClientName: "bench-scale"})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", refAddr, err)
	}
	defer refC.Close()
	refSt, err := storevalkey.New(ctx, storevalkey.Options{Addrs: []string{refAddr}})
	if err != nil {
		return nil, fmt.Errorf("store/valkey: %w", err)
	}
	defer refSt.Close()
	// The reference holds one completed record to replay, as D does
	// before its fill (the template).
	if err := fillRecords(ctx, refC, tpl, run, 0, 1); err != nil {
		return nil, err
	}
	refSide := &scaleSide{st: refSt, addr: refAddr, stored: func() store.Identity { return fillIdentity(run, 0) }}

	sizes := slices.Clone(o.scaleSizes)
	slices.Sort(sizes)
	res := &scaleResult{recordLen: tpl.recordLen, concurrency: o.scaleConc, samples: o.scaleSamples, fillWorkers: scaleFillWorkers, settle: o.scaleSettle}
	filled := 0
	mem0, err := usedMemory(ctx, c)
	if err != nil {
		return nil, err
	}
	for _, size := range sizes {
		row := &scaleRow{records: size, label: fmt.Sprintf("%d", size)}
		if size > filled {
			t0 := time.Now()
			if err := fillRecords(ctx, c, tpl, run, filled, size); err != nil {
				return nil, err
			}
			row.fillTime, row.filled = time.Since(t0), size-filled
			filled = size
			fmt.Fprintf(os.Stderr, "scale: %d records written in %v (%.0f records/s)\n", row.filled, row.fillTime.Round(time.Millisecond), float64(row.filled)/row.fillTime.Seconds())
			// "Already stored": let the incremental rehashing that the
			// fill started (serverCron, 1 ms per 100 ms) finish first, as
			// it has in a server that grew to this size over hours.
			select {
			case <-time.After(o.scaleSettle):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if err := measureScaleRow(ctx, o, c, dSide(st, addr, tpl, run, filled), refSide, tpl, row); err != nil {
			return nil, err
		}
		res.rows = append(res.rows, row)
		if filled > 0 {
			res.bytesPerRecord = float64(row.usedMemory-mem0) / float64(filled)
		}
	}
	if filled > 0 {
		t0 := time.Now()
		if err := deleteRecords(ctx, c, tpl, run, filled); err != nil {
			return nil, err
		}
		res.deleteTime = time.Since(t0)
		row := &scaleRow{records: 0, label: "0 (after deleting them)"}
		if err := measureScaleRow(ctx, o, c, dSide(st, addr, tpl, run, 0), refSide, tpl, row); err != nil {
			return nil, err
		}
		res.rows = append(res.rows, row)
	}
	return res, nil
}

// dSide is D's Valkey holding filled records: a replay picks one of them
// at random, or the template's record when none is filled.
func dSide(st *storevalkey.Store, addr string, tpl *scaleTemplate, run string, filled int) *scaleSide {
	return &scaleSide{st: st, addr: addr, stored: func() store.Identity {
		if filled == 0 {
			return tpl.id
		}
		return fillIdentity(run, rand.IntN(filled))
	}}
}

// measureScaleRow reads DBSIZE and used_memory of D's Valkey (client c)
// and measures the three kinds of claim on d and on ref in scaleRounds
// alternating rounds.
func measureScaleRow(ctx context.Context, o options, c vk.Client, d, ref *scaleSide, tpl *scaleTemplate, row *scaleRow) error {
	var err error
	if row.dbsize, err = c.Do(ctx, c.B().Dbsize().Build()).AsInt64(); err != nil {
		return fmt.Errorf("DBSIZE: %w", err)
	}
	if row.usedMemory, err = usedMemory(ctx, c); err != nil {
		return err
	}
	row.d, row.ref = newScaleKinds(), newScaleKinds()
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	per := max(1, o.scaleSamples/scaleRounds)
	for _, side := range []*scaleSide{d, ref} {
		// Unmeasured: the first claims after a fill warm the connections.
		claimFresh(ctx, side.st, tpl, tag+"-warm", 1, min(200, o.scaleSamples))
	}
	var calls0, usec0 [2]int64
	for i, side := range []*scaleSide{d, ref} {
		if calls0[i], usec0[i], err = evalshaUsec(side.addr); err != nil {
			return err
		}
	}
	for r := range scaleRounds {
		sides, kinds := []*scaleSide{d, ref}, []scaleKinds{row.d, row.ref}
		if r%2 == 1 {
			sides, kinds = []*scaleSide{ref, d}, []scaleKinds{row.ref, row.d}
		}
		for i, side := range sides {
			rt := tag + "-" + strconv.Itoa(r)
			kinds[i].serial.add(claimFresh(ctx, side.st, tpl, rt+"-s", 1, per))
			kinds[i].conc.add(claimFresh(ctx, side.st, tpl, rt+"-c", o.scaleConc, per))
			kinds[i].replay.add(timeClaims(ctx, side.st, 1, per, replayParams(tpl, side.stored)))
		}
	}
	for _, k := range []scaleKinds{row.d, row.ref} {
		for _, l := range k.all() {
			slices.Sort(l.lat)
		}
	}
	for i, side := range []*scaleSide{d, ref} {
		calls, usec, err := evalshaUsec(side.addr)
		if err != nil {
			return err
		}
		if dc := calls - calls0[i]; dc > 0 {
			v := float64(usec-usec0[i]) / float64(dc)
			if i == 0 {
				row.dServerUs = v
			} else {
				row.refServerUs = v
			}
		}
	}
	fmt.Fprintf(os.Stderr, "scale %s: dbsize %d, used_memory %.1f MiB; server µs per EVALSHA %.1f (%.1f); D (reference) fresh claim p50 %v (%v) p99 %v (%v); at %d p50 %v (%v) p99 %v (%v); replay p50 %v (%v) p99 %v (%v); errors %d %d %s%s\n",
		row.label, row.dbsize, float64(row.usedMemory)/(1<<20), row.dServerUs, row.refServerUs,
		row.d.serial.quantile(0.5), row.ref.serial.quantile(0.5), row.d.serial.quantile(0.99), row.ref.serial.quantile(0.99),
		o.scaleConc, row.d.conc.quantile(0.5), row.ref.conc.quantile(0.5), row.d.conc.quantile(0.99), row.ref.conc.quantile(0.99),
		row.d.replay.quantile(0.5), row.ref.replay.quantile(0.5), row.d.replay.quantile(0.99), row.ref.replay.quantile(0.99),
		row.d.errors(), row.ref.errors(), firstErr(row.d), firstErr(row.ref))
	return ctx.Err()
}

func firstErr(k scaleKinds) string {
	for _, l := range k.all() {
		if l.firstErr != "" {
			return l.firstErr
		}
	}
	return ""
}

// claimFresh claims n new keys through store/valkey, workers at a time,
// with the template's fingerprint and recipe, the proxy's lease and
// retention of the bench, and times each claim.
func claimFresh(ctx context.Context, st *storevalkey.Store, tpl *scaleTemplate, tag string, workers, n int) *scaleLat {
	return timeClaims(ctx, st, workers, n, func(i int) (store.ClaimParams, store.State) {
		return store.ClaimParams{
			Identity:    store.Identity{Owner: "h:user-" + strconv.Itoa(i%owners), Scope: "default", Key: "scale-" + tag + "-" + strconv.Itoa(i)},
			Fingerprint: tpl.fingerprint, Recipe: tpl.recipe,
			Token: fmt.Sprintf("%032x", rand.Uint64()), Lease: 10 * time.Second, Retention: 24 * time.Hour,
		}, store.Claimed
	})
}

// replayParams returns the claims of stored completed records (replays)
// that stored picks.
func replayParams(tpl *scaleTemplate, stored func() store.Identity) func(int) (store.ClaimParams, store.State) {
	return func(int) (store.ClaimParams, store.State) {
		id := stored()
		return store.ClaimParams{
			Identity: id, Fingerprint: tpl.fingerprint, Recipe: tpl.recipe,
			Token: fmt.Sprintf("%032x", rand.Uint64()), Lease: 10 * time.Second, Retention: 24 * time.Hour,
		}, store.Completed
	}
}

// timeClaims runs n claims built by params (which also names the state the
// claim must answer), workers at a time, each timed alone.
func timeClaims(ctx context.Context, st *storevalkey.Store, workers, n int, params func(i int) (store.ClaimParams, store.State)) *scaleLat {
	s := &scaleLat{samples: n, lat: make([]time.Duration, 0, n)}
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				p, want := params(i)
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				t0 := time.Now()
				r, err := st.Claim(cctx, p)
				d := time.Since(t0)
				cancel()
				if err == nil && r.State != want {
					err = fmt.Errorf("claim answered %v, want %v", r.State, want)
				}
				if err == nil && want == store.Completed && (r.Response == nil || string(r.Response.Body) != string(upstreamBody)) {
					err = errors.New("replay of a stored record does not answer the upstream's body")
				}
				mu.Lock()
				s.lat = append(s.lat, d)
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
	slices.Sort(s.lat)
	return s
}

// usedMemory returns INFO memory's used_memory in bytes.
func usedMemory(ctx context.Context, c vk.Client) (int64, error) {
	info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		return 0, fmt.Errorf("INFO memory: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("INFO memory has no used_memory")
}
