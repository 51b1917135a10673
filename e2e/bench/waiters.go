package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// wWaiters is the workload of many concurrent waiters on one key, spread over
// two idemgate instances that share target D's Valkey (docs/performance.md,
// "Flat costs").
const wWaiters = "waiters10k"

// waiterMemTarget is the target (docs/performance.md, "Flat costs") for
// idemgate's memory per waiting request: under 16 KiB of peak RSS (VmHWM) over
// the RSS before the storm, per waiter (the estimate behind server.max_waiters:
// docs/configuration.md, "Waiters").
const waiterMemTarget = 16 << 10

// waitersEnv is what the waiters workload needs from the bench: the process
// table, the binaries it built and target D's Valkey.
type waitersEnv struct {
	ps          *procs
	idemgateBin string
	upstreamBin string
	valkeyAddr  string
	logLevel    string
}

// waiterInstance is one idemgate instance of a storm and what it cost.
type waiterInstance struct {
	name        string
	waiters     int   // requests sent to it
	rssBeforeKB int64 // VmRSS before its connections were opened
	rssIdleKB   int64 // VmRSS with every connection open and idle
	peakKB      int64 // VmHWM during the storm (reset when idle)
	peakWaiters int   // highest idemgate_waiters seen while polling
	// rssWaitingKB is the highest VmRSS polled before the leader's answer
	// came back: the waits' own cost, before the herd of replays after the
	// completion adds its garbage; waitingAt is the waiters gauge then.
	rssWaitingKB int64
	waitingAt    int
	valkeyCmds   int64 // commands its Valkey connections sent (CLIENT LIST tot-cmds)
	storeOps     map[string]int64
}

// perWaiterB returns the memory per waiter in bytes: the peak (VmHWM) less
// base (KiB).
func (w *waiterInstance) perWaiterB(baseKB int64) float64 { return w.perB(w.peakKB, baseKB) }

// waitingB returns the memory per waiter while waiting: the RSS polled
// before the leader's answer less the RSS with idle connections, over the
// waiters counted then, in bytes.
func (w *waiterInstance) waitingB() float64 {
	if w.waitingAt == 0 || w.rssWaitingKB == 0 {
		return 0
	}
	return float64(w.rssWaitingKB-w.rssIdleKB) * 1024 / float64(w.waitingAt)
}

// perB returns (kb - baseKB) per waiter in bytes.
func (w *waiterInstance) perB(kb, baseKB int64) float64 {
	if w.waiters == 0 || kb == 0 {
		return 0
	}
	return float64(kb-baseKB) * 1024 / float64(w.waiters)
}

// nonClaimOps is the store operations other than claims: what the shared
// wait, the completion and any other per-instance work cost.
func (w *waiterInstance) nonClaimOps() int64 {
	var n int64
	for op, v := range w.storeOps {
		if op != "claim" {
			n += v
		}
	}
	return n
}

// waiterStorm is one storm: n requests with one key, half on each instance.
type waiterStorm struct {
	n           int
	s           *dupStats
	inst        []*waiterInstance
	cmdsByName  map[string]int64 // INFO commandstats delta, every client of the Valkey
	connectTime time.Duration    // opening and warming every connection
	leadTime    time.Duration    // from the leader's send until all others were sent
}

// waitersResult is what the waiters workload reports.
type waitersResult struct {
	delay      time.Duration
	maxWaiters int
	storms     []*waiterStorm
	nofile     uint64
}

