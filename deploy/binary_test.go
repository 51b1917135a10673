package deploy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/internal/syncbuf"
)

// buildLikeDockerfile runs the Dockerfile's own `go build ...` line for pkg
// (from the stage that builds it) with VERSION=version and the stage's ENV,
// writing the binary to dir instead of /out, and returns its path. So the
// flags the image ships with, -X main.version above all, are the ones
// exercised here.
func buildLikeDockerfile(t *testing.T, pkg, version, dir string) string {
	t.Helper()
	stages := parseDockerfile(t, path("Dockerfile"))
	var line string
	var env []string
	for _, s := range stages {
		for _, a := range ancestry(byName(stages), s) {
			for _, in := range a.Instr {
				if in.Cmd == "RUN" && strings.Contains(in.Args, "go build") && strings.Contains(in.Args, pkg) {
					line = in.Args[strings.Index(in.Args, "go build"):]
					env = nil
					for _, anc := range ancestry(byName(stages), s) {
						for _, e := range anc.find("ENV") {
							env = append(env, strings.Fields(e.Args)...)
						}
					}
				}
			}
		}
	}
	if line == "" {
		t.Fatalf("Dockerfile: no RUN go build for %s", pkg)
	}
	if !strings.Contains(line, "/out/") {
		t.Fatalf("Dockerfile: go build for %s does not write to /out/: %s", pkg, line)
	}
	line = strings.ReplaceAll(line, "/out/", dir+"/")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Dir = repoRoot
	cmd.Env = append(append(os.Environ(), env...), "VERSION="+version)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("Dockerfile build line for %s failed: %s\n%v\n%s", pkg, line, err, out)
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("Dockerfile build line for %s wrote no %s: %v", pkg, bin, err)
	}
	return bin
}

// process is a started binary whose output is kept for failure messages.
type process struct {
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan error
}

// start runs bin with args and env, killed in t.Cleanup if still running.
func start(t *testing.T, env []string, bin string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), out: &syncbuf.Buffer{}, done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s %q: %v", bin, args, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = p.cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s pid %d did not exit after kill", bin, p.cmd.Process.Pid)
		}
	})
	return p
}

// healthcheckArgs turns a compose healthcheck test ["CMD", "/idemgate",
// "healthcheck", "--url", URL] into a local command: the image path becomes
// bin and the URL's host:port becomes hostport.
func healthcheckArgs(t *testing.T, test []string, bin, hostport string) []string {
	t.Helper()
	if len(test) < 3 || test[0] != "CMD" || test[1] != "/idemgate" {
		t.Fatalf("healthcheck %q is not [CMD /idemgate ...]", test)
	}
	out := []string{bin}
	for _, a := range test[2:] {
		if u, err := url.Parse(a); err == nil && u.Scheme == "http" {
			u.Host = hostport
			a = u.String()
		}
		out = append(out, a)
	}
	return out
}

// waitHealthy runs the healthcheck command until it exits 0, as Docker
// would, for at most within; it returns the last failure.
func waitHealthy(argv []string, within time.Duration, p *process) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("process exited (%v) before it was healthy:\n%s", err, p.out.String())
		default:
		}
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err == nil {
			return nil
		}
		last = fmt.Errorf("%q: %v: %s", argv, err, out)
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not healthy within %v: %w\n%s", within, last, p.out.String())
}

