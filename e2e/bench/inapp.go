package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/e2e/internal/aptget"
)

// wInapp is the comparison with idempotency inside the application: one
// Express handler (e2e/bench/inapp/server.js) behind two published npm
// middlewares on the bench's Valkey, against the same handler behind
// idemgate (docs/performance.md, "Against in-app middleware").
const wInapp = "inapp"

// inappDir is where the handler and the pinned npm packages
// (package.json, package-lock.json) live, relative to the module root.
const inappDir = "e2e/bench/inapp"

// nodeInstallHint is printed when node or npm is missing and cannot be
// installed.
const nodeInstallHint = "node and npm are needed for the in-app comparison: install them (Debian 12: apt-get install nodejs npm, or scripts/install-node.sh)"

// inappShape is one way of running the handler: bare, behind a middleware
// in its own process, or behind idemgate.
type inappShape struct {
	id, desc string
	mode     string // server.js --mode
	port     int    // the app's port, kept across a restart
	counts   string // the app's execution file
	app      *proc  // the node process
	gate     *proc  // idemgate in front of app, nil for the others
	base     string // what clients send to
}

// appURL is the app's own base URL (GET /count is never behind idemgate).
func (s *inappShape) appURL() string { return "http://" + s.app.addr }

// pids returns the processes whose CPU is the shape's: the node process
// and, for the gate, idemgate.
func (s *inappShape) pids() []int {
	out := []int{s.app.pid()}
	if s.gate != nil {
		out = append([]int{s.gate.pid()}, out...)
	}
	return out
}

// inappRow is what one shape did in each scenario.
type inappRow struct {
	shape *inappShape
	// (a) storms: requests with one key sent at once, each storm with
	// a key of its own; stormExecs has the handler's executions per storm,
	// stormCodes the statuses of all of them.
	stormExecs []int
	stormCodes map[int]int
	stormErrs  int
	// (b) kill: the idempotency process killed mid-call, restarted, the
	// request retried.
	killed                  bool
	inflight                string // what the client of the killed call got
	retry                   string // status and problem or message of the retry
	retryAfter              time.Duration
	killExec                int
	mismatchCode            int
	mismatch                string
	mismatchExec            int
	fresh, replay           *row
	freshExecs, replayExecs int
	// freshGateCPU and replayGateCPU are idemgate's share of the
	// shape's CPU seconds in (d).
	freshGateCPU, replayGateCPU float64
	// stuck is how long the record a killed call left keeps answering
	// the retry so (its PTTL), for the middlewares; "" when not read.
	stuck string
}

// inappResult is the in-app comparison's outcome.
type inappResult struct {
	node      string // node --version
	storm     int    // requests per storm of (a)
	storms    int    // storms of (a)
	delay     time.Duration
	killDelay time.Duration
	rows      []*inappRow
}

// ensureNode returns the node binary, installing node and npm with
// apt-get first when install is set and either is missing.
func ensureNode(ctx context.Context, log io.Writer, install bool) (string, error) {
	node, err1 := exec.LookPath("node")
	_, err2 := exec.LookPath("npm")
	if err1 == nil && err2 == nil {
		return node, nil
	}
	if !install {
		return "", errors.New(nodeInstallHint)
	}
	fmt.Fprintln(log, "node or npm not found: installing nodejs and npm with apt-get ...")
	apt, err := aptget.New(ctx, log, nodeInstallHint)
	if err != nil {
		return "", err
	}
	if err := apt.Install("nodejs", "npm"); err != nil {
		return "", fmt.Errorf("apt-get install nodejs npm: %w; %s", err, nodeInstallHint)
	}
	node, err1 = exec.LookPath("node")
	_, err2 = exec.LookPath("npm")
	if err := errors.Join(err1, err2); err != nil {
		return "", fmt.Errorf("after apt-get install: %w; %s", err, nodeInstallHint)
	}
	return node, nil
}

