package deploy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/needs"
)

// needPrometheus returns the path of the prometheus server, failing the
// test with how to install it when it is missing.
func needPrometheus(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err != nil {
		needs.Missing(t, "prometheus", "prometheus is required to check that the dashboard's and the rules' queries find idemgate's series: "+
			"`apt-get install -y prometheus` (Debian 12; scripts/test.sh installs it when missing)")
	}
	return p
}

// promServer is a Prometheus started by the test.
type promServer struct {
	url    string
	client *http.Client
}

// promResult is one sample of an instant query.
type promResult struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
}

// query runs an instant PromQL query and returns its vector (a scalar
// result becomes one sample without labels).
func (p *promServer) query(expr string) ([]promResult, error) {
	resp, err := p.client.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", expr, body.Error)
	}
	if body.Data.ResultType == "scalar" {
		return []promResult{{Metric: map[string]string{}}}, nil
	}
	var out []promResult
	if err := json.Unmarshal(body.Data.Result, &out); err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	return out, nil
}

// get decodes the data of a Prometheus API GET.
func (p *promServer) get(path string, data any) error {
	resp, err := p.client.Get(p.url + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: status %s", path, body.Status)
	}
	return json.Unmarshal(body.Data, data)
}

// startPrometheus runs the Debian prometheus binary on a free loopback port
// with a 1 s scrape and evaluation interval, scraping targets as job
// "idemgate" and loading rules; stopped in t.Cleanup.
func startPrometheus(t *testing.T, targets []string, rules string) *promServer {
	t.Helper()
	bin := needPrometheus(t)
	dir := t.TempDir()
	abs, err := filepath.Abs(rules)
	if err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: idemgate
    static_configs:
      - targets: [%s]
`, abs, strings.Join(quoted, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	p := start(t, nil, bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	t.Cleanup(func() { // SIGTERM first so it does not leave a locked TSDB behind
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.done:
			p.done <- err
		case <-time.After(10 * time.Second):
		}
	})
	srv := &promServer{url: "http://" + addr, client: &http.Client{Timeout: 10 * time.Second}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := srv.client.Get(srv.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return srv
			}
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("prometheus exited (%v):\n%s", err, p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready within 30s:\n%s", p.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startValkeyPlain runs a throw-away valkey-server on a free loopback port
// (extra arguments appended) and returns its port and a function that kills it (also run in
// t.Cleanup).
func startValkeyPlain(t *testing.T, extra ...string) (int, func()) {
	t.Helper()
	server, _ := needValkey(t)
	port := freePort(t)
	p := start(t, nil, server, append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", t.TempDir(),
		"--save", "", "--appendonly", "no", "--daemonize", "no"}, extra...)...)
	if err := waitListening(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 10*time.Second); err != nil {
		t.Fatalf("valkey-server: %v\n%s", err, p.out.String())
	}
	var once sync.Once
	return port, func() {
		once.Do(func() {
			_ = p.cmd.Process.Kill()
			select {
			case err := <-p.done:
				p.done <- err
			case <-time.After(10 * time.Second):
				t.Error("valkey-server did not exit after kill")
			}
		})
	}
}

// countingUpstream is the API behind idemgate in TestPrometheusScrapesIdemgate.
type countingUpstream struct {
	calls   sync.Map // path -> *atomic.Int64
	arrived chan string
}

func (u *countingUpstream) count(path string) int64 {
	v, _ := u.calls.LoadOrStore(path, new(atomic.Int64))
	return v.(*atomic.Int64).Load()
}

func (u *countingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v, _ := u.calls.LoadOrStore(r.URL.Path, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	_, _ = io.Copy(io.Discard, r.Body)
	select {
	case u.arrived <- r.URL.Path:
	default:
	}
	switch {
	case r.URL.Path == "/v1/broken":
		// The connection dies mid-exchange: idemgate answers 502.
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	case r.URL.Path == "/v1/slow":
		time.Sleep(1500 * time.Millisecond)
	case strings.HasPrefix(r.URL.Path, "/v1/hang"):
		// Long enough for a proxy to be killed, or the store, mid-call.
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"path":%q}`, r.URL.Path)
}

// idemgateUnderTest is one idemgate process.
type idemgateUnderTest struct {
	name, proxy, admin, configPath string
	config                         []byte
	proc                           *process
}

