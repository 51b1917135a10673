package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/testcerts"
	"github.com/idemgate/idemgate/policy"
)

// TestTLSValidation: every bad combination of the TLS and forwarding keys
// is refused at the key that needs changing (among
// them: owner: client-cert without verified client certificates).
func TestTLSValidation(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "test CA")
	leaf := ca.Issue(t, testcerts.Options{CommonName: "idemgate", Server: true})
	cert := testcerts.Write(t, dir, "tls.crt", leaf.CertPEM)
	key := testcerts.Write(t, dir, "tls.key", leaf.KeyPEM)
	caFile := testcerts.Write(t, dir, "ca.crt", ca.PEM)
	junk := testcerts.Write(t, dir, "junk.pem", []byte("not a certificate"))
	tlsOK := fmt.Sprintf("cert_file: %q, key_file: %q", cert, key)
	tests := []struct{ name, yaml, path, says string }{
		{"client-cert without tls", base + "defaults: {owner: client-cert}\n", "defaults.owner", "server.tls.client_auth request or require"},
		{"client-cert route without client auth", base + "server: {tls: {" + tlsOK + "}}\nroutes: [{name: a, match: /a, owner: client-cert}]\n", "routes[0].owner", "client-cert needs verified client certificates"},
		{"key without cert", base + "server: {tls: {key_file: " + key + "}}\n", "server.tls.key_file", "needs its certificate"},
		{"cert without key", base + "server: {tls: {cert_file: " + cert + "}}\n", "server.tls.cert_file", "needs its key"},
		{"cert does not load", base + "server: {tls: {cert_file: " + junk + ", key_file: " + key + "}}\n", "server.tls.cert_file", "does not load"},
		{"min version", base + "server: {tls: {" + tlsOK + ", min_version: '1.1'}}\n", "server.tls.min_version", "1.2 or 1.3"},
		{"client auth mode", base + "server: {tls: {" + tlsOK + ", client_auth: always}}\n", "server.tls.client_auth", "none, request or require"},
		{"client auth without ca", base + "server: {tls: {" + tlsOK + ", client_auth: require}}\n", "server.tls.client_ca_file", "is required"},
		{"client auth without tls", base + "server: {tls: {client_auth: request, client_ca_file: " + caFile + "}}\n", "server.tls.client_auth", "needs TLS on the listener"},
		{"ca without client auth", base + "server: {tls: {" + tlsOK + ", client_ca_file: " + caFile + "}}\n", "server.tls.client_auth", "is none but"},
		{"client ca junk", base + "server: {tls: {" + tlsOK + ", client_auth: require, client_ca_file: " + junk + "}}\n", "server.tls.client_ca_file", "no PEM certificate"},
		{"upstream key without cert", "upstream: {url: 'https://x:1', tls: {key_file: " + key + "}}\n", "upstream.tls.key_file", "needs its certificate"},
		{"upstream ca junk", "upstream: {url: 'https://x:1', tls: {ca_file: " + junk + "}}\n", "upstream.tls.ca_file", "no PEM certificate"},
		{"upstream insecure with ca", "upstream: {url: 'https://x:1', tls: {ca_file: " + caFile + ", insecure_skip_verify: true}}\n", "upstream.tls.insecure_skip_verify", "ignores"},
		{"h2c with tls", base + "server: {h2c: true, tls: {" + tlsOK + "}}\n", "server.h2c", "offers HTTP/2 by ALPN already"},
		{"trusted proxy cidr", base + "server: {trusted_proxies: ['10.0.0.0/8', '10.0.0/33']}\n", "server.trusted_proxies[1]", "neither a CIDR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tt.yaml), nil)
			if err == nil {
				t.Fatalf("Load accepted:\n%s", tt.yaml)
			}
			for _, e := range unjoin(err) {
				var fe *policy.FieldError
				if errors.As(e, &fe) && fe.Path == tt.path && strings.Contains(fe.Err.Error(), tt.says) {
					return
				}
			}
			t.Fatalf("error does not name %s saying %q:\n%v", tt.path, tt.says, err)
		})
	}

	good := fmt.Sprintf("server: {trusted_proxies: ['10.0.0.0/8', '192.0.2.7'], tls: {%s, min_version: '1.3', client_auth: request, client_ca_file: %q}}\n", tlsOK, caFile) +
		fmt.Sprintf("upstream: {url: 'https://127.0.0.1:1', tls: {ca_file: %q, cert_file: %q, key_file: %q, server_name: api.internal}}\n", caFile, cert, key) +
		"defaults: {owner: client-cert}\n"
	c, err := Load(writeFile(t, good), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.TLS.ClientAuth != ClientAuthRequest || c.Upstream.TLS.ServerName != "api.internal" || len(c.TrustedPrefixes()) != 2 {
		t.Errorf("loaded %+v %+v %v", c.Server.TLS, c.Upstream.TLS, c.TrustedPrefixes())
	}
	files, err := c.OpenTLSFiles(nil, nil)
	if err != nil {
		t.Fatalf("OpenTLSFiles: %v", err)
	}
	if st := files.Server(); st.ClientCAs == nil || st.GetConfigForClient == nil || st.MinVersion != 0x0304 {
		t.Errorf("Server: %+v", st)
	}
	if ut := files.Upstream("api.internal", files.UpstreamCAs()); ut.RootCAs == nil || ut.GetClientCertificate == nil || ut.ServerName != "api.internal" {
		t.Errorf("Upstream: %+v", ut)
	}
	// The environment sets the list as a comma-separated value.
	c, err = Load(writeFile(t, base), []string{"IDEMGATE_SERVER_TRUSTED_PROXIES=10.1.0.0/16, 10.2.0.0/16"})
	if err != nil || len(c.Server.TrustedProxies) != 2 {
		t.Fatalf("env trusted proxies: %v %v", err, c)
	}
}

