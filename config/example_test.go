package config_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemgate/idemgate/config"
)

// Loading a configuration file as idemgate serve does: the file, then the
// IDEMGATE_ variables of the environment over it (here the upstream), with
// every route compiled into the policy.
func ExampleLoad() {
	dir, err := os.MkdirTemp("", "idemgate-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "idemgate.yaml")
	err = os.WriteFile(path, []byte(`
upstream:
  url: http://127.0.0.1:3000
defaults:
  owner: "header:X-User"
routes:
  - name: orders
    match: "POST /v1/orders"
    required: true
    retention: 72h
`), 0o600)
	if err != nil {
		log.Fatal(err)
	}
	cfg, err := config.Load(path, []string{"IDEMGATE_UPSTREAM_URL=http://orders:3000"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("upstream:", cfg.Upstream.URL)
	fmt.Println("store:", cfg.Store.Driver)
	// The routes in the order they are listed, then the defaults route that
	// governs every request no route matches.
	for _, r := range cfg.Policy.Routes() {
		fmt.Printf("route %s: %q required=%v retention=%v lease=%v\n", r.Name, r.Match, r.Required, r.Retention, r.Lease)
	}
	// Output:
	// upstream: http://orders:3000
	// store: memory
	// route orders: "POST /v1/orders" required=true retention=72h0m0s lease=10s
	// route default: "" required=false retention=24h0m0s lease=10s
}

// Validation reports every problem of a file at once, each naming its key
// path, so one run of idemgate validate lists everything to fix.
func ExampleParse_invalid() {
	_, err := config.Parse([]byte(`
upstream:
  url: http://127.0.0.1:3000
routes:
  - name: orders
    match: "POST /v1/orders"
    lease: 0s
    on_store_error: retry
`), nil)
	fmt.Println(err)
	// Output:
	// routes[0].lease: 0s must be > 0
	// routes[0].on_store_error: "retry" must be fail_closed or fail_open
}
