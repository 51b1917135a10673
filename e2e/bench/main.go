// Command bench measures idemgate against the bare upstream and a bare httputil.ReverseProxy in one run on one machine (see docs/performance.md).
//
// Run from the repository root:
//
//	go run ./e2e/bench -out docs/performance.md
//
// It builds the upstream, the bare proxy and idemgate, starts them, a
// throwaway valkey-server and a throwaway PostgreSQL on 127.0.0.1, drives every workload against
// every target with vegeta, prints the results and, with -out, writes them
// into the file between the bench markers. Every process it starts is
// stopped when it ends or is interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// target is one system under test.
type target struct {
	id, desc string
	base     string     // base URL the load goes to
	proc     *proc      // the process whose CPU and memory are measured
	meter    storeMeter // the store's counters (D, E), nil for the others
}

type options struct {
	duration, warmup time.Duration
	concurrency      int
	rounds           int
	openFractions    []float64
	dupRequests      int
	idleConns        int
	idleSettle       time.Duration
	replayKeys       int64
	workloads        []string
	targets          string
	logLevel         string
	out              string
	// acks > 0 gives target D's Valkey one replica per acknowledgement and
	// runs D with store.valkey.acks.replicas = acks (docs/durability.md).
	acks int
	// pgFsync runs target E's PostgreSQL with fsync, synchronous_commit
	// and full_page_writes on (its defaults); pgConns is E's
	// store.postgres.max_conns.
	pgFsync bool
	pgConns int
	// installNginx installs nginx with apt-get when target N needs it and
	// it is missing (the bench does; the smoke test fails instead).
	installNginx bool
	// loader drives the closed-loop phases and their warm-up: loaderWrk
	// (the default of -loader, installed with apt-get when missing and
	// installNginx is set) or, as the zero value, vegeta; open-loop phases
	// always use vegeta. wrkBin and wrkDir are set by measureAll.
	loader         string
	wrkBin, wrkDir string
	// valkeyLayout is store.valkey.layout of every idemgate on Valkey (D,
	// S, G); 0 leaves the default (3).
	valkeyLayout int
	// scaleSizes are the counts of completed records the scale workload
	// fills target D's Valkey to, measuring claim latency at each;
	// scaleSamples claims are timed per kind and size, scaleConc at once
	// for the concurrent kind.
	scaleSizes   []int
	scaleSamples int
	scaleConc    int
	scaleSettle  time.Duration
	// waiters and waitersSmall are the sizes of the two one-key storms of
	// the waiters10k workload (half on each of two instances), against an
	// upstream that delays the slow path by waitersDelay.
	waiters, waitersSmall int
	waitersDelay          time.Duration
	// hotPathScale scales the exchanges the hotpath workload profiles per
	// path (1: enough samples for a share to be good to about a point).
	hotPathScale float64
	// inappStorm is the size of the in-app comparison's one-key storms,
	// inappStorms how many it sends (a key each);
	// inappKill runs its scenario (b), a kill mid-call and a retry (the
	// retry through idemgate waits out the dead claim's lease, 10 s);
	// installNode installs node and npm with apt-get when missing.
	inappStorm  int
	inappStorms int
	inappKill   bool
	installNode bool
}

