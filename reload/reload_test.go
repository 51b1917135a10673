package reload

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/internal/syncbuf"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/policy/identity"
)

// waitLimit bounds every wait for the watcher; generous for loaded CI
// machines, never reached when things work.
const waitLimit = 10 * time.Second

func baseRoute() policy.Route {
	return policy.Route{
		Mode:             policy.ModeEnforce,
		Header:           "Idempotency-Key",
		Methods:          []string{"POST"},
		Owner:            identity.OwnerSource{Kind: identity.OwnerAuthorization},
		Fingerprint:      fingerprint.Spec{Body: fingerprint.BodyRaw},
		Lease:            time.Second,
		Concurrent:       policy.ConcurrentWait,
		WaitTimeout:      time.Second,
		ReplayStatuses:   []policy.StatusRange{{Min: 200, Max: 299}},
		MaxRequestBytes:  1 << 20,
		MaxResponseBytes: 1 << 20,
		OnStoreError:     policy.FailClosed,
		OnAbandoned:      policy.AbandonedTakeover,
	}
}

// loadNames is the test config format: one route name per line, each route
// matching "POST /NAME". policy.New validates the names, so a line such as
// "Not_Valid" makes a file that fails to load.
func loadNames(path string) (*policy.Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var routes []policy.Route
	for _, name := range strings.Fields(string(b)) {
		r := baseRoute()
		r.Name, r.Match = name, "POST /"+name
		routes = append(routes, r)
	}
	return policy.New(baseRoute(), routes)
}

// names lists a policy's route names, defaults route excluded.
func names(p *policy.Policy) string {
	var out []string
	for _, r := range p.Routes() {
		if r.Name != policy.DefaultRouteName {
			out = append(out, r.Name)
		}
	}
	return strings.Join(out, ",")
}

type fixture struct {
	dir, path string
	r         *Reloader
	reg       *prometheus.Registry
	logs      *syncbuf.Buffer
	loads     atomic.Int64
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replaceFile writes content to path atomically (temporary file, then
// rename), so the watcher never reads a half-written file and one call is
// exactly one reload attempt.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// newFixture writes content to a fresh config file and builds a Reloader on
// it; signals may be nil.
func newFixture(t *testing.T, content string, signals <-chan os.Signal) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), reg: prometheus.NewRegistry(), logs: &syncbuf.Buffer{}}
	f.path = filepath.Join(f.dir, "idemgate.yaml")
	writeFile(t, f.path, content)
	r, err := New(Options{
		Path: f.path,
		Load: func(path string) (*policy.Policy, error) {
			f.loads.Add(1)
			return loadNames(path)
		},
		Logger:     slog.New(slog.NewTextHandler(f.logs, nil)),
		Registerer: f.reg,
		Signals:    signals,
		Debounce:   20 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.r = r
	if got := names(r.Current()); got != strings.Join(strings.Fields(content), ",") {
		t.Fatalf("initial policy routes = %q", got)
	}
	return f
}

// run starts Run, waits until its directory watch is in place and stops it
// in t.Cleanup, failing the test if Run returned an error.
func (f *fixture) run(t *testing.T) {
	t.Helper()
	startRun(t, f.r)
}

func startRun(t *testing.T, r *Reloader) {
	t.Helper()
	watching := make(chan struct{})
	r.watching = func() { close(watching) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitLimit):
			t.Error("Run did not return after cancel")
		}
	})
	select {
	case <-watching:
	case err := <-done:
		t.Fatalf("Run returned before watching: %v", err)
	case <-time.After(waitLimit):
		t.Fatal("Run never started watching")
	}
}

func (f *fixture) count(result string) float64 {
	return testutil.ToFloat64(f.r.reloads.WithLabelValues(result))
}

func (f *fixture) waitRoutes(t *testing.T, want string) {
	t.Helper()
	if !gatetest.Until(waitLimit, func() bool { return names(f.r.Current()) == want }) {
		t.Fatalf("policy routes = %q after %v, want %q; logs:\n%s", names(f.r.Current()), waitLimit, want, f.logs)
	}
}

