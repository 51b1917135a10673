// Package reload keeps the current policy and replaces it atomically when the config file changes or the process gets SIGHUP.
package reload

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/policy"
)

// DefaultDebounce is how long the watcher waits after the last file system
// event before it reloads: editors and Kubernetes ConfigMap updates produce a
// burst of events (rename, create, write, chmod) for one logical change.
const DefaultDebounce = 150 * time.Millisecond

// maxDebounce bounds how long a steady stream of events can postpone a
// reload.
const maxDebounce = 2 * time.Second

// ErrNoPath is returned by Reload when the Reloader has no config file path.
var ErrNoPath = errors.New("reload: no config file path")

// Options configures a Reloader.
type Options struct {
	// Path is the config file. Its directory is watched, so the file may be
	// replaced by rename (editors' atomic save) or be a symlink swapped
	// through a parent symlink (Kubernetes ConfigMap volumes). "" disables
	// file watching and Reload.
	Path string
	// Load reads and validates the file at path and compiles its policy.
	// An error (or a nil policy) rejects the file; the old policy stays.
	// Required.
	Load func(path string) (*policy.Policy, error)
	// Initial is the policy to start with; nil makes New call Load(Path).
	Initial *policy.Policy
	// Logger receives one line per reload attempt; nil discards.
	Logger *slog.Logger
	// Registerer receives idemgate_config_reloads_total{result="success"|"failure"};
	// nil leaves the counter unregistered.
	Registerer prometheus.Registerer
	// Signals triggers a reload for every value received (cmd passes a
	// channel given to signal.Notify for SIGHUP); nil means none. Without
	// a Path each value is logged as a reload with nothing to reload.
	Signals <-chan os.Signal
	// Debounce overrides DefaultDebounce when > 0.
	Debounce time.Duration
	// RestartKeys, when set, is called after each accepted reload (under
	// the reload lock, so right after its Load) and returns the keys of the
	// loaded file that differ from those the process runs with but that a
	// reload cannot apply (listeners, upstream, store, ...). Each reload
	// that finds some logs a warning naming them and counts
	// result="restart_required", as well as "success" for its policy.
	RestartKeys func() []string
}

// Reloader holds the current policy. Requests read Current once and keep
// that pointer, so a reload never changes the policy of a request in flight.
type Reloader struct {
	path     string
	load     func(string) (*policy.Policy, error)
	log      *slog.Logger
	signals  <-chan os.Signal
	debounce time.Duration

	current atomic.Pointer[policy.Policy]
	prevMu  sync.Mutex
	prev    []*policy.Policy // replaced policies, oldest first; see Previous
	// owners refuses a policy that takes a scope's owners of one kind
	// from another source than any policy this process ran did: their
	// records are still there, under owner values the new source gives
	// other principals. Every policy counts, not only the last ones
	// (Previous), so neither a detour through another owner kind nor many
	// reloads clear the way.
	owners  policy.OwnerLedger
	reloads *prometheus.CounterVec
	running atomic.Bool
	restart func() []string
	// watching, when set (tests only), is called once Run's directory watch
	// is in place, so a test knows its next file change will be seen.
	watching func()

	mu sync.Mutex // serializes reloads; guards lastSum
	// lastSum is the SHA-256 of the file content last attempted by the
	// watcher or Reload, so that events that do not change the content
	// (chmod, touch, a ConfigMap swap to identical data) cause no reload.
	lastSum [sha256.Size]byte
}

// New returns a Reloader holding opts.Initial, or the policy loaded from
// opts.Path when Initial is nil. It returns an error when Load is nil, when
// the initial load fails, or when the counter cannot be registered (for
// example a second Reloader on the same Registerer).
func New(opts Options) (*Reloader, error) {
	if opts.Load == nil {
		return nil, errors.New("reload: Options.Load is nil")
	}
	r := &Reloader{
		path:     opts.Path,
		load:     opts.Load,
		log:      opts.Logger,
		signals:  opts.Signals,
		debounce: opts.Debounce,
		restart:  opts.RestartKeys,
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.debounce <= 0 {
		r.debounce = DefaultDebounce
	}
	r.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idemgate_config_reloads_total",
		Help: "Config reload attempts by result (success: the new policy is active; failure: the file was rejected and the previous policy stays; restart_required: an accepted reload changed keys that only a restart applies).",
	}, []string{"result"})
	// Both series exist from the start so that alerts on rate(failure) work
	// before the first failure.
	r.reloads.WithLabelValues("success")
	r.reloads.WithLabelValues("failure")
	if r.restart != nil {
		r.reloads.WithLabelValues("restart_required")
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(r.reloads); err != nil {
			return nil, fmt.Errorf("reload: register metrics: %w", err)
		}
	}
	if r.path != "" {
		if sum, err := fileSum(r.path); err == nil {
			r.lastSum = sum
		}
	}
	p := opts.Initial
	if p == nil {
		if r.path == "" {
			return nil, errors.New("reload: neither Options.Initial nor Options.Path is set")
		}
		var err error
		if p, err = r.load(r.path); err != nil {
			return nil, fmt.Errorf("reload: initial load of %s: %w", r.path, err)
		}
		if p == nil {
			return nil, fmt.Errorf("reload: initial load of %s returned no policy", r.path)
		}
	}
	if err := r.owners.Admit(p); err != nil {
		// A policy that passed policy.New never conflicts with itself.
		return nil, fmt.Errorf("reload: %w", err)
	}
	r.current.Store(p)
	return r, nil
}