func main() {
	var o options
	var workloads string
	flag.DurationVar(&o.duration, "duration", 6*time.Second, "measured length of each closed- and open-loop phase of each target")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds each phase is split into, alternating between targets")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured closed-loop load before each target's phases")
	flag.IntVar(&o.concurrency, "concurrency", 64, "closed-loop concurrency (connections and in-flight requests)")
	var open string
	flag.StringVar(&open, "open", "0.5,0.25", "open-loop rates, as fractions of B's closed-loop throughput for the workload (comma-separated)")
	flag.IntVar(&o.dupRequests, "dup", 1000, "concurrent requests with one idempotency key (0 skips)")
	flag.IntVar(&o.idleConns, "idle", 1000, "idle keep-alive connections for the memory check (0 skips)")
	flag.DurationVar(&o.idleSettle, "idle-settle", time.Second, "how long the idle connections stay idle before RSS is read")
	flag.Int64Var(&o.replayKeys, "replay-keys", 1000, "completed keys the replay workload cycles through")
	flag.StringVar(&workloads, "workloads", strings.Join([]string{wHotPath, wFresh, wReplay, wMix, wPassthrough, wGRPC, wInapp}, ","), "workloads to run (also scale, big, waiters10k)")
	flag.Float64Var(&o.hotPathScale, "hotpath-scale", 1, "workload hotpath: scale of the exchanges profiled per path (30,000 fresh, 100,000 replays, 40,000 passthrough at 1)")
	flag.StringVar(&o.targets, "targets", "ABCDENSG", "targets to run: A upstream, B bare proxy, C idemgate+memory, D idemgate+valkey, E idemgate+postgres, N nginx, S nginx in front sending keyed writes to idemgate+valkey (docs/nginx.md), G the upstream's handler with idemgate's Go middleware+valkey")
	flag.StringVar(&o.loader, "loader", loaderWrk, "closed-loop load generator: wrk (light, as users measure; installed with apt-get when missing and -install-nginx is set) or vegeta; open loop always uses vegeta")
	flag.IntVar(&o.valkeyLayout, "valkey-layout", 5, "store.valkey.layout of D, S and G (3, 4 or 5; docs/protocol.md, \"Layout 5 (Valkey)\")")
	flag.BoolVar(&o.installNginx, "install-nginx", true, "install nginx with apt-get (Debian's nginx-light) when target N needs it and it is missing")
	flag.StringVar(&o.logLevel, "log-level", "info", "idemgate log level (info logs one line per enforced request, as in production)")
	flag.IntVar(&o.acks, "acks", 0, "run D with store.valkey.acks.replicas N against N replicas the bench starts (0: no replica, acks off)")
	flag.BoolVar(&o.pgFsync, "pg-fsync", true, "run E's PostgreSQL with fsync and synchronous_commit on (its defaults); false turns them off")
	flag.IntVar(&o.pgConns, "pg-conns", 16, "E's store.postgres.max_conns (0: idemgate's default, max(4, CPUs))")
	var scale string
	flag.StringVar(&scale, "scale", "0,100000,1000000", "workload scale: completed records in D's Valkey at which claim latency is measured (comma-separated)")
	flag.IntVar(&o.scaleSamples, "scale-samples", 20000, "workload scale: claims timed per kind and size")
	flag.IntVar(&o.scaleConc, "scale-conc", 16, "workload scale: claims at once for the concurrent kind")
	flag.DurationVar(&o.scaleSettle, "scale-settle", 3*time.Second, "workload scale: pause between a fill and its measurement (Valkey finishes rehashing)")
	flag.IntVar(&o.waiters, "waiters", 10000, "workload waiters10k: concurrent requests with one key, half on each of two idemgate instances")
	flag.IntVar(&o.waitersSmall, "waiters-small", 1000, "workload waiters10k: the smaller storm its store commands are compared with (0 skips it)")
	flag.DurationVar(&o.waitersDelay, "waiters-delay", 5*time.Second, "workload waiters10k: how long its upstream delays the one call (every other request must be waiting by then)")
	flag.IntVar(&o.inappStorm, "inapp-storm", 50, "workload inapp: concurrent requests with one key, scenario (a)")
	flag.IntVar(&o.inappStorms, "inapp-storms", 5, "workload inapp: storms of scenario (a), each with a key of its own")
	flag.BoolVar(&o.inappKill, "inapp-kill", true, "workload inapp: scenario (b), the idempotency process killed mid-call, then a retry")
	flag.BoolVar(&o.installNode, "install-node", true, "workload inapp: install node and npm with apt-get (Debian's nodejs, npm) when missing")
	flag.StringVar(&o.out, "out", "", "markdown file whose bench section is replaced with the results (e.g. docs/performance.md)")
	flag.Parse()
	o.workloads = strings.Split(workloads, ",")
	for _, f := range strings.Split(scale, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 0 {
			fmt.Fprintf(os.Stderr, "bench: -scale: bad size %q\n", f)
			os.Exit(2)
		}
		o.scaleSizes = append(o.scaleSizes, v)
	}
	o.rounds = max(1, o.rounds)
	for _, f := range strings.Split(open, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 {
			fmt.Fprintf(os.Stderr, "bench: -open: bad fraction %q\n", f)
			os.Exit(2)
		}
		o.openFractions = append(o.openFractions, v)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, args []string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	rep, err := measureAll(ctx, o, root, args)
	if err != nil {
		return err
	}
	text := rep.markdown()
	fmt.Println(rep.glanceMarkdown())
	fmt.Println()
	fmt.Println(text)
	if o.out != "" {
		path := o.out
		if !filepath.IsAbs(path) {
			path = filepath.Join(root, path)
		}
		if err := writeSection(path, text); err != nil {
			return err
		}
		if err := writeGlance(path, rep.glanceMarkdown()); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "wrote", path)
	}
	return nil
}