// runWaiters runs a storm of o.waitersSmall and one of o.waiters concurrent
// requests with one key, each on two fresh idemgate instances on target D's
// Valkey (half of the requests on each) in front of an upstream of its own
// that delays the slow path by o.waitersDelay.
func runWaiters(ctx context.Context, o options, env waitersEnv, rep *report) error {
	if env.valkeyAddr == "" {
		return errors.New("workload waiters10k needs target D (idemgate with Valkey)")
	}
	res := &waitersResult{delay: o.waitersDelay}
	var err error
	// Every waiter is a connection at both ends; the children inherit the
	// limit set here.
	if res.nofile, err = raiseNoFile(uint64(max(o.waiters, o.waitersSmall)) + 1024); err != nil {
		return err
	}
	up, err := env.ps.start("upstream-waiters", env.upstreamBin, []string{"-listen", "127.0.0.1:0", "-delay", o.waitersDelay.String()}, true)
	if err != nil {
		return err
	}
	defer up.stop()
	upURL := "http://" + up.addr
	for _, n := range []int{o.waitersSmall, o.waiters} {
		if n < 2 || (len(res.storms) > 0 && res.storms[0].n == n) {
			continue
		}
		res.maxWaiters = max(res.maxWaiters, n)
		st, err := storm(ctx, env, upURL, n)
		if err != nil {
			return fmt.Errorf("waiters storm of %d: %w", n, err)
		}
		res.storms = append(res.storms, st)
		fmt.Fprintf(os.Stderr, "waiters %d: %d upstream calls, codes %v, replayed %d, errors %d (%s), max %v\n",
			n, st.s.upstreamCalls, st.s.codes, st.s.replayed, st.s.errors, st.s.firstErr, st.s.max)
		for _, in := range st.inst {
			fmt.Fprintf(os.Stderr, "  %s: %d waiters (peak gauge %d), RSS %d -> %d (idle conns) -> %d (%d waiting) -> peak %d KiB, %.1f KiB per waiter (%.1f beyond idle, %.1f waiting), Valkey cmds %d, store ops %v\n",
				in.name, in.waiters, in.peakWaiters, in.rssBeforeKB, in.rssIdleKB, in.rssWaitingKB, in.waitingAt, in.peakKB,
				in.perWaiterB(in.rssBeforeKB)/1024, in.perWaiterB(in.rssIdleKB)/1024, in.waitingB()/1024, in.valkeyCmds, in.storeOps)
		}
	}
	rep.waiters = res
	return nil
}

// raiseNoFile raises the soft RLIMIT_NOFILE of this process (and so of the
// children it starts afterwards) to at least need, up to the hard limit,
// and returns the soft limit in force.
//
// Setrlimit is called even when the limit is high enough already: the Go
// runtime raises its own soft limit to the hard one at start and gives
// every child it execs the soft limit the process started with (often
// 1,024), unless the program sets the limit itself (package syscall,
// Setrlimit). The idemgate instances need the raised limit too.
func raiseNoFile(need uint64) (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, fmt.Errorf("getrlimit: %w", err)
	}
	if l.Max < need {
		return 0, fmt.Errorf("open files: the hard limit %d is below the %d this workload needs (raise it: ulimit -Hn, or LimitNOFILE)", l.Max, need)
	}
	l.Cur = max(l.Cur, need)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, fmt.Errorf("setrlimit: %w", err)
	}
	return l.Cur, nil
}

