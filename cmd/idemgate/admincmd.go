package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// adminUsage is the help of idemgate admin.
const adminUsage = `idemgate admin: inspect or purge an idempotency record over the admin API

Usage:
  idemgate admin get   --route R (--owner-value V | --owner STORED) --key K [--host H] [--admin-url URL]
  idemgate admin purge --route R (--owner-value V | --owner STORED) --key K [--host H] [--force] [--admin-url URL]
  idemgate admin routes [--admin-url URL]

The token comes from IDEMGATE_ADMIN_TOKEN. --owner-value is the raw value the
route's owner source derives the stored owner from (the header's value, the
whole Authorization value, the client certificate's PEM, or the JSON array of
a jwt route's claims); @FILE reads it from a file. --owner takes the stored
form (h:VALUE, sha256:HEX, cert:HEX, j:[...]). --host is the Host the client
sent; with upstream.pass_host: true a route whose pattern names no host keeps
a record per host, and its lookups need it.
`

// adminCmd runs idemgate admin: the operator's client for /admin/, so that
// nobody builds URLs with credentials in them by hand. Exit 0 on success, 1
// when the admin API answers with a problem (printed to stderr), 2 on a
// usage error.
func adminCmd(args []string, environ []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "get" && args[0] != "purge" && args[0] != "routes") {
		fmt.Fprint(stderr, adminUsage)
		return 2
	}
	verb := args[0]
	fs := flag.NewFlagSet("admin "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	adminURL := fs.String("admin-url", "http://127.0.0.1:9090", "admin listener base URL")
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
	token := ""
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "IDEMGATE_ADMIN_TOKEN="); ok {
			token = v
		}
	}
	if token == "" {
		fmt.Fprintln(stderr, "idemgate admin: set IDEMGATE_ADMIN_TOKEN to the admin token")
		return 2
	}
	base, err := url.Parse(strings.TrimRight(*adminURL, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		fmt.Fprintf(stderr, "idemgate admin: --admin-url %q is not an http(s) URL\n", *adminURL)
		return 2
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
		return 1
	}
	if resp.StatusCode == http.StatusNoContent {
		fmt.Fprintln(stdout, "purged")
		return 0
	}
	_, _ = stdout.Write(body)
	return 0
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
