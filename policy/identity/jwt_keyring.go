package identity

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// KeyRing owns the JWK Sets of owner: jwt routes across config reloads and
// binds them to each compiled Policy. A JWKS URL is fetched once and cached
// for every policy that names it; a jwks_file is read anew by every Bind,
// so a config reload (SIGHUP, or a change of the config file) also reloads
// the keys. Run refreshes the sets in the background. Safe for concurrent
// use.
type KeyRing struct {
	opts JWKSOptions

	mu     sync.Mutex
	sets   map[string]*JWKS    // by JWTSettings.Source(): the sets of the policy bound last
	routes map[string][]string // by JWTSettings.Source(): the routes using each set
}

// NewKeyRing returns an empty KeyRing whose key sets use opts (see
// JWKSOptions). It returns an error when opts has no Client or Now.
func NewKeyRing(opts JWKSOptions) (*KeyRing, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &KeyRing{opts: o, sets: map[string]*JWKS{}}, nil
}

// JWTRoute is one route of a compiled policy as KeyRing binds it.
type JWTRoute struct {
	// Name is the route's name, for Unready and Check.
	Name string
	// Defaults marks the defaults route.
	Defaults bool
	// Owner is the route's owner source; only a route that uses OwnerJWT
	// is bound.
	Owner OwnerSource
	// JWT is the route's jwt: section, nil when it has none.
	JWT *JWTSettings
	// Field returns err as an error of the route's config key at suffix
	// (".jwt.jwks_file"), naming where in the file the setting is.
	Field func(suffix string, err error) error
	// Use gives the route the verifier of its tokens.
	Use func(*JWTVerifier)
}

// JWTRoutes is a compiled policy as KeyRing sees it; package policy's
// *Policy is one.
type JWTRoutes interface {
	// JWTRoutes returns every route: the defaults route first, then the
	// routes in file order.
	JWTRoutes() []JWTRoute
}

