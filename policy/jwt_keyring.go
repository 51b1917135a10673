package policy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
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

	mu   sync.Mutex
	sets map[string]*JWKS // by JWTSettings.Source(): the sets of the policy bound last
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

// Bind gives every owner: jwt route of p its verifier. It must run before p
// serves requests (the reloader publishes p only after its load function,
// which calls Bind, returns). Routes with the same jwks_file or jwks_url
// share one key set. A jwks_file is read now, and a file that cannot be
// read or holds no usable key fails Bind; a jwks_url is not fetched here
// (no network IO while a config loads): a URL already known keeps its
// cached keys, a new one is fetched by Run or by the first token that
// needs it. On success p's key sets become the ones Run refreshes.
//
// It returns errors.Join of *FieldError with paths "defaults.jwt.jwks_file"
// or "routes[i].jwt.jwks_file", a set shared by several routes reported
// once, at the first of defaults and routes in file order.
func (k *KeyRing) Bind(ctx context.Context, p *Policy) error {
	if p == nil {
		return errors.New("policy: KeyRing.Bind of a nil policy")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	type named struct {
		path string
		r    *Route
	}
	var all []named
	if p.defaults != nil {
		all = append(all, named{"defaults", p.defaults})
	}
	for i, r := range p.routes {
		all = append(all, named{fmt.Sprintf("routes[%d]", i), r})
	}
	next := map[string]*JWKS{}
	failed := map[string]bool{}
	var errs []error
	for _, n := range all {
		r := n.r
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
				errs = append(errs, &FieldError{Path: n.path + field, Err: err})
				failed[src] = true
				continue
			}
			next[src] = set
		}
		v, err := NewJWTVerifier(*r.JWT, set, k.opts.Now)
		if err != nil {
			errs = append(errs, &FieldError{Path: n.path + ".jwt", Err: err})
			continue
		}
		r.jwt = v
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	k.sets = next
	return nil
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
// a failed fetch. Failures are logged and the keys read before stay.
func (k *KeyRing) Run(ctx context.Context) {
	t := time.NewTicker(k.opts.PollInterval)
	defer t.Stop()
	for {
		k.mu.Lock()
		sets := slices.Collect(maps.Values(k.sets))
		k.mu.Unlock()
		for _, s := range sets {
			if ctx.Err() != nil {
				return
			}
			s.refreshIfDue(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
