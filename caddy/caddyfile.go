package caddyidem

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

// UnmarshalCaddyfile reads the directive (after its matcher, which
// parseDirective took away):
//
//	idempotency [<matcher>] {
//		config       <path>            # idemgate's YAML configuration
//		store        <driver>          # store.driver: memory | valkey | bolt | postgres
//		store_addrs  <host:port>...    # store.valkey.addrs (and the valkey driver when none is named: addrsSelectValkey)
//		key_prefix   <prefix>          # store.valkey.key_prefix
//		timeout      <duration>        # upstream.timeout: the bound of one call of the next handlers
//		set          <key> <value>     # any other key the environment may set (config.WithOverrides)
//		name         <label>           # metrics label, for several handlers in one configuration
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	caddyfileOptions := []string{"config", "store", "store_addrs", "key_prefix", "timeout", "set", "name"}
	d.Next() // the directive's name
	if d.NextArg() {
		return d.Errf("idempotency takes no argument besides a matcher: set the configuration file inside its block, idempotency { config %s }", d.Val())
	}
	override := func(key, value string) {
		if h.Overrides == nil {
			h.Overrides = make(map[string]string)
		}
		h.Overrides[key] = value
	}
	one := func() (string, error) {
		if !d.NextArg() {
			return "", d.ArgErr()
		}
		v := d.Val()
		if d.NextArg() {
			return "", d.ArgErr()
		}
		return v, nil
	}
	for d.NextBlock(0) {
		switch opt := d.Val(); opt {
		case "config", "name", "store", "key_prefix", "timeout":
			v, err := one()
			if err != nil {
				return err
			}
			switch opt {
			case "config":
				h.Config = v
			case "name":
				h.Name = v
			case "store":
				override("store.driver", v)
			case "key_prefix":
				override("store.valkey.key_prefix", v)
			case "timeout":
				override("upstream.timeout", v)
			}
		case "store_addrs":
			addrs := d.RemainingArgs()
			if len(addrs) == 0 {
				return d.ArgErr()
			}
			override("store.valkey.addrs", strings.Join(addrs, ","))
		case "set":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return d.Errf("set takes a key path and a value, e.g. set store.valkey.username caddy")
			}
			override(args[0], args[1])
		default:
			return d.Errf("unknown idempotency option %q: the options are %s", opt, strings.Join(caddyfileOptions, ", "))
		}
	}
	return nil
}

// parseDirective builds the handler from the idempotency directive, as
// httpcaddyfile.RegisterHandlerDirective would (its matcher token, then
// UnmarshalCaddyfile), after refusing a matcher token that names a
// configuration file (configMatcher).
func parseDirective(h httpcaddyfile.Helper) ([]httpcaddyfile.ConfigValue, error) {
	if !h.Next() {
		return nil, h.ArgErr()
	}
	file, line := h.File(), h.Line()
	if h.NextArg() && configMatcher(h.Val()) {
		return nil, h.Errf("idempotency %s: Caddy reads a first argument that starts with / as a path matcher, not as the configuration file, so this handler would run without its configuration and only for the request path %s: write idempotency { config %s }",
			h.Val(), h.Val(), h.Val())
	}
	h.Reset()
	h.Next()
	matchers, err := h.ExtractMatcherSet()
	if err != nil {
		return nil, err
	}
	var m Handler
	if err := m.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	// Back on the directive's token: checkPlace reads its import chain,
	// and its errors name its line.
	h.Reset()
	h.Next()
	if err := checkPlace(h, file, line, ownerFields(m.Config, m.Overrides)); err != nil {
		return nil, err
	}
	return h.NewRoute(matchers, &m), nil
}

// configMatcher reports whether tok, the directive's first argument, is a
// path matcher (it starts with /: httpcaddyfile reads it so) that names
// a configuration file rather than request paths: it ends in .yaml, .yml
// or .json, or a regular file exists there. Written where the
// configuration's path was once accepted as the directive's argument, it
// would make a handler without configuration (the memory store and the
// defaults) on a path no request takes, and leave every route unprotected
// with nothing to show for it. A path matcher of request paths
// (idempotency /api/*) is read as Caddy reads it.
func configMatcher(tok string) bool {
	if !strings.HasPrefix(tok, "/") {
		return false
	}
	switch strings.ToLower(filepath.Ext(tok)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	fi, err := os.Stat(tok)
	return err == nil && fi.Mode().IsRegular()
}