// npmModules returns a node_modules directory holding exactly the packages
// of root's e2e/bench/inapp/package-lock.json, running npm ci into a cache
// directory named by the lock file's hash when it is not there yet (under
// os.UserCacheDir, else under fallback): never into the repository. npm
// uses its configured registry. Two runs at once each install into a
// directory of their own and the first rename wins.
func npmModules(ctx context.Context, root, fallback string, log io.Writer) (string, error) {
	src := filepath.Join(root, inappDir)
	h := sha256.New()
	var files [][]byte
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", err
		}
		h.Write(b)
		files = append(files, b)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = fallback
	}
	parent := filepath.Join(base, "idemgate-bench")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	final := filepath.Join(parent, "inapp-"+hex.EncodeToString(h.Sum(nil))[:16])
	modules := filepath.Join(final, "node_modules")
	if _, err := os.Stat(filepath.Join(final, ".complete")); err == nil {
		return modules, nil
	}
	tmp, err := os.MkdirTemp(parent, "inapp-installing-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for i, f := range []string{"package.json", "package-lock.json"} {
		if err := os.WriteFile(filepath.Join(tmp, f), files[i], 0o644); err != nil {
			return "", err
		}
	}
	fmt.Fprintf(log, "npm ci of %s into %s ...\n", inappDir, final)
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir, cmd.Stdout, cmd.Stderr = tmp, log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("npm ci of %s (pinned in its package-lock.json) failed: %w; check that npm can reach its registry", inappDir, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Stat(filepath.Join(final, ".complete")); serr != nil {
			return "", fmt.Errorf("install npm packages: %w", err)
		}
	}
	return modules, nil
}

// inappEnv is what the comparison needs from the bench.
type inappEnv struct {
	ps          *procs
	root        string
	idemgateBin string
	valkey      *proc // target D's, or one of its own
	logLevel    string
	install     bool // apt-get nodejs npm when missing
}

// startApp starts server.js in shape s's mode on s.port (0: a free one),
// named name, and waits for its address.
func startApp(env inappEnv, node, modules, name string, s *inappShape) (*proc, error) {
	args := []string{filepath.Join(env.root, inappDir, "server.js"), "--mode", s.mode,
		"--port", strconv.Itoa(s.port), "--valkey", env.valkey.addr, "--counts", s.counts}
	p, err := env.ps.startEnv(name, node, args, []string{"NODE_PATH=" + modules, "NODE_ENV=production"}, true)
	if err != nil {
		return nil, err
	}
	if _, port, ok := strings.Cut(p.addr, ":"); ok {
		s.port, _ = strconv.Atoi(port)
	}
	return p, nil
}