// measureAll builds and starts the targets from the module at root, runs
// every measurement o asks for and stops every process again.
func measureAll(ctx context.Context, o options, root string, args []string) (*report, error) {
	dir, err := os.MkdirTemp("", "idemgate-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ps := &procs{dir: dir}
	defer ps.stopAll()
	if o.loader == loaderWrk {
		if o.wrkBin, err = ensureWrk(ctx, os.Stderr, o.installNginx); err != nil {
			return nil, err
		}
		o.wrkDir = dir
	} else if o.loader != "" && o.loader != loaderVegeta {
		return nil, fmt.Errorf("-loader %q: want wrk or vegeta", o.loader)
	}

	fmt.Fprintln(os.Stderr, "building upstream, bareproxy and idemgate ...")
	bins := map[string]string{}
	for name, pkg := range map[string]string{"upstream": "./e2e/bench/upstream", "bareproxy": "./e2e/bench/bareproxy", "idemgate": "./cmd/idemgate"} {
		bins[name] = filepath.Join(dir, name)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bins[name], pkg)
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("go build %s: %w", pkg, err)
		}
	}

	up, err := ps.start("upstream", bins["upstream"], []string{"-listen", "127.0.0.1:0"}, true)
	if err != nil {
		return nil, err
	}
	upURL := "http://" + up.addr
	targets := []*target{{id: "A", desc: "upstream directly", base: upURL, proc: up}}
	if strings.Contains(o.targets, "B") {
		bp, err := ps.start("bareproxy", bins["bareproxy"], []string{"-listen", "127.0.0.1:0", "-upstream", upURL}, true)
		if err != nil {
			return nil, err
		}
		targets = append(targets, &target{id: "B", desc: "bare httputil.ReverseProxy", base: "http://" + bp.addr, proc: bp})
	}
	var nginxVersion string
	if strings.Contains(o.targets, "N") {
		n, version, stopN, err := startNginx(ctx, dir, upURL, o.installNginx)
		if err != nil {
			return nil, fmt.Errorf("target N: %w", err)
		}
		defer stopN()
		nginxVersion = version
		targets = append(targets, &target{id: "N", desc: version, base: "http://" + n.addr, proc: n})
	}
	if strings.Contains(o.targets, "C") {
		g, err := startIdemgate(ctx, ps, bins["idemgate"], "idemgate-memory", upURL, "store:\n  driver: memory\n", o.logLevel)
		if err != nil {
			return nil, err
		}
		targets = append(targets, &target{id: "C", desc: "idemgate, memory store", base: g.addr, proc: g})
	}
	machine := machineInfo()
	var vkAddr string
	var vkD *proc
	if strings.Contains(o.targets, "D") {
		vk, err := startValkey(ctx, ps, "valkey", "")
		if err != nil {
			return nil, err
		}
		vkAddr, vkD = vk.addr, vk
		desc := "idemgate, Valkey store"
		for i := range o.acks {
			if _, err := startValkey(ctx, ps, fmt.Sprintf("valkey-replica-%d", i), vk.addr); err != nil {
				return nil, err
			}
		}
		if o.acks > 0 {
			desc = fmt.Sprintf("idemgate, Valkey store, acks.replicas %d", o.acks)
		}
		storeYAML := valkeyYAML(o, vk.addr)
		if o.acks > 0 {
			storeYAML += fmt.Sprintf("    acks: {replicas: %d, timeout: 500ms}\n", o.acks)
		}
		g, err := startIdemgate(ctx, ps, bins["idemgate"], "idemgate-valkey", upURL, storeYAML, o.logLevel)
		if err != nil {
			return nil, err
		}
		targets = append(targets, &target{id: "D", desc: desc, base: g.addr, proc: g, meter: valkeyMeter{vk}})
	}
	if strings.Contains(o.targets, "S") {
		// Its own idemgate and Valkey, so that D's figures stay D's alone.
		vk, err := startValkey(ctx, ps, "valkey-split", "")
		if err != nil {
			return nil, err
		}
		storeYAML := valkeyYAML(o, vk.addr)
		g, err := startIdemgate(ctx, ps, bins["idemgate"], "idemgate-split", upURL, storeYAML, o.logLevel)
		if err != nil {
			return nil, err
		}
		n, stopS, err := startNginxSplit(ctx, dir, root, upURL, strings.TrimPrefix(g.addr, "http://"), o.installNginx)
		if err != nil {
			return nil, fmt.Errorf("target S: %w", err)
		}
		defer stopS()
		targets = append(targets, &target{id: "S", desc: "nginx (docs/nginx.md split) in front of idemgate+Valkey; CPU: nginx's alone",
			base: "http://" + n.addr, proc: n, meter: valkeyMeter{vk}})
	}
	if strings.Contains(o.targets, "G") {
		// The same handler as A in a Go service, wrapped in the middleware
		// (package middleware) on a Valkey of its own, configured as D.
		vk, err := startValkey(ctx, ps, "valkey-inprocess", "")
		if err != nil {
			return nil, err
		}
		cfgDir := filepath.Join(dir, "inprocess-config")
		if err := os.Mkdir(cfgDir, 0o700); err != nil {
			return nil, err
		}
		path := filepath.Join(cfgDir, "idemgate.yaml")
		yaml := valkeyYAML(o, vk.addr) + fmt.Sprintf("log:\n  level: %s\ndefaults:\n  owner: \"header:X-User\"\n  lease: 10s\n  wait_timeout: 10s\n", o.logLevel)
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			return nil, err
		}
		g, err := ps.start("inprocess", bins["upstream"], []string{"-listen", "127.0.0.1:0", "-idemgate-config", path}, true)
		if err != nil {
			return nil, err
		}
		targets = append(targets, &target{id: "G", desc: "the upstream's handler in a Go service with idemgate's middleware, Valkey store", base: "http://" + g.addr, proc: g, meter: valkeyMeter{vk}})
	}
	if strings.Contains(o.targets, "E") {
		pg, stopPG, err := startPostgres(ctx, o.pgFsync)
		if err != nil {
			return nil, err
		}
		defer stopPG() // after the idemgate processes (deferred earlier) are stopped
		defer ps.stopAll()
		machine += " " + pg.version() + "."
		storeYAML := fmt.Sprintf("store:\n  driver: postgres\n  postgres:\n    dsn: %q\n    max_conns: %d\n", pg.srv.DSN(), o.pgConns)
		g, err := startIdemgate(ctx, ps, bins["idemgate"], "idemgate-postgres", upURL, storeYAML, o.logLevel)
		if err != nil {
			return nil, err
		}
		desc := "idemgate, PostgreSQL store"
		if !o.pgFsync {
			desc += " (fsync off)"
		}
		targets = append(targets, &target{id: "E", desc: desc, base: g.addr, proc: g, meter: pg})
	}
	if !strings.Contains(o.targets, "A") {
		targets = targets[1:]
	}
	if nginxVersion != "" {
		machine += " " + nginxVersion + "."
	}

	rep := &report{opts: o, args: args, machine: machine, started: time.Now()}
	// First, while the processes are fresh: later the memory store holds
	// every record of the run and its RSS says more about them than about
	// connections.
	if o.idleConns > 0 {
		for _, t := range targets {
			s, err := idleConns(ctx, t.base, "idle-"+t.id+"-", t.proc, o.idleConns, o.idleSettle)
			if err != nil {
				return nil, fmt.Errorf("idle connections on %s: %w", t.id, err)
			}
			rep.idle = append(rep.idle, idleRow{target: t, s: s})
			fmt.Fprintf(os.Stderr, "idle %s: %d conns, RSS %.1f MiB (fds %d, errors %d)\n", t.id, s.conns, float64(s.rssIdleKB)/1024, s.fds, s.errors)
		}
	}
	for _, w := range o.workloads {
		var err error
		switch w {
		case wScale:
			err = runScale(ctx, o, findTarget(targets, "D"), ps, rep)
		case wBig:
			err = runBig(ctx, o, targets, rep)
		case wHotPath:
			err = runHotPath(ctx, o, root, rep)
		case wGRPC:
			err = runGRPC(ctx, o, ps, root, bins["idemgate"], o.logLevel, rep)
		case wInapp:
			vk := vkD
			if vk == nil {
				if vk, err = startValkey(ctx, ps, "valkey-inapp", ""); err != nil {
					return nil, err
				}
			}
			err = runInapp(ctx, o, inappEnv{ps: ps, root: root, idemgateBin: bins["idemgate"], valkey: vk, logLevel: o.logLevel, install: o.installNode}, rep)
		case wWaiters:
			err = runWaiters(ctx, o, waitersEnv{ps: ps, idemgateBin: bins["idemgate"], upstreamBin: bins["upstream"], valkeyAddr: vkAddr, logLevel: o.logLevel}, rep)
		default:
			err = runWorkload(ctx, o, w, targets, rep)
		}
		if err != nil {
			return nil, err
		}
	}
	if o.dupRequests > 0 {
		for _, t := range targets {
			if err := runDup(ctx, o, t, upURL, rep); err != nil {
				return nil, err
			}
		}
	}
	rep.finished = time.Now()
	return rep, ctx.Err()
}