func TestSignalReloads(t *testing.T) {
	sig := make(chan os.Signal, 1)
	f := newFixture(t, "orders", sig)
	// Written before Run, so only the signal can pick it up.
	writeFile(t, f.path, "orders\npayments")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	sig <- syscall.SIGHUP
	f.waitRoutes(t, "orders,payments")
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(`
# HELP idemgate_config_reloads_total Config reload attempts by result (success: the new policy is active; failure: the file was rejected and the previous policy stays; restart_required: an accepted reload changed keys that only a restart applies).
# TYPE idemgate_config_reloads_total counter
idemgate_config_reloads_total{result="failure"} 0
idemgate_config_reloads_total{result="success"} 1
`), "idemgate_config_reloads_total"); err != nil {
		t.Error(err)
	}
	if !strings.Contains(f.logs.String(), "trigger=hangup") {
		t.Errorf("reload log does not name the signal:\n%s", f.logs)
	}
}

func TestFileWriteReloads(t *testing.T) {
	f := newFixture(t, "orders", nil)
	f.run(t)
	writeFile(t, f.path, "orders\nrefunds")
	f.waitRoutes(t, "orders,refunds")
}

func TestRenameOnSaveReloads(t *testing.T) {
	f := newFixture(t, "orders", nil)
	f.run(t)
	// What editors and config management do: write a temporary file next to
	// the config, then rename it over the config (a new inode).
	tmp := filepath.Join(f.dir, ".idemgate.yaml.swp")
	writeFile(t, tmp, "orders\ninvoices")
	if err := os.Rename(tmp, f.path); err != nil {
		t.Fatal(err)
	}
	f.waitRoutes(t, "orders,invoices")
	// The watch survives the inode change: a second save is seen too.
	tmp2 := filepath.Join(f.dir, ".idemgate.yaml.tmp")
	writeFile(t, tmp2, "invoices")
	if err := os.Rename(tmp2, f.path); err != nil {
		t.Fatal(err)
	}
	f.waitRoutes(t, "invoices")
}