// runInapp runs the four shapes through scenarios (a) to (d) and sets
// rep.inapp.
func runInapp(ctx context.Context, o options, env inappEnv, rep *report) error {
	node, err := ensureNode(ctx, os.Stderr, env.install)
	if err != nil {
		return err
	}
	modules, err := npmModules(ctx, env.root, env.ps.dir, os.Stderr)
	if err != nil {
		return err
	}
	version, _ := exec.Command(node, "--version").Output()
	res := &inappResult{node: strings.TrimSpace(string(version)), storm: o.inappStorm, storms: max(1, o.inappStorms),
		delay: 200 * time.Millisecond, killDelay: 500 * time.Millisecond}

	shapes := []*inappShape{
		{id: "bare", desc: "Express handler alone, no idempotency", mode: "none"},
		{id: "express-idempotency", desc: "express-idempotency 1.0.6 + express-idempotency-redis-adapter 1.0.8", mode: "express-idempotency"},
		{id: "node-idempotency", desc: "@node-idempotency/core 1.0.11 + storage-adapter-redis 1.0.2", mode: "node-idempotency"},
		{id: "idemgate", desc: "idemgate (Valkey store) in front of the bare handler", mode: "none"},
	}
	for _, s := range shapes {
		s.counts = filepath.Join(env.ps.dir, "inapp-"+s.id+".counts")
		if s.app, err = startApp(env, node, modules, "inapp-"+s.id, s); err != nil {
			return err
		}
		s.base = s.appURL()
		if s.id == "idemgate" {
			storeYAML := fmt.Sprintf("store:\n  driver: valkey\n  valkey:\n    addrs: [%q]\n", env.valkey.addr)
			if s.gate, err = startIdemgate(ctx, env.ps, env.idemgateBin, "idemgate-inapp", s.appURL(), storeYAML, env.logLevel); err != nil {
				return err
			}
			s.base = s.gate.addr
		}
		res.rows = append(res.rows, &inappRow{shape: s})
	}
	client := newClient(max(o.concurrency, o.inappStorm) * 2)
	defer client.CloseIdleConnections()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)

	for _, r := range res.rows {
		r.stormCodes = map[int]int{}
		for i := range res.storms {
			if err := inappStorm(ctx, client, r, fmt.Sprintf("storm-%s-%s-%d", r.shape.id, run, i), o.inappStorm, res.delay); err != nil {
				return fmt.Errorf("in-app %s, concurrent requests: %w", r.shape.id, err)
			}
		}
		if err := inappMismatch(ctx, client, r, "mismatch-"+r.shape.id+"-"+run); err != nil {
			return fmt.Errorf("in-app %s, different body: %w", r.shape.id, err)
		}
		fmt.Fprintf(os.Stderr, "inapp %s: (a) executions %v, statuses %s; (c) %s, executions %d\n",
			r.shape.id, r.stormExecs, codes(r.stormCodes), r.mismatch, r.mismatchExec)
	}
	if err := inappLoad(ctx, o, client, res.rows, env.valkey, run); err != nil {
		return err
	}
	if o.inappKill {
		for _, r := range res.rows {
			if err := inappKill(ctx, client, env, node, modules, r, "kill-"+r.shape.id+"-"+run, res.killDelay); err != nil {
				return fmt.Errorf("in-app %s, killed mid-call: %w", r.shape.id, err)
			}
			fmt.Fprintf(os.Stderr, "inapp %s: (b) in flight: %s; retry after %v: %s; executions %d\n",
				r.shape.id, r.inflight, r.retryAfter.Round(time.Millisecond), r.retry, r.killExec)
		}
	}
	rep.inapp = res
	return nil
}

// inappPost sends one POST /v1/orders with key and body (the bench's
// requestBody when nil), the handler delayed by delay, and returns the
// status and a short account of the answer: a problem's type name, a JSON
// message, or the start of the text.
func inappPost(ctx context.Context, client *http.Client, base, key string, body []byte, delay time.Duration) (int, string, error) {
	if body == nil {
		body = requestBody
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/orders", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User", "user-inapp")
	req.Header.Set("Idempotency-Key", `"`+key+`"`)
	if delay > 0 {
		req.Header.Set("X-Delay-Ms", strconv.FormatInt(delay.Milliseconds(), 10))
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return resp.StatusCode, "", err
	}
	what := ""
	if resp.Header.Get("Idempotent-Replayed") == "true" {
		what = "replayed"
	}
	if resp.StatusCode >= 300 {
		what = answerSummary(resp.Header.Get("Content-Type"), b)
	}
	return resp.StatusCode, what, nil
}

// answerSummary names an error answer in a few words: an RFC 9457
// problem's type (its last path segment), a JSON message, or the text.
func answerSummary(contentType string, b []byte) string {
	mt, _, _ := mime.ParseMediaType(contentType)
	if strings.HasSuffix(mt, "json") {
		var v struct{ Type, Message string }
		if json.Unmarshal(b, &v) == nil {
			if v.Type != "" {
				return v.Type[strings.LastIndexAny(v.Type, "/#")+1:]
			}
			if v.Message != "" {
				return v.Message
			}
		}
	}
	text := string(b)
	if strings.HasPrefix(mt, "text/html") {
		// Express's error page: the message is in its <pre>.
		if _, pre, ok := strings.Cut(text, "<pre>"); ok {
			text, _, _ = strings.Cut(pre, "</pre>")
		}
		text = htmlTag.ReplaceAllString(text, " ")
	}
	s := strings.Join(strings.Fields(text), " ")
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return s
}

// htmlTag matches an HTML tag, for answerSummary.
var htmlTag = regexp.MustCompile(`<[^>]*>`)