// findTarget returns the target with id, nil when it does not run.
func findTarget(targets []*target, id string) *target {
	for _, t := range targets {
		if t.id == id {
			return t
		}
	}
	return nil
}

// loadWorkload reports whether w is one of the load workloads that
// runWorkload drives with vegeta (scale, waiters10k, hotpath, grpc and inapp
// have their own measurements and tables).
func loadWorkload(w string) bool {
	return w != wScale && w != wWaiters && w != wHotPath && w != wInapp && w != wGRPC
}

// runWorkload measures one workload: closed loop on every target, then open
// loop on every target at each of openFractions of B's closed-loop
// throughput. Each
// phase is split into rounds that alternate between the targets (in a
// rotating order), so a change of background load on the machine hits
// every target alike instead of whichever ran at that moment.
func runWorkload(ctx context.Context, o options, w string, targets []*target, rep *report) error {
	clients := map[string]*http.Client{}
	for _, t := range targets {
		clients[t.id] = newClient(o.concurrency * 4)
	}
	defer func() {
		for _, c := range clients {
			c.CloseIdleConnections()
		}
	}()
	roundLen := o.duration / time.Duration(o.rounds)
	bMax := 0.0
	for m := range 1 + len(o.openFractions) {
		mode, frac := "closed", 0.0
		if m > 0 {
			frac = o.openFractions[m-1]
			mode = fmt.Sprintf("open %.0f%%", frac*100)
		}
		rows := map[string]*row{}
		for round := range o.rounds {
			for k := range targets {
				t := targets[(k+round)%len(targets)]
				if ctx.Err() != nil {
					return ctx.Err()
				}
				prefix := fmt.Sprintf("%s-%s-%d-%d-", w, t.id, m, round)
				c := clients[t.id]
				if w == wReplay {
					if err := preloadReplay(ctx, c, t.base, prefix, o.replayKeys); err != nil {
						return fmt.Errorf("%s replay preload: %w", t.id, err)
					}
				}
				useWrk := mode == "closed" && o.wrkBin != ""
				if mode == "closed" && round == 0 && o.warmup > 0 {
					// Measured like a round but kept out of every ratio:
					// the first seconds of a workload (of the target's
					// life, for the first workload) beside its steady
					// state (docs/performance.md, "Run it").
					x, err := measureLoad(ctx, o, t, c, w, prefix+"warm-", useWrk, 0, o.warmup)
					if err != nil {
						return fmt.Errorf("%s warm-up: %w", t.id, err)
					}
					x.workload, x.mode = w, modeWarmup
					x.s.finish()
					rep.rows = append(rep.rows, x)
				}
				rate := 0
				if frac > 0 {
					if bMax == 0 {
						return fmt.Errorf("open loop needs B's closed-loop throughput (run target B)")
					}
					rate = max(1, int(bMax*frac))
				}
				x, err := measureLoad(ctx, o, t, c, w, prefix, useWrk, rate, roundLen)
				if err != nil {
					return err
				}
				x.workload, x.mode, x.rate = w, mode, rate
				if rows[t.id] == nil {
					rows[t.id] = x
				} else {
					rows[t.id].merge(x)
				}
			}
		}
		for _, t := range targets {
			x := rows[t.id]
			x.s.finish()
			rep.rows = append(rep.rows, x)
			if m == 0 && t.id == "B" {
				bMax = x.s.rps()
			}
			fmt.Fprintf(os.Stderr, "%-11s %-8s %s: %8.0f req/s p50 %v p99 %v errors %d replayed %d host busy %.0f%% %s\n",
				w, mode, t.id, x.s.rps(), x.s.quantile(0.5), x.s.quantile(0.99), x.s.errors, x.s.replayed, x.hostBusy()*100, x.s.firstErr)
			if len(x.s.refused) > 0 {
				fmt.Fprintf(os.Stderr, "%-11s %-8s %s: answered %d p50 %v p99 %v; refused %d p50 %v p99 %v (codes %v)\n",
					w, mode, t.id, len(x.s.answered), quantileOf(x.s.answered, 0.5), quantileOf(x.s.answered, 0.99),
					len(x.s.refused), quantileOf(x.s.refused, 0.5), quantileOf(x.s.refused, 0.99), x.s.codes)
			}
		}
	}
	return nil
}