func TestConfigMapSymlinkSwapReloads(t *testing.T) {
	// Kubernetes ConfigMap volume layout: NAME -> ..data/NAME,
	// ..data -> ..TIMESTAMP; an update swaps ..data atomically and no event
	// names NAME itself.
	dir := t.TempDir()
	mk := func(gen, content string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, gen), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, gen, "idemgate.yaml"), content)
	}
	mk("..2026_01", "orders")
	if err := os.Symlink("..2026_01", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "idemgate.yaml")
	if err := os.Symlink(filepath.Join("..data", "idemgate.yaml"), path); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r, err := New(Options{Path: path, Load: loadNames, Registerer: reg, Debounce: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{dir: dir, path: path, r: r, reg: reg, logs: &syncbuf.Buffer{}}
	startRun(t, r)
	mk("..2026_02", "orders\nshipping")
	tmpLink := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink("..2026_02", tmpLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if !gatetest.Until(waitLimit, func() bool { return names(r.Current()) != "orders" }) {
		t.Fatal("symlink swap never reloaded the policy")
	}
	if got := names(r.Current()); got != "orders,shipping" {
		t.Fatalf("routes = %q after swap", got)
	}
	if got := f.count("failure"); got != 0 {
		t.Errorf("failure count = %v, want 0", got)
	}
}

func TestInvalidFileKeepsPolicyAndCountsFailure(t *testing.T) {
	f := newFixture(t, "orders", nil)
	f.run(t)
	good := f.r.Current()
	successes := f.count("success")

	replaceFile(t, f.path, "orders\nNot_Valid")
	if !gatetest.Until(waitLimit, func() bool { return f.count("failure") >= 1 }) {
		t.Fatalf("invalid file never counted as a failure; logs:\n%s", f.logs)
	}
	if got := f.count("failure"); got != 1 {
		t.Errorf("failure count = %v, want 1 for one write", got)
	}
	if f.r.Current() != good {
		t.Fatal("invalid file replaced the policy")
	}
	if got := f.count("success"); got != successes {
		t.Errorf("success count moved from %v to %v on a rejected file", successes, got)
	}
	if logs := f.logs.String(); !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "Not_Valid") {
		t.Errorf("rejection not logged with its error:\n%s", logs)
	}
	// Explicit reloads report the error too, and keep the old policy.
	err := f.r.Reload()
	var fe *policy.FieldError
	if !errors.As(err, &fe) {
		t.Errorf("Reload error = %v, want one wrapping *policy.FieldError", err)
	}
	if f.r.Current() != good {
		t.Fatal("Reload of an invalid file replaced the policy")
	}
	if got := f.count("failure"); got != 2 {
		t.Errorf("failure count = %v, want 2", got)
	}

	// A fixed file is picked up again.
	replaceFile(t, f.path, "orders\nvalid")
	f.waitRoutes(t, "orders,valid")
	if got := f.count("success"); got != successes+1 {
		t.Errorf("success count = %v, want %v", got, successes+1)
	}
}

func TestRemovedFileKeepsPolicy(t *testing.T) {
	f := newFixture(t, "orders", nil)
	f.run(t)
	good := f.r.Current()
	if err := os.Remove(f.path); err != nil {
		t.Fatal(err)
	}
	if !gatetest.Until(waitLimit, func() bool { return f.count("failure") >= 1 }) {
		t.Fatal("removed file never counted as a failure")
	}
	if f.r.Current() != good {
		t.Fatal("removing the file replaced the policy")
	}
	// Restoring the very same content loads again: the failed attempt
	// forgot the old content's digest.
	writeFile(t, f.path, "orders")
	if !gatetest.Until(waitLimit, func() bool { return f.r.Current() != good }) {
		t.Fatal("restored file never reloaded")
	}
	if got := names(f.r.Current()); got != "orders" {
		t.Errorf("routes = %q", got)
	}
}

func TestPanickingLoadIsRejected(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	writeFile(t, path, "orders")
	initial, err := loadNames(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{Path: path, Initial: initial, Load: func(string) (*policy.Policy, error) { panic("compiler bug") }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "compiler bug") {
		t.Errorf("Reload = %v, want the panic as an error", err)
	}
	if r.Current() != initial {
		t.Error("a panicking load replaced the policy")
	}
	if got := testutil.ToFloat64(r.reloads.WithLabelValues("failure")); got != 1 {
		t.Errorf("failure count = %v, want 1", got)
	}

	// A Load that reports no error but no policy either is a rejection,
	// never a nil Current.
	r.load = func(string) (*policy.Policy, error) { return nil, nil }
	if err := r.Reload(); err == nil {
		t.Error("Reload accepted a nil policy")
	}
	if r.Current() != initial {
		t.Error("a nil policy replaced the current one")
	}
}

func TestInFlightPolicySurvivesReload(t *testing.T) {
	f := newFixture(t, "orders", nil)
	inFlight := f.r.Current() // what a request read when it started
	writeFile(t, f.path, "payments")
	if err := f.r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := names(f.r.Current()); got != "payments" {
		t.Fatalf("current routes = %q, want payments", got)
	}
	// The old pointer is still a complete, working policy.
	if got := names(inFlight); got != "orders" {
		t.Fatalf("in-flight routes = %q, want orders", got)
	}
	if rt := inFlight.Match(httptest.NewRequest("POST", "/orders", nil)); rt.Name != "orders" {
		t.Errorf("in-flight Match = %q, want orders", rt.Name)
	}
	if rt := f.r.Current().Match(httptest.NewRequest("POST", "/orders", nil)); rt.Name != policy.DefaultRouteName {
		t.Errorf("current Match = %q, want the defaults route", rt.Name)
	}
}

func TestUnchangedContentDoesNotReload(t *testing.T) {
	f := newFixture(t, "orders", nil)
	before := f.r.Current()
	loads := f.loads.Load() // New loaded the initial policy
	// A file event whose content is what was loaded last (touch, chmod,
	// ConfigMap resync) changes nothing and counts nothing.
	if err := f.r.reload("file", true); err != nil {
		t.Fatal(err)
	}
	if f.r.Current() != before || f.loads.Load() != loads || f.count("success") != 0 {
		t.Fatalf("unchanged content reloaded (loads %d, successes %v)", f.loads.Load()-loads, f.count("success"))
	}
	// An explicit reload always loads.
	if err := f.r.Reload(); err != nil {
		t.Fatal(err)
	}
	if f.loads.Load() != loads+1 || f.count("success") != 1 {
		t.Fatalf("explicit reload: loads %d, successes %v; want 1, 1", f.loads.Load()-loads, f.count("success"))
	}
}

func TestConcurrentReadersDuringReloads(t *testing.T) {
	f := newFixture(t, "orders", nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				p := f.r.Current()
				got := names(p)
				if got != "orders" && got != "orders,payments" {
					t.Errorf("reader saw routes %q", got)
					return
				}
			}
		}()
	}
	for i := range 50 {
		content := "orders"
		if i%2 == 0 {
			content = "orders\npayments"
		}
		writeFile(t, f.path, content)
		if err := f.r.Reload(); err != nil {
			t.Error(err)
		}
	}
	cancel()
	wg.Wait()
}