// TestBinaryInComposeRoles builds idemgate and exampleapi with the
// Dockerfile's build lines and runs them the way the compose file does
// (same config, environment, command flags and healthchecks; loopback
// addresses instead of compose DNS), against the compose Valkey command.
// It checks what the static tests cannot: the version stamp lands, the
// healthchecks pass on a healthy stack and fail on a dead one, the
// secrets from the environment are in force, a retry on the second
// replica is replayed rather than forwarded, the metrics the dashboard
// queries exist, and SIGTERM drains within the stop grace period.
func TestBinaryInComposeRoles(t *testing.T) {
	vk := startComposeValkey(t)
	services := loadCompose(t)
	cc := composeConfig(t)
	dir := t.TempDir()
	const version = "v0.0.0-deploytest"
	idemgate := buildLikeDockerfile(t, "./cmd/idemgate", version, dir)
	exampleapi := buildLikeDockerfile(t, "./cmd/exampleapi", version, dir)

	// version: the -X main.version stamp reaches the binary.
	out, err := exec.Command(idemgate, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) {
		t.Fatalf("idemgate version = %q (%v), want it to contain %s: is -X main.version right?", out, err, version)
	}

	// validate: both container configs pass the CLI with their environment.
	for _, c := range containerConfigs(t) {
		p := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(p, c.raw, 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(idemgate, "validate", "--config", p)
		cmd.Env = append(os.Environ(), c.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("idemgate validate %s: %v\n%s", c.where, err, out)
		}
	}

	// exampleapi as compose runs it, with its healthcheck.
	api := services[cc.loaded.Upstream.URL.Hostname()]
	apiAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	apiArgs := strs(t, "exampleapi command", api["command"])
	apiArgs = slices.Clone(apiArgs)
	for i := range apiArgs {
		if i > 0 && apiArgs[i-1] == "--listen" {
			apiArgs[i] = apiAddr
		}
	}
	apiProc := start(t, nil, exampleapi, apiArgs...)
	if err := waitHealthy(healthcheckArgs(t, healthTest(t, "exampleapi", api), idemgate, apiAddr), 15*time.Second, apiProc); err != nil {
		t.Fatalf("exampleapi compose healthcheck: %v", err)
	}

	// Two replicas as compose runs them, sharing the Valkey.
	type replica struct {
		name          string
		proxy, admin  string
		proc          *process
		healthcheckOK []string
	}
	var replicas []replica
	for _, name := range composeReplicas(services) {
		s := services[name]
		var env []string
		for k, v := range composeEnv(t, name, s) {
			env = append(env, k+"="+v)
		}
		r := replica{
			name:  name,
			proxy: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))),
			admin: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))),
		}
		args := slices.Clone(strs(t, name+" command", s["command"]))
		args = append(args, "--config", composeConfigPath, // compose mounts this file at --config
			"--listen", r.proxy, "--admin-listen", r.admin,
			"--upstream", "http://"+apiAddr,
			"--valkey-addrs", net.JoinHostPort("127.0.0.1", strconv.Itoa(vk.port)))
		r.proc = start(t, env, idemgate, args...)
		r.healthcheckOK = healthcheckArgs(t, healthTest(t, name, s), idemgate, r.admin)
		replicas = append(replicas, r)
	}
	for _, r := range replicas {
		if err := waitHealthy(r.healthcheckOK, 15*time.Second, r.proc); err != nil {
			t.Fatalf("%s compose healthcheck: %v", r.name, err)
		}
	}
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(u string, header http.Header) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The compose healthcheck is liveness (/healthz); traffic waits for
	// readiness, which comes once the store is connected in the
	// background, as an orchestrator gates it.
	for _, r := range replicas {
		var code int
		var body string
		gatetest.Until(15*time.Second, func() bool {
			code, body = get("http://"+r.admin+"/readyz", nil)
			return code == http.StatusOK
		})
		if code != http.StatusOK {
			t.Errorf("%s /readyz = %d %s after 15s; the store password from IDEMGATE_STORE_VALKEY_PASSWORD should work", r.name, code, body)
		}
	}

	// A retry that lands on the other replica is replayed, not forwarded.
	post := func(r replica) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+r.proxy+"/v1/orders", strings.NewReader(`{"sku":"deploy-test","qty":1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer deploy-test")
		req.Header.Set("Idempotency-Key", `"deploy-test-1"`)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("POST via %s: %v", r.name, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	c1, b1 := post(replicas[0])
	c2, b2 := post(replicas[1])
	if c1 != http.StatusCreated || c2 != c1 || b2 != b1 {
		t.Errorf("POST twice with one key over two replicas: %d %q then %d %q; want the same 201 replayed", c1, b1, c2, b2)
	}
	if code, body := get("http://"+apiAddr+"/stats", nil); code != http.StatusOK || !strings.Contains(body, `"creates":1`) {
		t.Errorf("exampleapi /stats = %d %s; the order must reach the backend exactly once", code, body)
	}

	// The admin token comes from IDEMGATE_ADMIN_TOKEN.
	token := envValue(cc.env, "IDEMGATE_ADMIN_TOKEN")
	adminURL := "http://" + replicas[0].admin + "/admin/records"
	if code, _ := get(adminURL, nil); code != http.StatusUnauthorized {
		t.Errorf("/admin/records without a token = %d, want 401", code)
	}
	if code, _ := get(adminURL, http.Header{"Authorization": {"Bearer " + token}}); code == http.StatusUnauthorized || code == http.StatusForbidden {
		t.Errorf("/admin/records with IDEMGATE_ADMIN_TOKEN = %d; the env token is not in force", code)
	}

	// /metrics: every idemgate family is one the dashboard knows, and the
	// ones this traffic must have produced are there.
	_, metricsText := get("http://"+replicas[1].admin+"/metrics", nil)
	families := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(metricsText))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, "idemgate_") {
			continue
		}
		series := line[:strings.IndexAny(line, "{ ")]
		name, _, _, ok := resolveMetric(series)
		if !ok {
			t.Errorf("/metrics exports %s, which the dashboard's metric list lacks", series)
			continue
		}
		families[name] = true
		rec := &recorder{}
		checkExpr(rec, "/metrics", line[:strings.LastIndex(line, " ")])
		for _, m := range rec.msgs {
			t.Errorf("%s", m)
		}
	}
	for _, want := range []string{"idemgate_requests_total", "idemgate_store_operation_duration_seconds",
		"idemgate_claims_in_flight", "idemgate_waiters", "idemgate_build_info"} {
		if !families[want] {
			t.Errorf("/metrics lacks %s after a replayed request", want)
		}
	}
	if !strings.Contains(metricsText, `version="`+version+`"`) {
		t.Errorf("/metrics idemgate_build_info lacks version=%q", version)
	}
	if !strings.Contains(metricsText, `outcome="replayed"`) {
		t.Error(`/metrics: the second replica counted no outcome="replayed"`)
	}

	// SIGTERM drains and exits 0 within the compose stop grace period.
	grace, err := time.ParseDuration(fmt.Sprint(services[replicas[0].name]["stop_grace_period"]))
	if err != nil {
		t.Fatalf("stop_grace_period: %v", err)
	}
	for _, r := range replicas {
		if err := r.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range replicas {
		select {
		case err := <-r.proc.done:
			r.proc.done <- err
			if err != nil {
				t.Errorf("%s exited with %v after SIGTERM:\n%s", r.name, err, r.proc.out.String())
			}
		case <-time.After(grace):
			t.Errorf("%s still running %v after SIGTERM (compose would SIGKILL it)", r.name, grace)
		}
	}
	// The same healthcheck now fails: Docker would mark the container
	// unhealthy.
	if out, err := exec.Command(replicas[0].healthcheckOK[0], replicas[0].healthcheckOK[1:]...).CombinedOutput(); err == nil {
		t.Errorf("healthcheck passes against a stopped idemgate: %s", out)
	}
}