// runDup runs the one-key storm against t.
func runDup(ctx context.Context, o options, t *target, upURL string, rep *report) error {
	var st0 storeSnap
	var err error
	if t.meter != nil {
		if st0, err = t.meter.snap(); err != nil {
			return err
		}
	}
	cpu0, _ := t.proc.cpu()
	statsURL := upURL
	if t.id == "G" {
		// G's handler runs in its own process: its calls are counted there.
		statsURL = t.base
	}
	s, err := duplicates(ctx, t.base, statsURL, "dup-"+t.id+"-"+strconv.FormatInt(time.Now().UnixNano(), 36), o.dupRequests)
	if err != nil {
		return fmt.Errorf("duplicates on %s: %w", t.id, err)
	}
	cpu1, _ := t.proc.cpu()
	d := dupRow{target: t, s: s, cpu: cpu1 - cpu0}
	if t.meter != nil {
		st1, err := t.meter.snap()
		if err != nil {
			return err
		}
		d.storeOps, d.storeTrips, d.storeCPUSec, d.byName = st1.delta(st0)
	}
	rep.dups = append(rep.dups, d)
	fmt.Fprintf(os.Stderr, "dup %s: %d requests, %d upstream calls, codes %v, replayed %d, max %v, store %d ops (%d round trips)\n",
		t.id, s.requests, s.upstreamCalls, s.codes, s.replayed, s.max, d.storeOps, d.storeTrips)
	return nil
}