func TestNew(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	writeFile(t, path, "orders")

	if _, err := New(Options{Path: path}); err == nil {
		t.Error("New without Load succeeded")
	}
	r, err := New(Options{Path: path, Load: loadNames})
	if err != nil {
		t.Fatalf("New loading the initial policy: %v", err)
	}
	if got := names(r.Current()); got != "orders" {
		t.Errorf("initial routes = %q", got)
	}

	writeFile(t, path, "Bad_Name")
	if _, err := New(Options{Path: path, Load: loadNames}); err == nil {
		t.Error("New with an invalid initial file succeeded")
	}

	reg := prometheus.NewRegistry()
	initial, _ := loadNames(filepath.Join(dir, "missing"))
	if initial != nil {
		t.Fatal("loadNames of a missing file returned a policy")
	}
	writeFile(t, path, "orders")
	if _, err := New(Options{Path: path, Load: loadNames, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Path: path, Load: loadNames, Registerer: reg}); err == nil {
		t.Error("a second Reloader on one registry registered its counter twice")
	}
	// Both series exist before any reload, so failure-rate alerts work.
	if n := testutil.CollectAndCount(r.reloads, "idemgate_config_reloads_total"); n != 2 {
		t.Errorf("series before any reload = %d, want 2", n)
	}

	noPath, err := New(Options{Load: loadNames, Initial: r.Current()})
	if err != nil {
		t.Fatal(err)
	}
	if err := noPath.Reload(); !errors.Is(err, ErrNoPath) {
		t.Errorf("Reload without a path = %v, want ErrNoPath", err)
	}
}

func TestRunLifecycle(t *testing.T) {
	f := newFixture(t, "orders", nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.r.Run(ctx) }()
	if !gatetest.Until(waitLimit, f.r.running.Load) {
		t.Fatal("Run never started")
	}
	if err := f.r.Run(ctx); err == nil {
		t.Error("a second concurrent Run succeeded")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel = %v, want nil", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Run did not return after cancel")
	}

	missingDir := filepath.Join(t.TempDir(), "gone", "c.yaml")
	r, err := New(Options{Path: missingDir, Load: loadNames, Initial: f.r.Current()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); err == nil {
		t.Error("Run on a missing directory succeeded")
	}
}

// TestReloadRemembersAndWarnsOfScopeChanges: a reload keeps the replaced
// policy (Previous, for the proxy's lookup of layout 1 records under old
// route names) and warns, naming the route, when a route's key scope
// changes, since the retries of its recorded operations would run again.
func TestReloadRemembersAndWarnsOfScopeChanges(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "idemgate.yaml")
	writeFile(t, path, "orders")
	scope := "default"
	logs := &syncbuf.Buffer{}
	r, err := New(Options{
		Path: path,
		Load: func(path string) (*policy.Policy, error) {
			p, err := loadNames(path)
			if err != nil {
				return nil, err
			}
			// Rebuild with the scope of the moment.
			var routes []policy.Route
			for _, rt := range p.Routes() {
				if rt.Name != policy.DefaultRouteName {
					c := *rt
					c.Scope = scope
					routes = append(routes, c)
				}
			}
			return policy.New(baseRoute(), routes)
		},
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	first := r.Current()
	if len(r.Previous()) != 0 {
		t.Fatalf("Previous before any reload = %v", r.Previous())
	}
	writeFile(t, path, "create-order")
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if prev := r.Previous(); len(prev) != 1 || prev[0] != first {
		t.Fatalf("Previous after a rename = %v, want the first policy", prev)
	}
	if strings.Contains(logs.String(), "scope changed") {
		t.Fatalf("a rename that keeps the scope warned:\n%s", logs)
	}
	scope = "orders-v2"
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "key scope changed") || !strings.Contains(logs.String(), "route=create-order old_scope=default new_scope=orders-v2") {
		t.Fatalf("no warning naming the route whose scope changed:\n%s", logs)
	}
}

// TestReloadWarnsOfKeyAndOwnerSourceChanges: a reload that moves a route's
// key to another field, or takes its owners from another source, is
// applied but logged, naming the route: retries of earlier operations would
// run again (adversarial finding F3 of the second round).
func TestReloadWarnsOfKeyAndOwnerSourceChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	writeFile(t, path, "orders")
	header, owner := "Idempotency-Key", identity.OwnerSource{Kind: identity.OwnerAuthorization}
	logs := &syncbuf.Buffer{}
	r, err := New(Options{
		Path: path,
		Load: func(string) (*policy.Policy, error) {
			rt := baseRoute()
			rt.Name, rt.Match, rt.Header, rt.Owner = "orders", "POST /orders", header, owner
			return policy.New(baseRoute(), []policy.Route{rt})
		},
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	header = "X-Idempotency-Key"
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "key source changed") || !strings.Contains(logs.String(), "new_header=X-Idempotency-Key") {
		t.Fatalf("no warning for the key field change:\n%s", logs)
	}
	owner = identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-User"}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "owner source changed") || !strings.Contains(logs.String(), "new_owner=header:X-User") {
		t.Fatalf("no warning for the owner source change:\n%s", logs)
	}
}

