package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/idemgate/idemgate/config"
)

// adminUsage is the help of idemgate admin.
const adminUsage = `idemgate admin: inspect or purge an idempotency record over the admin API

Usage:
  idemgate admin get   --route R (--owner-value V | --owner STORED) --key K [--host H] [--admin-url URL | --config FILE]
  idemgate admin purge --route R (--owner-value V | --owner STORED) --key K [--host H] [--force] [--admin-url URL | --config FILE]
  idemgate admin routes [--json] [--admin-url URL | --config FILE]

The admin URL is --admin-url, else IDEMGATE_ADMIN_URL, else the admin.listen
address of --config FILE, else http://127.0.0.1:9090. The token comes from
IDEMGATE_ADMIN_TOKEN, else from --config FILE's admin.token.

Exit status: 0 done, 1 the admin API answered with a problem (printed to
stderr) or could not be reached, 2 usage error, 3 purge found no such record
(nothing was purged). --owner-value is the raw value the
route's owner source derives the stored owner from (the header's value, the
whole Authorization value, the client certificate's PEM, or the JSON array of
a jwt route's claims); @FILE reads it from a file. --owner takes the stored
form (h:VALUE, sha256:HEX, cert:HEX, j:[...]). --host is the Host the client
sent; with upstream.pass_host: true a route whose pattern names no host keeps
a record per host, and its lookups need it.
`

// Exit statuses of idemgate admin, documented in adminUsage and docs/operations.md.
const (
	adminExitOK      = 0
	adminExitProblem = 1
	adminExitUsage   = 2
	// adminExitNoRecord: purge found no record to purge (404
	// admin-record-not-found), so scripts can tell "already gone" from a
	// failure.
	adminExitNoRecord = 3
)

// defaultAdminURL is the admin URL when no flag, variable or config names
// one: config's default admin.listen.
const defaultAdminURL = "http://127.0.0.1:9090"

