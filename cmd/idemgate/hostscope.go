package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/policy"
)

// warnSharedHostScope tells validate's reader that, without
// upstream.pass_host, the enforcing routes whose pattern names no host
// keep one key scope for every Host clients send: the fingerprint covers
// neither Host nor X-Forwarded-Host, so on an upstream that routes tenants
// by either, one owner's key sent to two tenants is one operation: the
// second tenant gets the first one's stored response (docs/proxy.md, "What the
// upstream receives"). A warning, not an error: most upstreams serve one
// site, where one scope is right.
func warnSharedHostScope(w io.Writer, cfg *config.Config) {
	if cfg.Upstream.PassHost {
		return
	}
	var names []string
	for _, r := range cfg.Policy.Routes() {
		if r.Mode == policy.ModeEnforce && !r.HostPattern() {
			names = append(names, r.Name)
		}
	}
	if len(names) == 0 {
		return
	}
	fmt.Fprintf(w, "idemgate validate: WARNING: upstream.pass_host is false, so routes %s (no host in their match) give every client Host one shared key scope per owner.\n", strings.Join(names, ", "))
	fmt.Fprintf(w, "  If the upstream routes tenants by Host or X-Forwarded-Host, set upstream.pass_host: true (one scope per Host) or give each tenant's routes a host pattern (\"POST t1.example/v1/orders\").\n")
}