// TestSignalWithoutPathKeepsServing: idemgate serve without --config gets
// SIGHUP like any other mode; with no file there is nothing to reload, and
// the Reloader says so, keeps its policy and keeps running
// (TestSIGHUPNeverKills has the process side).
func TestSignalWithoutPathKeepsServing(t *testing.T) {
	initial, err := policy.New(baseRoute(), nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	sig := make(chan os.Signal, 1)
	r, err := New(Options{Initial: initial, Signals: sig, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Load: func(string) (*policy.Policy, error) { t.Error("Load called without a path"); return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	sig <- syscall.SIGHUP
	if !gatetest.Until(waitLimit, func() bool { return strings.Contains(logs.String(), "nothing to reload") }) {
		t.Fatalf("no line for the SIGHUP without a config file:\n%s", logs)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if r.Current() != initial {
		t.Fatal("the policy changed")
	}
}

// TestReloadRefusesAnOwnerOfOneKindFromAnotherSource: header:X-User and
// header:X-Partner both store "h:42", so a reload that moves a route from
// one to the other in the same scope is refused and the running policy
// stays, also after a detour through another kind of owner (the first
// policy's records are still in the scope); moving the route to a scope of
// its own with the change is accepted.
func TestReloadRefusesAnOwnerOfOneKindFromAnotherSource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	writeFile(t, path, "orders")
	owner, scope := identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-User"}, ""
	r, err := New(Options{
		Path: path,
		Load: func(string) (*policy.Policy, error) {
			rt := baseRoute()
			rt.Name, rt.Match, rt.Owner, rt.Scope = "orders", "POST /orders", owner, scope
			return policy.New(baseRoute(), []policy.Route{rt})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	running := r.Current()
	owner = identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-Partner"}
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "header:X-Partner") {
		t.Fatalf("reload to header:X-Partner in the scope of header:X-User: %v, want refused naming it", err)
	}
	if r.Current() != running {
		t.Fatal("the refused reload replaced the running policy")
	}
	owner = identity.OwnerSource{Kind: identity.OwnerAuthorization}
	if err := r.Reload(); err != nil {
		t.Fatalf("reload to another kind of owner: %v", err)
	}
	owner = identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-Partner"}
	if err := r.Reload(); err == nil {
		t.Fatal("reload to header:X-Partner after a detour through authorization was applied")
	}
	scope = "partners"
	if err := r.Reload(); err != nil {
		t.Fatalf("reload to header:X-Partner in a scope of its own: %v", err)
	}
}

// TestReloadOwnerRefusalOutlivesManyReloads: the refusal of an owner
// source that changes within a scope holds however many reloads came
// between. The route moves from header:X-User to authorization (another
// kind: allowed), a lease is tuned once per deploy for a while, then the
// owner becomes header:X-Partner: header:X-User's records are in the
// store for their retention, not for 16 reloads, and partner 42 must
// never be answered user 42's response.
func TestReloadOwnerRefusalOutlivesManyReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	writeFile(t, path, "orders")
	owner, lease := identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-User"}, time.Second
	r, err := New(Options{
		Path: path,
		Load: func(string) (*policy.Policy, error) {
			rt := baseRoute()
			rt.Name, rt.Match, rt.Owner, rt.Lease = "orders", "POST /orders", owner, lease
			return policy.New(baseRoute(), []policy.Route{rt})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	owner = identity.OwnerSource{Kind: identity.OwnerAuthorization}
	if err := r.Reload(); err != nil {
		t.Fatalf("reload to another kind of owner: %v", err)
	}
	for i := range 20 {
		lease = time.Second + time.Duration(i+1)*time.Millisecond
		if err := r.Reload(); err != nil {
			t.Fatalf("harmless reload %d: %v", i+1, err)
		}
	}
	owner = identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-Partner"}
	if err := r.Reload(); err == nil {
		t.Fatal("reload to header:X-Partner in the scope of header:X-User was applied after 20 harmless reloads")
	}
}