// Bind gives every owner: jwt route of p its verifier. It must run before p
// serves requests (the reloader publishes p only after its load function,
// which calls Bind, returns). Routes with the same jwks_file or jwks_url
// share one key set. A jwks_file is read now, and a file that cannot be
// read or holds no usable key fails Bind; a jwks_url is not fetched here
// (no network IO while a config loads): a URL already known keeps its
// cached keys, a new one is fetched by Run or by the first token that
// needs it. On success p's key sets become the ones Run refreshes.
//
// It returns errors.Join of the routes' Field errors (package policy makes
// them *policy.FieldError with paths "defaults.jwt.jwks_file" or
// "routes[i].jwt.jwks_file"), a set shared by several routes reported
// once, at the first of defaults and routes in file order.
func (k *KeyRing) Bind(ctx context.Context, p JWTRoutes) error {
	if p == nil {
		return errors.New("identity: KeyRing.Bind of a nil policy")
	}
	all := p.JWTRoutes()
	if all == nil {
		return errors.New("identity: KeyRing.Bind of a nil policy")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	next := map[string]*JWKS{}
	routes := map[string][]string{}
	failed := map[string]bool{}
	var verifiers []*JWTVerifier
	var errs []error
	for _, r := range all {
		if !r.Owner.Uses(OwnerJWT) || r.JWT == nil {
			continue
		}
		src := r.JWT.Source()
		if failed[src] {
			continue
		}
		set, ok := next[src]
		if !ok {
			var err error
			if set, err = k.open(ctx, r.JWT); err != nil {
				field := ".jwt.jwks_file"
				if r.JWT.JWKSURL != "" {
					field = ".jwt.jwks_url"
				}
				errs = append(errs, r.Field(field, err))
				failed[src] = true
				continue
			}
			next[src] = set
		}
		// Routes with the same settings and key set share one verifier,
		// so a request's owner computed for one of them serves the others
		// (Plan: a JWT is verified once per request).
		i := slices.IndexFunc(verifiers, func(v *JWTVerifier) bool { return v.keys == set && sameJWTSettings(v.settings, *r.JWT) })
		if i >= 0 {
			r.Use(verifiers[i])
			routes[src] = append(routes[src], r.Name)
			continue
		}
		v, err := NewJWTVerifier(*r.JWT, set, k.opts.Now)
		if err != nil {
			errs = append(errs, r.Field(".jwt", err))
			continue
		}
		verifiers = append(verifiers, v)
		r.Use(v)
		routes[src] = append(routes[src], r.Name)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	k.sets, k.routes = next, routes
	return nil
}

// Unready returns nil when every key set of the policy bound last holds
// keys, else an error naming each set that holds none yet (its source, the
// routes that use it, and why its last read failed). Those routes refuse
// every token until the set is read, so /readyz reports it.
func (k *KeyRing) Unready() error {
	k.mu.Lock()
	srcs := slices.Sorted(maps.Keys(k.sets))
	sets, routes := k.sets, k.routes
	k.mu.Unlock()
	var errs []error
	for _, src := range srcs {
		set := sets[src]
		ok, err := set.loaded()
		if ok {
			continue
		}
		why := "not read yet"
		if err != nil {
			why = err.Error()
		}
		errs = append(errs, fmt.Errorf("JWKS %s of route %s holds no keys: %s",
			set.shown, strings.Join(routes[src], ", "), why))
	}
	return errors.Join(errs...)
}

// Check reads every key set of p that is a URL once, within timeout each,
// without binding p or keeping what it reads, and returns an error naming
// each set that cannot be read or holds no usable key. idemgate validate
// uses it to warn that a jwks_url does not answer (serve would refuse every
// token of its routes and stay not ready until it does).
func (k *KeyRing) Check(ctx context.Context, p JWTRoutes, timeout time.Duration) error {
	if p == nil {
		return nil
	}
	seen := map[string]bool{}
	var errs []error
	// Routes first, then the defaults (Policy.Routes' order): a set the
	// defaults share with a route is reported under the route that names
	// it in the file.
	all := p.JWTRoutes()
	if len(all) > 0 && all[0].Defaults {
		all = append(all[1:len(all):len(all)], all[0])
	}
	for _, r := range all {
		if r.Owner.Kind != OwnerJWT || r.JWT == nil || r.JWT.JWKSURL == "" || seen[r.JWT.Source()] {
			continue
		}
		seen[r.JWT.Source()] = true
		set, err := NewJWKSURL(r.JWT.JWKSURL, k.opts)
		if err == nil {
			rctx, cancel := context.WithTimeout(ctx, timeout)
			err = set.Refresh(rctx)
			cancel()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("route %s: jwt.jwks_url: %w", r.Name, err))
		}
	}
	return errors.Join(errs...)
}

// open returns the key set of s: the cached one for a URL already known, a
// new one otherwise, a file read at once.
func (k *KeyRing) open(ctx context.Context, s *JWTSettings) (*JWKS, error) {
	if s.JWKSURL != "" {
		if set, ok := k.sets[s.Source()]; ok {
			return set, nil
		}
		return NewJWKSURL(s.JWKSURL, k.opts)
	}
	set, err := NewJWKSFile(s.JWKSFile, k.opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, k.opts.FetchTimeout)
	defer cancel()
	if err := set.Refresh(ctx); err != nil {
		return nil, err
	}
	return set, nil
}

// Run refreshes the key sets of the policy bound last, at once and then
// every PollInterval, until ctx is done: each jwks_file is read again (a
// changed file takes effect without a reload), each jwks_url is fetched
// again once its keys are RefreshInterval old, or MinRefetchInterval after
// a failed fetch. Failures are logged and the keys read before stay. While
// a set holds no keys at all (its routes refuse every token and Unready
// reports it), it is retried every MinRefetchInterval rather than every
// PollInterval.
func (k *KeyRing) Run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		k.mu.Lock()
		sets := slices.Collect(maps.Values(k.sets))
		k.mu.Unlock()
		wait := k.opts.PollInterval
		for _, s := range sets {
			if ctx.Err() != nil {
				return
			}
			s.refreshIfDue(ctx)
			if s.needsRead() {
				wait = min(wait, k.opts.MinRefetchInterval)
			}
		}
		t.Reset(wait)
	}
}

// sameJWTSettings reports whether a and b verify tokens alike.
func sameJWTSettings(a, b JWTSettings) bool {
	return a.JWKSFile == b.JWKSFile && a.JWKSURL == b.JWKSURL && slices.Equal(a.Issuers, b.Issuers) &&
		slices.Equal(a.Audiences, b.Audiences) && slices.Equal(a.Claims, b.Claims)
}