// promTestConfig is the idemgate configuration of the Prometheus test: a
// route per behaviour the dashboard and the alerts watch.
const promTestConfig = `listen: "%s"
upstream:
  url: "%s"
  timeout: 10s
admin:
  listen: "%s"
store:
  driver: valkey
  valkey:
    addrs: ["127.0.0.1:%d"]
    acks:
      replicas: 1
      timeout: 200ms
server:
  shutdown_timeout: 15s
log:
  format: json
  level: warn
defaults:
  methods: [POST]
  owner: authorization
  lease: 10s
routes:
  - name: orders
    match: "POST /v1/orders"
    required: true
  - name: conflict
    match: "POST /v1/slow"
    concurrent: conflict
  - name: takeover
    match: "POST /v1/hang"
    lease: 1s
    on_abandoned: takeover
  - name: reject
    match: "POST /v1/hang-reject"
    lease: 1s
    on_abandoned: reject
  - name: broken
    match: "POST /v1/broken"
  - name: open
    match: "POST /v1/open"
    on_store_error: fail_open
`

// TestPrometheusScrapesIdemgate runs a real Prometheus (Debian's) that
// scrapes two real idemgate processes sharing a real Valkey and loads the
// alert rules, drives traffic that produces every outcome the dashboard and
// the rules watch (forwarded, replayed, passthrough, missing key, 422, 409,
// 502, a takeover after a proxy is SIGKILLed mid-call, an abandoned call, a
// rejected config reload, heartbeat failures, 503 store errors and fail-open
// forwards after the store is killed), and asserts through Prometheus' HTTP
// API that every PromQL expression of the dashboard returns data, every
// series the rules select exists, every rule evaluates without error, and
// the event alerts fire (and the store alert is pending) with the expected
// labels.
func TestPrometheusScrapesIdemgate(t *testing.T) {
	needPrometheus(t)
	bin := buildLikeDockerfile(t, "./cmd/idemgate", "v0.0.0-promtest", t.TempDir())
	vkPort, killValkey := startValkeyPlain(t)
	// A replica, so claims, extends and completions wait for its
	// acknowledgement (store.valkey.acks) and the ack metrics exist.
	_, killReplica := startValkeyPlain(t, "--replicaof", "127.0.0.1", strconv.Itoa(vkPort))
	up := &countingUpstream{arrived: make(chan string, 16)}
	api := httptest.NewServer(up)
	t.Cleanup(api.Close)

	var inst []*idemgateUnderTest
	for _, name := range []string{"a", "b"} {
		g := &idemgateUnderTest{
			name:  name,
			proxy: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))),
			admin: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))),
		}
		g.config = []byte(fmt.Sprintf(promTestConfig, g.proxy, api.URL, g.admin, vkPort))
		g.configPath = filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(g.configPath, g.config, 0o600); err != nil {
			t.Fatal(err)
		}
		g.proc = start(t, nil, bin, "serve", "--config", g.configPath)
		inst = append(inst, g)
	}
	a, b := inst[0], inst[1]
	client := &http.Client{Timeout: 15 * time.Second}
	do := func(method, u, key string, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, u, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer prometheus-test")
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", strconv.Quote(key))
		}
		resp, err := client.Do(req)
		if err != nil {
			return -1 // a killed proxy
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	for _, g := range inst {
		deadline := time.Now().Add(15 * time.Second)
		for do(http.MethodGet, "http://"+g.admin+"/readyz", "", "") != http.StatusOK {
			if time.Now().After(deadline) {
				t.Fatalf("idemgate %s not ready:\n%s", g.name, g.proc.out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	prom := startPrometheus(t, []string{a.admin, b.admin}, rulesFile)
	waitFor := func(what string, within time.Duration, cond func() error) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			err := cond()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s within %v: %v", what, within, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	// Both targets scraped at least twice before traffic, so counters are
	// seen growing from their first value.
	waitFor("both idemgates scraped", 20*time.Second, func() error {
		r, err := prom.query(`count_over_time(up{job="idemgate"}[1m]) >= 2 and up == 1`)
		if err != nil || len(r) != 2 {
			return fmt.Errorf("%v %v", r, err)
		}
		return nil
	})
	// drain forgets arrivals nobody waited for, so the next awaitUpstream
	// sees the call it is about.
	drain := func() {
		for {
			select {
			case <-up.arrived:
			default:
				return
			}
		}
	}
	awaitUpstream := func(path string) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case p := <-up.arrived:
				if p == path {
					return
				}
			case <-timeout:
				t.Fatalf("upstream never got %s", path)
			}
		}
	}
	expect := func(what string, got, want int) {
		t.Helper()
		if got != want {
			t.Errorf("%s: status %d, want %d", what, got, want)
		}
	}

	// Forwarded, replayed on the other replica, mismatch, missing key,
	// passthrough, upstream error.
	// (b is killed later, and its series go stale: a keeps the replay.)
	expect("first order on b", do(http.MethodPost, "http://"+b.proxy+"/v1/orders", "k1", `{"n":1}`), 201)
	expect("retry on a", do(http.MethodPost, "http://"+a.proxy+"/v1/orders", "k1", `{"n":1}`), 201)
	expect("key reused", do(http.MethodPost, "http://"+a.proxy+"/v1/orders", "k1", `{"n":2}`), 422)
	expect("no key", do(http.MethodPost, "http://"+a.proxy+"/v1/orders", "", `{"n":3}`), 400)
	expect("passthrough", do(http.MethodGet, "http://"+a.proxy+"/v1/orders", "", ""), 201)
	expect("broken upstream", do(http.MethodPost, "http://"+a.proxy+"/v1/broken", "x1", `{}`), 502)
	if n := up.count("/v1/orders"); n != 2 { // the first POST and the passthrough GET
		t.Errorf("upstream got %d calls on /v1/orders, want 2", n)
	}

	// 409: a duplicate while the first still runs (concurrent: conflict).
	var wg sync.WaitGroup
	drain()
	wg.Add(1)
	go func() {
		defer wg.Done()
		do(http.MethodPost, "http://"+a.proxy+"/v1/slow", "c1", `{}`)
	}()
	awaitUpstream("/v1/slow")
	expect("duplicate while running", do(http.MethodPost, "http://"+b.proxy+"/v1/slow", "c1", `{}`), 409)
	wg.Wait()

	// b is SIGKILLed holding two claims; after their 1 s lease a retry on a
	// takes the first over and the second (on_abandoned: reject) is
	// abandoned.
	for _, p := range []string{"/v1/hang", "/v1/hang-reject"} {
		drain()
		wg.Add(1)
		go func() {
			defer wg.Done()
			do(http.MethodPost, "http://"+b.proxy+p, "h-"+p, `{}`)
		}()
		awaitUpstream(p)
	}
	if err := b.proc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	time.Sleep(1500 * time.Millisecond)
	expect("retry of a call whose proxy died", do(http.MethodPost, "http://"+a.proxy+"/v1/hang", "h-/v1/hang", `{}`), 201)
	if n := up.count("/v1/hang"); n != 2 {
		t.Errorf("upstream got %d calls on /v1/hang, want 2 (the killed one and the takeover)", n)
	}
	if code := do(http.MethodPost, "http://"+a.proxy+"/v1/hang-reject", "h-/v1/hang-reject", `{}`); code < 400 {
		t.Errorf("retry of an abandoned call on an on_abandoned: reject route: %d, want an error", code)
	}

	// A config edit idemgate rejects, then the good file again.
	reloads := func(result string) float64 {
		r, err := prom.query(fmt.Sprintf(`idemgate_config_reloads_total{instance=%q,result=%q}`, a.admin, result))
		if err != nil || len(r) != 1 {
			return -1
		}
		v, _ := strconv.ParseFloat(fmt.Sprint(r[0].Value[1]), 64)
		return v
	}
	if err := os.WriteFile(a.configPath, []byte("listen: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor("the rejected reload counted", 20*time.Second, func() error {
		if v := reloads("failure"); v < 1 {
			return fmt.Errorf("failures %v", v)
		}
		return nil
	})
	if err := os.WriteFile(a.configPath, a.config, 0o600); err != nil {
		t.Fatal(err)
	}

	// While a call runs, the replica dies (its extensions are not
	// acknowledged), then the store: the extensions fail. Then keyed
	// requests fail closed (503), a fail_open route forwards, and readiness
	// fails.
	drain()
	wg.Add(1)
	go func() {
		defer wg.Done()
		do(http.MethodPost, "http://"+a.proxy+"/v1/hang", "h-heartbeat", `{}`)
	}()
	awaitUpstream("/v1/hang")
	killReplica()
	time.Sleep(time.Second)
	killValkey()
	wg.Wait()
	expect("keyed request without a store", do(http.MethodPost, "http://"+a.proxy+"/v1/orders", "k-down", `{}`), 503)
	expect("fail_open route without a store", do(http.MethodPost, "http://"+a.proxy+"/v1/open", "o1", `{}`), 201)
	expect("readiness without a store", do(http.MethodGet, "http://"+a.admin+"/readyz", "", ""), 503)

	// Every family Prometheus holds is one the dashboard knows; pending
	// ones (pendingMetrics) must not exist yet.
	var names []string
	if err := prom.get("/api/v1/label/__name__/values", &names); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.HasPrefix(n, "idemgate_") {
			continue
		}
		if _, _, _, ok := resolveMetric(n); !ok {
			if _, pending := pendingMetrics[n]; pending {
				t.Errorf("idemgate now exports %s: move it from pendingMetrics to idemgateMetrics and give it a dashboard panel", n)
			} else {
				t.Errorf("Prometheus scraped %s, which the dashboard's metric list lacks", n)
			}
		}
	}

	// The dashboard: every target expression returns data.
	exprs := dashboardExprs(t)
	dashQuery := func(e string) string {
		return strings.NewReplacer("$__rate_interval", "30s", "$route", ".*").Replace(e)
	}
	// The rules: every selector they use finds series (the pending metric
	// excepted), every full expression evaluates.
	var selectors []string
	rules := loadRules(t, rulesFile)
	for _, r := range rules {
		for _, m := range metricRef.FindAllString(r.Expr, -1) {
			name, _, _ := strings.Cut(m, "{")
			if _, pending := pendingMetrics[name]; pending || slices.Contains(selectors, m) {
				continue
			}
			selectors = append(selectors, m)
		}
	}
	waitFor("every dashboard query and rule selector returns data", 45*time.Second, func() error {
		var missing []string
		for _, e := range exprs {
			if r, err := prom.query(dashQuery(e)); err != nil || len(r) == 0 {
				missing = append(missing, fmt.Sprintf("dashboard %s (%v)", dashQuery(e), err))
			}
		}
		for _, s := range selectors {
			if r, err := prom.query(s); err != nil || len(r) == 0 {
				missing = append(missing, fmt.Sprintf("rule selector %s (%v)", s, err))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("no data for:\n  %s", strings.Join(missing, "\n  "))
		}
		return nil
	})
	for _, r := range rules {
		if _, err := prom.query(r.Expr); err != nil {
			t.Errorf("rule %s: %v", r.Alert, err)
		}
	}
	for name := range pendingMetrics {
		if r, err := prom.query(name); err != nil || len(r) != 0 {
			t.Errorf("pending metric %s: %v %v; it exists now, align the rules and the dashboard", name, r, err)
		}
	}

	// The rules loaded and evaluate cleanly; the event alerts fire.
	// Alerts without `for:` fire; those with one are pending (their `for`
	// is minutes long).
	want := map[string]map[string]string{
		"IdemgateLeaseTakeovers":             {"route": "takeover", "state": "firing"},
		"IdemgateOutcomeUnknown":             {"route": "reject", "state": "firing"},
		"IdemgateHeartbeatFailures":          {"route": "takeover", "instance": a.admin, "state": "firing"},
		"IdemgateFailOpen":                   {"route": "open", "state": "firing"},
		"IdemgateConfigReloadFailed":         {"instance": a.admin, "state": "firing"},
		"IdemgateStoreWritesNotAcknowledged": {"instance": a.admin, "state": "firing"},
		"IdemgateStoreUnreachable":           {"instance": a.admin, "state": "pending"},
	}
	waitFor("the event alerts fire", 30*time.Second, func() error {
		var groups struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
					Alerts    []struct {
						Labels map[string]string `json:"labels"`
						State  string            `json:"state"`
					} `json:"alerts"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := prom.get("/api/v1/rules?type=alert", &groups); err != nil {
			return err
		}
		var problems []string
		loaded := 0
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				loaded++
				if r.Health == "err" || r.LastError != "" {
					problems = append(problems, fmt.Sprintf("%s: health %s %s", r.Name, r.Health, r.LastError))
				}
				labels, ok := want[r.Name]
				if !ok {
					continue
				}
				firing := slices.ContainsFunc(r.Alerts, func(a struct {
					Labels map[string]string `json:"labels"`
					State  string            `json:"state"`
				}) bool {
					if a.State != labels["state"] || a.Labels["job"] != "idemgate" || a.Labels["severity"] == "" {
						return false
					}
					for k, v := range labels {
						if k != "state" && a.Labels[k] != v {
							return false
						}
					}
					return true
				})
				if !firing {
					problems = append(problems, fmt.Sprintf("%s not in the state and with the labels %v: %+v", r.Name, labels, r.Alerts))
				}
			}
		}
		if loaded != len(rules) {
			problems = append(problems, fmt.Sprintf("%d alerting rules loaded, the file has %d", loaded, len(rules)))
		}
		if len(problems) > 0 {
			return fmt.Errorf("%s", strings.Join(problems, "\n"))
		}
		return nil
	})
}

// dashboardExprs returns every PromQL expression of the dashboard.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(path("deploy", "grafana", "idemgate-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if tg.Expr != "" && !slices.Contains(out, tg.Expr) {
				out = append(out, tg.Expr)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("dashboard: no expressions")
	}
	return out
}