// executions asks the app how often its handler ran for key (the total
// over every key when key is "").
func executions(ctx context.Context, client *http.Client, s *inappShape, key string) (perKey, total int, err error) {
	if key != "" {
		key = `"` + key + `"`
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.appURL()+"/count?key="+urlQueryEscape(key), nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var v struct{ Executions, Total int }
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return 0, 0, fmt.Errorf("GET /count: %w", err)
	}
	return v.Executions, v.Total, nil
}

func urlQueryEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// inappStorm is scenario (a): n identical requests with one key released
// at once against a handler that answers delay after it ran, so that
// duplicates arrive while the first is running.
func inappStorm(ctx context.Context, client *http.Client, r *inappRow, key string, n int, delay time.Duration) error {
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			code, _, err := inappPost(ctx, client, r.shape.base, key, nil, delay)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.stormErrs++
				return
			}
			r.stormCodes[code]++
		}()
	}
	close(start)
	wg.Wait()
	n, _, err := executions(ctx, client, r.shape, key)
	r.stormExecs = append(r.stormExecs, n)
	return err
}

// mismatchBody is requestBody with another quantity: the same key sent
// with it is another operation.
var mismatchBody = bytes.Replace(requestBody, []byte(`"qty":1`), []byte(`"qty":2`), 1)

// inappMismatch is scenario (c): a request answered, then the same key
// with a different body.
func inappMismatch(ctx context.Context, client *http.Client, r *inappRow, key string) error {
	code, what, err := inappPost(ctx, client, r.shape.base, key, nil, 0)
	if err != nil {
		return err
	}
	if code != http.StatusCreated {
		return fmt.Errorf("first request answered %d %s", code, what)
	}
	if r.mismatchCode, what, err = inappPost(ctx, client, r.shape.base, key, mismatchBody, 0); err != nil {
		return err
	}
	r.mismatch = strconv.Itoa(r.mismatchCode)
	if what != "" {
		r.mismatch += " " + what
	}
	r.mismatchExec, _, err = executions(ctx, client, r.shape, key)
	return err
}