// measureLoad measures t under d of workload w, its keys prefixed by
// prefix: closed loop by wrk when useWrk, else by vegeta through c at
// rate requests a second (0: closed loop). With wrk the load generator's
// CPU is wrk's own, read from its process: the bench process only
// waited.
func measureLoad(ctx context.Context, o options, t *target, c *http.Client, w, prefix string, useWrk bool, rate int, d time.Duration) (*row, error) {
	var loadCPU float64
	var loadErr error
	x, err := measure(ctx, t, func() *phaseStats {
		if useWrk {
			var s *phaseStats
			if s, loadCPU, loadErr = wrkLoad(ctx, o.wrkBin, o.wrkDir, w, t.base, prefix, o.replayKeys, o.concurrency, d); loadErr != nil {
				return &phaseStats{codes: map[int]int{}}
			}
			return s
		}
		return attack(ctx, c, newTargeter(w, t.base, prefix, o.replayKeys), rate, o.concurrency, d)
	})
	if err = errors.Join(err, loadErr); err != nil {
		return nil, err
	}
	if useWrk {
		x.loadCPUSec = loadCPU
	}
	return x, nil
}

// valkeyYAML is the store section of an idemgate on the Valkey at addr,
// with o's store.valkey.layout.
func valkeyYAML(o options, addr string) string {
	y := fmt.Sprintf("store:\n  driver: valkey\n  valkey:\n    addrs: [%q]\n", addr)
	if o.valkeyLayout != 0 {
		y += fmt.Sprintf("    layout: %d\n", o.valkeyLayout)
	}
	return y
}