// TestRouteUpstream: a route's own upstream is parsed like upstream.url,
// gets a scope of its own unless it sets one, may not share a scope with a
// route of another upstream, and one equal to upstream.url is the global
// upstream (README, "Record identity: owner, scope, key").
func TestRouteUpstream(t *testing.T) {
	for _, tt := range []struct{ name, yaml, path, says string }{
		{"relative", base + "routes: [{name: a, match: /a, upstream: /x}]\n", "routes[0].upstream", "absolute http, https or h2c"},
		{"query", base + "routes: [{name: a, match: /a, upstream: 'http://b:1/?q=1'}]\n", "routes[0].upstream", "query"},
		{"shared scope", base + "routes: [{name: a, match: /a, upstream: 'http://b:1', scope: shop}, {name: c, match: /c, scope: shop}]\n", "routes[1].scope", "does not cover the upstream"},
		{"default scope", base + "routes: [{name: a, match: /a, upstream: 'http://b:1', scope: default}]\n", "routes[0].scope", "sends requests to http://b:1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tt.yaml), nil)
			for _, e := range unjoin(err) {
				var fe *policy.FieldError
				if errors.As(e, &fe) && fe.Path == tt.path && strings.Contains(fe.Err.Error(), tt.says) {
					return
				}
			}
			t.Fatalf("error does not name %s saying %q:\n%v", tt.path, tt.says, err)
		})
	}
	c, err := Load(writeFile(t, base+"routes: [{name: a, match: /a, upstream: 'http://B:1'}, {name: c, match: /c, upstream: 'http://127.0.0.1:3000', scope: default}]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := route(t, c, "a"); r.Scope != "upstream:b:1" {
		t.Errorf("derived scope %q", r.Scope)
	}
	if r := route(t, c, "c"); r.Upstream != nil {
		t.Errorf("upstream.url spelt out is not the global upstream: %v", r.Upstream)
	}
}