// adminCmd runs idemgate admin: the operator's client for /admin/, so that
// nobody builds URLs with credentials in them by hand. Exit statuses: the
// adminExit* constants.
func adminCmd(args []string, environ []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "get" && args[0] != "purge" && args[0] != "routes") {
		fmt.Fprint(stderr, adminUsage)
		return 2
	}
	verb := args[0]
	fs := flag.NewFlagSet("admin "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	adminURL := fs.String("admin-url", "", "admin listener base URL (default: IDEMGATE_ADMIN_URL, else --config's admin.listen, else "+defaultAdminURL+")")
	configPath := fs.String("config", "", "config file whose admin.listen (and admin.token, when IDEMGATE_ADMIN_TOKEN is unset) to use")
	asJSON := fs.Bool("json", false, "routes: ask for JSON instead of YAML")
	route := fs.String("route", "", "route name (idemgate validate or idemgate admin routes lists them)")
	ownerValue := fs.String("owner-value", "", "raw owner value for the route's owner source (@FILE reads a file)")
	owner := fs.String("owner", "", "stored owner form (h:VALUE, sha256:HEX, cert:HEX, j:[...])")
	key := fs.String("key", "", "idempotency key")
	host := fs.String("host", "", "the Host the client sent (needed with upstream.pass_host: true)")
	force := fs.Bool("force", false, "purge: also a record still running within its lease")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args[1:]); err != nil {
		return parseExit(err)
	}
	ownerSet, valueSet := false, false
	fs.Visit(func(f *flag.Flag) {
		ownerSet = ownerSet || f.Name == "owner"
		valueSet = valueSet || f.Name == "owner-value"
	})
	token, envURL := "", ""
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "IDEMGATE_ADMIN_TOKEN="); ok {
			token = v
		}
		if v, ok := strings.CutPrefix(kv, "IDEMGATE_ADMIN_URL="); ok {
			envURL = v
		}
	}
	// Precedence: flag, environment, config file, default.
	rawURL, from := *adminURL, "--admin-url"
	if rawURL == "" && envURL != "" {
		rawURL, from = envURL, "IDEMGATE_ADMIN_URL"
	}
	if *configPath != "" {
		cfg, err := config.Load(*configPath, environ)
		if err != nil {
			fmt.Fprintf(stderr, "idemgate admin: --config %s: %v\n", *configPath, err)
			return adminExitUsage
		}
		if rawURL == "" {
			u, err := listenURL(cfg.Admin.Listen)
			if err != nil {
				fmt.Fprintf(stderr, "idemgate admin: --config %s: admin.listen: %v\n", *configPath, err)
				return adminExitUsage
			}
			rawURL, from = u, "admin.listen of "+*configPath
		}
		if token == "" {
			token = cfg.Admin.Token
		}
	}
	if rawURL == "" {
		rawURL, from = defaultAdminURL, "the default"
	}
	if token == "" {
		fmt.Fprintln(stderr, "idemgate admin: set IDEMGATE_ADMIN_TOKEN to the admin token (or give --config with admin.token)")
		return adminExitUsage
	}
	base, err := url.Parse(strings.TrimRight(rawURL, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		fmt.Fprintf(stderr, "idemgate admin: admin URL %q (from %s) is not an http(s) URL\n", rawURL, from)
		return adminExitUsage
	}
	target := base.JoinPath("/admin/routes")
	method := http.MethodGet
	if verb != "routes" {
		if *route == "" || *key == "" || ownerSet == valueSet {
			fmt.Fprintln(stderr, "idemgate admin: --route, --key and one of --owner-value and --owner are required")
			return 2
		}
		q := url.Values{"route": {*route}, "key": {*key}}
		if *host != "" {
			q.Set("host", *host)
		}
		if ownerSet {
			q.Set("owner", *owner)
		} else {
			v, err := readValue(*ownerValue)
			if err != nil {
				fmt.Fprintf(stderr, "idemgate admin: --owner-value: %v\n", err)
				return 2
			}
			q.Set("owner_value", v)
		}
		if verb == "purge" {
			method = http.MethodDelete
			if *force {
				q.Set("force", "true")
			}
		}
		target = base.JoinPath("/admin/records")
		target.RawQuery = q.Encode()
	}
	req, err := http.NewRequest(method, target.String(), nil)
	if err != nil {
		fmt.Fprintf(stderr, "idemgate admin: %v\n", err)
		return 2
	}
	// In a header, never in the URL, where shells and proxies log it.
	req.Header.Set("Authorization", "Bearer "+token)
	if *asJSON {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := (&http.Client{Timeout: *timeout}).Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "idemgate admin: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		fmt.Fprintf(stderr, "idemgate admin: reading the answer: %v\n", err)
		return 1
	}
	if resp.StatusCode >= 300 {
		fmt.Fprintf(stderr, "idemgate admin: %s\n%s\n", resp.Status, strings.TrimSpace(string(body)))
		if verb == "purge" && resp.StatusCode == http.StatusNotFound && problemSlug(body) == "admin-record-not-found" {
			fmt.Fprintln(stderr, "idemgate admin: no such record; nothing was purged")
			return adminExitNoRecord
		}
		return adminExitProblem
	}
	if resp.StatusCode == http.StatusNoContent {
		fmt.Fprintln(stdout, "purged")
		return 0
	}
	_, _ = stdout.Write(body)
	return 0
}

// listenURL returns the http URL a client on this host reaches a listener
// at listen (host:port) with: an empty or unspecified host (":9090",
// "0.0.0.0:9090", "[::]:9090") is reached on loopback.
func listenURL(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// problemSlug returns the last segment of a problem document's type URI
// (after "/" or "#", so under any problems.type_base), or "".
func problemSlug(body []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &p) != nil {
		return ""
	}
	return p.Type[strings.LastIndexAny(p.Type, "/#")+1:]
}

// readValue returns v, or the content of FILE for "@FILE" (a PEM
// certificate does not fit on a command line).
func readValue(v string) (string, error) {
	path, ok := strings.CutPrefix(v, "@")
	if !ok {
		return v, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	if len(b) == 0 {
		return "", errors.New(path + " is empty")
	}
	return string(b), nil
}