// startIdemgate writes a config for the benchmark with storeYAML as its
// store: section and starts idemgate, waiting for /healthz.
func startIdemgate(ctx context.Context, ps *procs, bin, name, upURL, storeYAML, logLevel string) (*proc, error) {
	port, err1 := freePort()
	adminPort, err2 := freePort()
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	admin := "127.0.0.1:" + strconv.Itoa(adminPort)
	cfg := fmt.Sprintf(`listen: %q
upstream:
  url: %q
  timeout: 30s
admin:
  listen: %q
%slog:
  format: json
  level: %s
defaults:
  owner: "header:X-User"
  lease: 10s
  wait_timeout: 10s
`, listen, upURL, admin, storeYAML, logLevel)
	// A directory of its own: idemgate watches the config's directory for
	// reloads, and the log files written next to it would wake the watcher
	// on every request.
	cfgDir := filepath.Join(ps.dir, name+"-config")
	if err := os.Mkdir(cfgDir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(cfgDir, "idemgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	p, err := ps.start(name, bin, []string{"serve", "--config", path, "--wait-store", "10s"}, false)
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, p, "http://"+admin+"/healthz"); err != nil {
		return nil, err
	}
	p.addr = "http://" + listen
	p.admin = "http://" + admin
	return p, nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run from inside the idemgate module (go run ./e2e/bench)")
	}
	return filepath.Dir(mod), nil
}

func countFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}