// inappKill is scenario (b): a request whose handler answers delay after
// it ran; once it has run, the process that keeps the idempotency state
// (idemgate for the gate, the app itself otherwise: the middleware lives
// in it) is killed with SIGKILL and started again on the same port and
// store, and the same request is sent again.
func inappKill(ctx context.Context, client *http.Client, env inappEnv, node, modules string, r *inappRow, key string, delay time.Duration) error {
	s := r.shape
	type answer struct {
		code int
		what string
		err  error
	}
	first := make(chan answer, 1)
	go func() {
		code, what, err := inappPost(ctx, client, s.base, key, nil, delay)
		first <- answer{code, what, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _, err := executions(ctx, client, s, key)
		if err != nil {
			return err
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the handler did not run within 10s")
		}
		select {
		case a := <-first:
			return fmt.Errorf("answered %d %s %v before the handler ran", a.code, a.what, a.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	victim := s.app
	if s.gate != nil {
		victim = s.gate
	}
	_ = victim.cmd.Process.Kill()
	<-victim.exited
	r.killed = true
	a := <-first
	switch {
	case a.err != nil:
		r.inflight = "connection closed"
	default:
		r.inflight = strings.TrimSpace(strconv.Itoa(a.code) + " " + a.what)
	}
	var err error
	if s.gate != nil {
		s.gate, err = restartIdemgate(ctx, env.ps, env.idemgateBin, "idemgate-inapp", victim)
	} else {
		s.app, err = startApp(env, node, modules, "inapp-"+s.id+"-restarted", s)
	}
	if err != nil {
		return err
	}
	t0 := time.Now()
	code, what, err := inappPost(ctx, client, s.base, key, nil, delay)
	r.retryAfter = time.Since(t0)
	if err != nil {
		r.retry = "error: " + err.Error()
	} else {
		r.retry = strings.TrimSpace(strconv.Itoa(code) + " " + what)
	}
	r.killExec, _, err = executions(ctx, client, s, key)
	if err != nil {
		return err
	}
	// Where each middleware keeps its record (express-idempotency: the
	// key as sent; @node-idempotency: prefix, method, path and key).
	record := map[string]string{
		"express-idempotency": `"` + key + `"`,
		"node-idempotency":    `node-idempotency:POST:/v1/orders:"` + key + `"`,
	}[s.mode]
	if record != "" {
		ms, err := valkeyCommand(env.valkey.addr, "PTTL", record)
		if err != nil {
			return fmt.Errorf("PTTL of the record: %w", err)
		}
		if v, err := strconv.ParseInt(ms, 10, 64); err == nil && v > 0 {
			r.stuck = (time.Duration(v) * time.Millisecond).Round(time.Minute).String()
		} else {
			r.stuck = "PTTL " + ms
		}
	}
	return nil
}

// restartIdemgate starts idemgate again from the config startIdemgate
// wrote for name, on the same ports as old (which has exited).
func restartIdemgate(ctx context.Context, ps *procs, bin, name string, old *proc) (*proc, error) {
	path := filepath.Join(ps.dir, name+"-config", "idemgate.yaml")
	p, err := ps.start(name+"-restarted", bin, []string{"serve", "--config", path, "--wait-store", "10s"}, false)
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, p, old.admin+"/healthz"); err != nil {
		return nil, err
	}
	p.addr, p.admin = old.addr, old.admin
	return p, nil
}

// inappLoad is scenario (d): fresh keys, then replays of keys completed
// beforehand, closed loop at o.concurrency, each phase split into
// o.rounds rounds that rotate through the shapes as the other workloads
// do. The CPU is the node process's and idemgate's; Valkey's apart.
func inappLoad(ctx context.Context, o options, client *http.Client, rows []*inappRow, vk *proc, run string) error {
	roundLen := o.duration / time.Duration(o.rounds)
	for _, w := range []string{wFresh, wReplay} {
		for round := range o.rounds {
			for k := range rows {
				r := rows[(k+round)%len(rows)]
				s := r.shape
				t := &target{id: s.id, desc: s.desc, base: s.base, proc: &proc{name: s.id, tree: s.pids}, meter: valkeyMeter{vk}}
				prefix := fmt.Sprintf("inapp-%s-%s-%s-%d-", run, s.id, w, round)
				if w == wReplay {
					if err := preloadReplay(ctx, client, s.base, prefix, o.replayKeys); err != nil {
						return fmt.Errorf("in-app %s replay preload: %w", s.id, err)
					}
				}
				if w == wFresh && round == 0 && o.warmup > 0 {
					attack(ctx, client, newTargeter(w, s.base, prefix+"warm-", o.replayKeys), 0, o.concurrency, o.warmup)
				}
				_, before, err := executions(ctx, client, s, "")
				if err != nil {
					return err
				}
				var gate0, gate1 float64
				if s.gate != nil {
					gate0, _ = s.gate.cpu()
				}
				x, err := measure(ctx, t, func() *phaseStats {
					return attack(ctx, client, newTargeter(w, s.base, prefix, o.replayKeys), 0, o.concurrency, roundLen)
				})
				if err != nil {
					return err
				}
				if s.gate != nil {
					gate1, _ = s.gate.cpu()
				}
				_, after, err := executions(ctx, client, s, "")
				if err != nil {
					return err
				}
				x.workload, x.mode = w, "closed"
				dst, execs, gateCPU := &r.fresh, &r.freshExecs, &r.freshGateCPU
				if w == wReplay {
					dst, execs, gateCPU = &r.replay, &r.replayExecs, &r.replayGateCPU
				}
				*execs += after - before
				*gateCPU += gate1 - gate0
				if *dst == nil {
					*dst = x
				} else {
					(*dst).merge(x)
				}
			}
		}
		for _, r := range rows {
			x := r.fresh
			if w == wReplay {
				x = r.replay
			}
			x.s.finish()
			fmt.Fprintf(os.Stderr, "inapp %-8s %s: %8.0f req/s p50 %v p99 %v errors %d, CPU %.3f ms/req, Valkey CPU %.3f ms/req %s\n",
				w, r.shape.id, x.s.rps(), x.s.quantile(0.5), x.s.quantile(0.99), x.s.errors,
				x.per1k(x.cpuSec), x.per1k(x.storeCPUSec), x.s.firstErr)
		}
	}
	return nil
}

// markdown writes the comparison's table.
func (res *inappResult) markdown(p func(string, ...any), o options) {
	p("### Against in-app middleware\n\n")
	p("The same Express handler (`e2e/bench/inapp/server.js`, Node.js %s, Express 4.21.2, `NODE_ENV=production`; it records each execution per key, then answers 201 with a 40-byte JSON body) run bare, "+
		"behind each npm middleware in its own process, and behind idemgate (target D's config), all on one valkey-server. "+
		"(a) %d storms of %d requests with one key released at once (a key per storm), the handler answering %v after it ran: executions per storm, statuses of all. "+
		"(b) the process holding the idempotency state (the app for the middlewares and the bare handler, idemgate for the gate) killed with SIGKILL once the handler had run and before it answered (%v), started again on the same port and store, the same request sent again. "+
		"(c) a request answered, then the same key with another body. "+
		"(d) closed loop, %d concurrent requests on keep-alive connections, %v per shape and workload in %d rounds rotating through the shapes, replays over %d keys completed beforehand; "+
		"CPU is the node process's plus idemgate's where present, Valkey's is apart; executions per request counted by the handler.\n\n",
		res.node, res.storms, res.storm, res.delay, res.killDelay, o.concurrency, o.duration, o.rounds, o.replayKeys)
	p("| shape | (a) executions per storm | (a) statuses | (b) in-flight call got | (b) retry got | (b) executions | (c) different body | (c) executions | (d) fresh req/s | (d) fresh CPU ms/req | (d) fresh Valkey CPU ms/req | (d) replay req/s | (d) replay CPU ms/req | (d) replay Valkey CPU ms/req | (d) executions per replay | (d) errors |\n")
	p("|---|---:|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range res.rows {
		inflight, retry, killExec := "-", "-", "-"
		if r.killed {
			inflight, killExec = r.inflight, strconv.Itoa(r.killExec)
			retry = fmt.Sprintf("%s (after %.1f s)", r.retry, r.retryAfter.Seconds())
		}
		execs := make([]string, len(r.stormExecs))
		for i, e := range r.stormExecs {
			execs[i] = strconv.Itoa(e)
		}
		storm := codes(r.stormCodes)
		if r.stormErrs > 0 {
			storm += fmt.Sprintf(" %d×error", r.stormErrs)
		}
		load := func(x *row, gateCPU float64) string {
			if x == nil {
				return "- | - | -"
			}
			split := ""
			if r.shape.gate != nil {
				split = fmt.Sprintf(" (idemgate %.3f)", x.per1k(gateCPU))
			}
			return fmt.Sprintf("%.0f | %.3f%s | %.3f", x.s.rps(), x.per1k(x.cpuSec), split, x.per1k(x.storeCPUSec))
		}
		perReplay, errs := "-", "-"
		if r.replay != nil && r.fresh != nil {
			perReplay = fmt.Sprintf("%.2f", float64(r.replayExecs)/float64(max(1, r.replay.s.requests)))
			errs = strconv.Itoa(r.fresh.s.errors + r.replay.s.errors)
		}
		p("| %s: %s | %s | %s | %s | %s | %s | %s | %d | %s | %s | %s | %s |\n", r.shape.id, r.shape.desc, strings.Join(execs, ", "), storm,
			inflight, retry, killExec, r.mismatch, r.mismatchExec, load(r.fresh, r.freshGateCPU), load(r.replay, r.replayGateCPU), perReplay, errs)
	}
	p("\n")
	for _, r := range res.rows {
		if r.stuck != "" {
			p("(b) The record %s left for the killed call expires in %s (its PTTL after the retry): until then every retry of that key gets the answer above.  \n", r.shape.id, r.stuck)
		}
	}
	for _, r := range res.rows {
		for _, x := range []*row{r.fresh, r.replay} {
			if x != nil && x.s.firstErr != "" {
				p("First error of %s %s: `%s`  \n", r.shape.id, x.workload, strings.TrimSpace(x.s.firstErr))
			}
		}
	}
	p("\n")
}