// storm runs one storm of n requests with one key on two fresh instances.
func storm(ctx context.Context, env waitersEnv, upURL string, n int) (*waiterStorm, error) {
	st := &waiterStorm{n: n}
	per := []int{n / 2, n - n/2}
	procs := make([]*proc, 2)
	storeYAML := fmt.Sprintf("store:\n  driver: valkey\n  valkey:\n    addrs: [%q]\n", env.valkeyAddr)
	for i := range 2 {
		// The cap with room to spare: every request of the storm must wait.
		// The store admission too: the storm's first claims arrive at once.
		serverYAML := fmt.Sprintf("server:\n  max_waiters: %d\n  max_store_waiting: %d\n", 2*per[i], 2*per[i])
		p, err := startIdemgate(ctx, env.ps, env.idemgateBin, fmt.Sprintf("idemgate-waiters-%d-%c", n, 'a'+i), upURL, storeYAML+serverYAML, env.logLevel)
		if err != nil {
			return nil, err
		}
		defer p.stop()
		procs[i] = p
		in := &waiterInstance{name: string(rune('a' + i)), waiters: per[i]}
		if in.rssBeforeKB, err = p.memKB("VmRSS"); err != nil {
			return nil, err
		}
		st.inst = append(st.inst, in)
	}

	// Open and warm every connection (one request without a key each, the
	// upstream's fast path) before the storm, at most 128 at a time: 10,000
	// connections at once would overflow the listen backlog (somaxconn)
	// and wait out SYN retransmissions.
	t0 := time.Now()
	conns := make([]*rawConn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.c.Close()
			}
		}
	}()
	err := parallel(ctx, 128, n, func(i int) error {
		p := procs[0]
		if i >= per[0] {
			p = procs[1]
		}
		c, err := dialRaw(strings.TrimPrefix(p.addr, "http://"))
		if err != nil {
			return err
		}
		conns[i] = c
		code, _, err := c.do("/v1/orders", "user-warm", "")
		if err == nil && code != http.StatusCreated {
			err = fmt.Errorf("warm-up request answered %d", code)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("opening connections: %w", err)
	}
	st.connectTime = time.Since(t0)
	select {
	case <-time.After(500 * time.Millisecond): // let the warm-up's garbage settle
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	cmds0, err := readCmdStats(env.valkeyAddr)
	if err != nil {
		return nil, err
	}
	for i, in := range st.inst {
		if in.rssIdleKB, err = procs[i].memKB("VmRSS"); err != nil {
			return nil, err
		}
		procs[i].resetPeak()
	}
	vc0, err := valkeyCmdsByPid(env.valkeyAddr, procs[0].pid(), procs[1].pid())
	if err != nil {
		return nil, err
	}
	ops0 := make([]map[string]int64, 2)
	for i := range 2 {
		if ops0[i], _, err = scrapeStore(procs[i].admin); err != nil {
			return nil, err
		}
	}
	before, err := upstreamSlowCalls(upURL)
	if err != nil {
		return nil, err
	}

	// Poll the waiters gauge of both instances while the storm runs.
	var leaderDone atomic.Bool
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	var pollWG sync.WaitGroup
	for i := range 2 {
		pollWG.Add(1)
		go func() {
			defer pollWG.Done()
			for pollCtx.Err() == nil {
				if _, w, err := scrapeStore(procs[i].admin); err == nil {
					in := st.inst[i]
					in.peakWaiters = max(in.peakWaiters, w)
					if kb, err := procs[i].memKB("VmRSS"); err == nil && !leaderDone.Load() && kb > in.rssWaitingKB {
						in.rssWaitingKB, in.waitingAt = kb, w
					}
				}
				select {
				case <-time.After(25 * time.Millisecond):
				case <-pollCtx.Done():
				}
			}
		}()
	}

	// The leader first, alone: once it has reached the upstream, every
	// other request finds the key running and waits, however long sending
	// them takes on this machine.
	key := "waiters-" + strconv.Itoa(n) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	lat := make([]time.Duration, n)
	codes := make([]int, n)
	replayed := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	one := func(i int) {
		defer wg.Done()
		t := time.Now()
		codes[i], replayed[i], errs[i] = conns[i].do("/v1/slow-orders", "user-dup", key)
		lat[i] = time.Since(t)
	}
	lead := time.Now()
	wg.Add(1)
	go func() {
		one(0)
		leaderDone.Store(true)
	}()
	for {
		now, err := upstreamSlowCalls(upURL)
		if err != nil {
			return nil, err
		}
		if now > before {
			break
		}
		if time.Since(lead) > 10*time.Second {
			return nil, errors.New("the leader did not reach the upstream within 10s")
		}
		time.Sleep(2 * time.Millisecond)
	}
	for i := 1; i < n; i++ {
		wg.Add(1)
		go one(i)
	}
	st.leadTime = time.Since(lead)
	wg.Wait()
	stopPoll()
	pollWG.Wait()

	after, err := upstreamSlowCalls(upURL)
	if err != nil {
		return nil, err
	}
	st.s = tally(n, after-before, codes, replayed, errs, lat)
	cmds1, err := readCmdStats(env.valkeyAddr)
	if err != nil {
		return nil, err
	}
	st.cmdsByName = map[string]int64{}
	for name, v := range cmds1 {
		if d := v - cmds0[name]; d > 0 && name != "info" && name != "client" {
			st.cmdsByName[name] = d
		}
	}
	vc1, err := valkeyCmdsByPid(env.valkeyAddr, procs[0].pid(), procs[1].pid())
	if err != nil {
		return nil, err
	}
	for i, in := range st.inst {
		in.valkeyCmds = vc1[i] - vc0[i]
		ops1, _, err := scrapeStore(procs[i].admin)
		if err != nil {
			return nil, err
		}
		in.storeOps = map[string]int64{}
		for op, v := range ops1 {
			if d := v - ops0[i][op]; d > 0 {
				in.storeOps[op] = d
			}
		}
		if in.peakKB, err = procs[i].memKB("VmHWM"); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// parallel calls f(0..n-1) from workers goroutines; the first error ends it.
func parallel(ctx context.Context, workers, n int, f func(i int) error) error {
	var mu sync.Mutex
	next := 0
	var first error
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil || i >= n || ctx.Err() != nil
				mu.Unlock()
				if stop {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// rawConn is one client connection of a storm: each waiter has its own,
// so the count of connections is the count of waiters.
type rawConn struct {
	c    net.Conn
	host string
	br   *bufio.Reader
}

func dialRaw(host string) (*rawConn, error) {
	c, err := net.DialTimeout("tcp", host, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return &rawConn{c: c, host: host, br: bufio.NewReader(c)}, nil
}

// do sends one keep-alive POST of requestBody (with a key when key is not
// empty) and reads the whole answer; it returns the status and whether the
// answer was a replay.
func (r *rawConn) do(path, owner, key string) (int, bool, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nX-User: %s\r\n", path, r.host, owner)
	if key != "" {
		fmt.Fprintf(&b, "Idempotency-Key: \"%s\"\r\n", key)
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(requestBody))
	b.Write(requestBody)
	// Generous: a waiter waits for the upstream and then for its turn to
	// be replayed among all others.
	_ = r.c.SetDeadline(time.Now().Add(2 * time.Minute))
	defer func() { _ = r.c.SetDeadline(time.Time{}) }()
	if _, err := io.WriteString(r.c, b.String()); err != nil {
		return 0, false, err
	}
	resp, err := http.ReadResponse(r.br, nil)
	if err != nil {
		return 0, false, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", err
}

// scrapeStore reads idemgate's /metrics at admin and returns its store
// operations by operation (every result) and the idemgate_waiters gauge.
func scrapeStore(admin string) (map[string]int64, int, error) {
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		return nil, 0, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("metrics: status %d", resp.StatusCode)
	}
	ops := map[string]int64{}
	waiters := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "idemgate_store_operation_duration_seconds_count{"); ok {
			labels, v, _ := strings.Cut(rest, "} ")
			var op string
			for _, l := range strings.Split(labels, ",") {
				if s, ok := strings.CutPrefix(l, `operation="`); ok {
					op = strings.TrimSuffix(s, `"`)
				}
			}
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			ops[op] += int64(f)
		} else if v, ok := strings.CutPrefix(line, "idemgate_waiters "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			waiters = int(f)
		}
	}
	return ops, waiters, sc.Err()
}

// valkeyCmdsByPid returns, for each pid, the commands its connections to
// the Valkey server at addr have sent (the sum of CLIENT LIST tot-cmds).
// Every idemgate instance names its connections "idemgate", so a
// connection is matched to its process by its socket: the client port in
// CLIENT LIST, the socket's inode in /proc/net/tcp, the inode among the
// process's descriptors.
func valkeyCmdsByPid(addr string, pids ...int) ([]int64, error) {
	list, err := valkeyCommand(addr, "CLIENT", "LIST")
	if err != nil {
		return nil, fmt.Errorf("CLIENT LIST: %w", err)
	}
	inodeOf, err := loopbackInodes()
	if err != nil {
		return nil, err
	}
	owner := map[string]int{} // inode -> index in pids
	for i, pid := range pids {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
			if err == nil && strings.HasPrefix(l, "socket:[") {
				owner[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = i
			}
		}
	}
	out := make([]int64, len(pids))
	for _, line := range strings.Split(list, "\n") {
		var port, lport string
		var cmds int64
		for _, kv := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(kv, "addr="); ok {
				_, port, _ = net.SplitHostPort(v)
			} else if v, ok := strings.CutPrefix(kv, "laddr="); ok {
				_, lport, _ = net.SplitHostPort(v)
			} else if v, ok := strings.CutPrefix(kv, "tot-cmds="); ok {
				cmds, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		// The client's socket: local port the client's, remote port the server's.
		if i, ok := owner[inodeOf[port+">"+lport]]; ok && port != "" {
			out[i] += cmds
		}
	}
	return out, nil
}

// loopbackInodes maps "localport>remoteport" of every IPv4 TCP socket to
// its inode (/proc/net/tcp, proc(5)); a local port alone may be shared by
// connections to different servers.
func loopbackInodes() (map[string]string, error) {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		_, lhex, ok1 := strings.Cut(f[1], ":")
		_, rhex, ok2 := strings.Cut(f[2], ":")
		lp, err1 := strconv.ParseUint(lhex, 16, 16)
		rp, err2 := strconv.ParseUint(rhex, 16, 16)
		if !ok1 || !ok2 || err1 != nil || err2 != nil {
			continue
		}
		out[strconv.FormatUint(lp, 10)+">"+strconv.FormatUint(rp, 10)] = f[9]
	}
	return out, nil
}

// markdown writes the waiters section of the report.
func (r *waitersResult) markdown(p func(string, ...any)) {
	if len(r.storms) == 0 {
		return
	}
	p("### Concurrent waiters on one key over two idemgate instances (workload waiters10k)\n\n")
	p("Two fresh idemgate instances per storm on target D's Valkey, `server.max_waiters` twice their share, in front of an upstream of their own that delays the slow path by %v; half of the requests on each, every request on its own keep-alive connection, opened and warmed (one request without a key) before the storm. "+
		"The leader is sent first; once it has reached the upstream the others are sent at once, so every one of them finds the key running. Open files limit (soft, inherited by idemgate): %d. "+
		"Memory: VmRSS before the connections were opened, with them open and idle, while the requests waited (the highest VmRSS polled every 25 ms before the leader's answer came back, and the idemgate_waiters gauge at that moment), and VmHWM during the whole storm (reset when idle; the herd of replays after the completion included). "+
		"Per waiter: peak − before (the connection included) and peak − idle (the target's figure: the storm over the RSS right before it, the herd of replays included), each over the instance's requests; waiting − idle over the waiters then (the wait alone). "+
		"Valkey commands per instance: CLIENT LIST tot-cmds of its connections (matched by socket; the commands its scripts ran count too), before and after; store ops from its /metrics.\n\n", r.delay, r.nofile)
	p("| requests | instance | its requests | peak waiters (gauge) | RSS before MiB | RSS idle conns MiB | RSS waiting MiB (waiters then) | peak RSS MiB | KiB/waiter peak − before | KiB/waiter peak − idle | KiB/waiter waiting − idle | Valkey commands | per request | store ops | other than claims |\n")
	p("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n")
	for _, st := range r.storms {
		for _, in := range st.inst {
			p("| %d | %s | %d | %d | %.1f | %.1f | %.1f (%d) | %.1f | %.1f | %.1f | %.1f | %d | %.2f | %s | %d |\n", st.n, in.name, in.waiters, in.peakWaiters,
				float64(in.rssBeforeKB)/1024, float64(in.rssIdleKB)/1024, float64(in.rssWaitingKB)/1024, in.waitingAt, float64(in.peakKB)/1024,
				in.perWaiterB(in.rssBeforeKB)/1024, in.perWaiterB(in.rssIdleKB)/1024, in.waitingB()/1024,
				in.valkeyCmds, float64(in.valkeyCmds)/float64(max(1, in.waiters)), byName(in.storeOps), in.nonClaimOps())
		}
	}
	p("\n| requests | upstream calls | statuses | replayed | errors | p50 ms | p99 ms | max ms | connecting s | sending after the leader s | Valkey commands (all clients, scripts' inner ones included) |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, st := range r.storms {
		p("| %d | %d | %s | %d | %d | %s | %s | %s | %.1f | %.2f | %s |\n", st.n, st.s.upstreamCalls, codes(st.s.codes), st.s.replayed, st.s.errors,
			ms(st.s.p50), ms(st.s.p99), ms(st.s.max), st.connectTime.Seconds(), st.leadTime.Seconds(), byName(st.cmdsByName))
	}
	p("\n")
	for _, st := range r.storms {
		if st.s.firstErr != "" {
			p("First error of the storm of %d: `%s`  \n", st.n, st.s.firstErr)
		}
	}
	big := r.storms[len(r.storms)-1]
	answered := big.s.errors == 0 && big.s.upstreamCalls == 1 && big.s.replayed == big.n-1
	p("Targets, storm of %d: all answered with 1 upstream call and %d replays: %s. ", big.n, big.n-1, metStr(answered))
	worst, wait := 0.0, 0.0
	for _, in := range big.inst {
		worst = max(worst, in.perWaiterB(in.rssIdleKB))
		wait = max(wait, in.waitingB())
	}
	p("Memory per waiter under 16 KiB (peak − idle): %.1f KiB at most, %s (the wait alone, waiting − idle: %.1f KiB). ", worst/1024, metStr(worst < waiterMemTarget), wait/1024)
	if len(r.storms) > 1 {
		small := r.storms[0]
		// The slope between the two storms: what one more waiter costs,
		// without the fixed costs a storm of any size pays (heap growth
		// steps, the shared wait, the first replays' buffers).
		for i := range big.inst {
			b, s := big.inst[i], small.inst[i]
			dn := float64(b.waiters - s.waiters)
			p("Instance %s, one more waiter (slope between the storms of %d and %d): peak − idle %.1f KiB, waiting − idle %.1f KiB. ", b.name, small.n, big.n,
				(float64(b.peakKB-b.rssIdleKB)-float64(s.peakKB-s.rssIdleKB))/dn, (float64(b.rssWaitingKB-b.rssIdleKB)-float64(s.rssWaitingKB-s.rssIdleKB))/dn)
		}
		flat := true
		for i := range big.inst {
			flat = flat && big.inst[i].nonClaimOps() <= small.inst[i].nonClaimOps()+2 &&
				big.inst[i].storeOps["claim"] <= 2*int64(big.inst[i].waiters)
		}
		p("Store work per instance O(1) beyond the requests' own claims (at most 2 claims per request, and the other operations of %d waiters no more than those of %d, +2): %s.", big.n, small.n, metStr(flat))
	}
	p("\n\n")
}

func metStr(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**not met**"
}