// Current returns the active policy; never nil. Call it once per request and
// use the result for the whole request.
func (r *Reloader) Current() *policy.Policy {
	return r.current.Load()
}

// Reload loads the config file now and, if it loads and validates, makes its
// policy current. On failure the previous policy stays, the failure is logged
// and counted, and the error (wrapping Load's) is returned; ErrNoPath when
// the Reloader has no path.
func (r *Reloader) Reload() error {
	return r.reload("request", false)
}

// reload runs one attempt. onlyIfChanged skips it when the file content is
// the one last attempted (file events that changed nothing).
func (r *Reloader) reload(trigger string, onlyIfChanged bool) error {
	if r.path == "" {
		return ErrNoPath
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sum, sumErr := fileSum(r.path)
	if onlyIfChanged && sumErr == nil && sum == r.lastSum {
		r.log.Debug("config file event without content change; not reloading", "path", r.path, "trigger", trigger)
		return nil
	}
	if sumErr == nil {
		r.lastSum = sum
	} else {
		// A missing file is attempted (and rejected) once per event burst;
		// when it comes back with the old content it must load again.
		r.lastSum = [sha256.Size]byte{}
	}
	p, err := r.safeLoad()
	if err == nil && p == nil {
		err = errors.New("load returned no policy")
	}
	if err == nil {
		if err = r.owners.Admit(p); err != nil {
			err = fmt.Errorf("owner source changed within a scope: %w", err)
		}
	}
	if err != nil {
		r.reloads.WithLabelValues("failure").Inc()
		r.log.Error("config reload rejected; keeping the previous policy", "path", r.path, "trigger", trigger, "err", err)
		return fmt.Errorf("reload %s: %w", r.path, err)
	}
	old := r.current.Swap(p)
	r.remember(old)
	warnScopeChanges(r.log, old, p)
	r.reloads.WithLabelValues("success").Inc()
	r.log.Info("config reloaded", "path", r.path, "trigger", trigger, "routes", len(p.Routes()), "sha256", fmt.Sprintf("%x", sum[:8]))
	if r.restart != nil {
		if keys := r.restart(); len(keys) > 0 {
			// Said aloud: a changed upstream, listen or store used to be
			// kept without a word (TestRestartRequiredKeys).
			r.reloads.WithLabelValues("restart_required").Inc()
			r.log.Warn("config reloaded, but some changed keys need a restart; their old values stay in force until then",
				"path", r.path, "keys", strings.Join(keys, ","))
		}
	}
	return nil
}

// safeLoad turns a panic in Load into a rejected file: a config edit must
// never take down a proxy that is serving with the previous policy.
func (r *Reloader) safeLoad() (p *policy.Policy, err error) {
	defer func() {
		if v := recover(); v != nil {
			p, err = nil, fmt.Errorf("load panicked: %v", v)
		}
	}()
	return r.load(r.path)
}

func fileSum(path string) ([sha256.Size]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(b), nil
}

// Run reloads on every value from Options.Signals and on changes of the
// config file until ctx is done, then returns nil. It returns an error at
// once when the file's directory cannot be watched or when Run is already
// running. Reload failures are logged and counted, never returned: a bad
// edit must not stop the process.
func (r *Reloader) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("reload: Run is already running")
	}
	defer r.running.Store(false)

	var events <-chan fsnotify.Event
	var watchErrs <-chan error
	var target, dir, realPath string
	if r.path != "" {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return fmt.Errorf("reload: start file watcher: %w", err)
		}
		defer w.Close()
		abs, err := filepath.Abs(r.path)
		if err != nil {
			return fmt.Errorf("reload: resolve %s: %w", r.path, err)
		}
		target, dir = abs, filepath.Dir(abs)
		// Watching the directory, not the file: a watch on the file follows
		// the old inode and goes deaf after a rename-on-save.
		if err := w.Add(dir); err != nil {
			return fmt.Errorf("reload: watch %s: %w", dir, err)
		}
		realPath, _ = filepath.EvalSymlinks(target)
		events, watchErrs = w.Events, w.Errors
		if r.watching != nil {
			r.watching()
		}
	}

	signals := r.signals // local: a closed channel is dropped for this Run only
	var (
		timer    *time.Timer
		fire     <-chan time.Time
		deadline time.Time // burst start + maxDebounce
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case sig, ok := <-signals:
			if !ok {
				signals = nil
				continue
			}
			name := "signal"
			if sig != nil {
				name = sig.String()
			}
			if r.path == "" {
				// Flags and the environment are the whole configuration,
				// and neither changes in a running process: a reload would
				// apply what is already in force. Said, so an operator's
				// SIGHUP is not met by silence.
				r.log.Info("reload requested, but idemgate runs without a config file (--config): nothing to reload; still serving", "trigger", name)
				continue
			}
			_ = r.reload(name, false) // logged and counted inside
		case ev, ok := <-events:
			if !ok {
				r.log.Error("config file watcher stopped; reloads now need SIGHUP", "dir", dir)
				events, watchErrs = nil, nil
				continue
			}
			if !r.relevant(ev, target, &realPath) {
				continue
			}
			now := time.Now()
			if fire == nil {
				deadline = now.Add(maxDebounce)
			}
			wait := min(r.debounce, deadline.Sub(now))
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			fire = timer.C
		case err, ok := <-watchErrs:
			if !ok {
				watchErrs = nil
				continue
			}
			r.log.Warn("config file watcher error", "dir", dir, "err", err)
		case <-fire:
			fire = nil
			_ = r.reload("file", true)
		}
	}
}

// relevant reports whether ev may have changed the config file: an event on
// the file's own name (write, create by rename-on-save, remove), or any event
// after which the file resolves to a different real path (a ConfigMap's
// ..data symlink swap, where no event names the file).
func (r *Reloader) relevant(ev fsnotify.Event, target string, realPath *string) bool {
	if filepath.Clean(ev.Name) == target {
		// A bare chmod (touch, chmod) leaves the content as it was.
		return ev.Op&^fsnotify.Chmod != 0
	}
	rp, err := filepath.EvalSymlinks(target)
	if err != nil {
		rp = ""
	}
	if rp != *realPath {
		*realPath = rp
		return true
	}
	return false
}

// maxPrevious bounds the policies Previous returns.
const maxPrevious = 16

func (r *Reloader) remember(old *policy.Policy) {
	if old == nil {
		return
	}
	r.prevMu.Lock()
	defer r.prevMu.Unlock()
	r.prev = append(r.prev, old)
	if len(r.prev) > maxPrevious {
		r.prev = r.prev[1:]
	}
}

// Previous returns the policies this Reloader replaced, oldest first (at
// most 16). The proxy asks them under which route names a request was
// governed before, to find the records that builds before layout 2 kept by
// route name (docs/protocol.md, "Layout versions").
func (r *Reloader) Previous() []*policy.Policy {
	r.prevMu.Lock()
	defer r.prevMu.Unlock()
	return slices.Clone(r.prev)
}

// warnScopeChanges logs one warning per route (by name) whose key scope,
// key source or owner source the new policy changes: records are found by owner, scope and key, so the
// retries of operations recorded under the old scope are not answered from
// their records and run again. It is not refused: moving a route to its
// own scope is sometimes the point, but it must never be silent.
func warnScopeChanges(log *slog.Logger, old, p *policy.Policy) {
	if old == nil {
		return
	}
	before := map[string]*policy.Route{}
	for _, rt := range old.Routes() {
		before[rt.Name] = rt
	}
	for _, rt := range p.Routes() {
		o, ok := before[rt.Name]
		if !ok {
			continue
		}
		if o.Scope != rt.Scope {
			log.Warn("route's key scope changed: retries of operations recorded under the old scope are not answered from their records and run again",
				"route", rt.Name, "old_scope", o.Scope, "new_scope", rt.Scope)
		}
		// Where the key is read decides which record a retry finds, or
		// whether an optional key is seen at all (adversarial finding F3
		// of the second round): a client still sending the old field is
		// passed through unenforced, a key read elsewhere is a new key.
		if o.Header != rt.Header || o.Key != rt.Key {
			log.Warn("route's idempotency key source changed: clients sending the key where it was are not enforced (optional keys) or refused (required), and keys read from elsewhere are new keys whose retries run again",
				"route", rt.Name, "old_header", o.Header, "new_header", rt.Header,
				"old_key_from", string(o.Key.From), "new_key_from", string(rt.Key.From), "old_pointer", o.Key.Pointer, "new_pointer", rt.Key.Pointer)
		}
		if o.Owner.String() != rt.Owner.String() {
			log.Warn("route's owner source changed: owners derived the new way are new owners, whose retries of earlier operations run again",
				"route", rt.Name, "old_owner", o.Owner.String(), "new_owner", rt.Owner.String())
		}
	}
}
