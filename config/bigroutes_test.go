package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bigRoutesYAML returns a config file with 1,000 routes (docs/performance.md,
// "1,000 routes"), shaped like policy's benchmark configuration: 25 services of
// 40 routes (create, update, action, and a PUT, DELETE or passthrough GET per
// resource), services 0 to 19 in scopes of their own, service 24's creates on
// hosts of their own.
func bigRoutesYAML() string {
	var b strings.Builder
	b.WriteString(base + "store: {driver: memory}\nroutes:\n")
	for s := range 25 {
		svc := fmt.Sprintf("svc%02d", s)
		for j := range 40 {
			res, kind := j/4, j%4
			base := fmt.Sprintf("/v1/%s/res%d", svc, res)
			fmt.Fprintf(&b, "  - name: %s-res%d-%d\n", svc, res, kind)
			if s < 20 {
				fmt.Fprintf(&b, "    scope: %s\n", svc)
			}
			switch kind {
			case 0:
				host := ""
				if s == 24 {
					host = fmt.Sprintf("api%d.example.com", res)
				}
				fmt.Fprintf(&b, "    match: \"POST %s%s\"\n    methods: [POST]\n    required: %v\n", host, base, res%2 == 0)
			case 1:
				fmt.Fprintf(&b, "    match: \"PATCH %s/{id}\"\n    methods: [PATCH]\n", base)
			case 2:
				fmt.Fprintf(&b, "    match: \"POST %s/{id}/actions/{action}\"\n    methods: [POST]\n    fingerprint: {body: json, exclude: [/client_ts]}\n", base)
			case 3:
				switch res % 3 {
				case 0:
					fmt.Fprintf(&b, "    match: \"PUT %s/{id}\"\n    methods: [PUT]\n    lease: 30s\n", base)
				case 1:
					fmt.Fprintf(&b, "    match: \"DELETE %s/{id}\"\n    methods: [DELETE]\n", base)
				case 2:
					fmt.Fprintf(&b, "    match: \"GET %s/{id}\"\n    methods: [GET, HEAD]\n    mode: passthrough\n", base)
				}
			}
		}
	}
	return b.String()
}

// TestLoadBigRoutes pins the benchmark's file: it is valid, and all 1,000
// routes reach the policy.
func TestLoadBigRoutes(t *testing.T) {
	c := mustParse(t, bigRoutesYAML())
	if n := len(c.Policy.Routes()); n != 1000+1 { // and the defaults route
		t.Fatalf("%d routes, want 1,000 and the defaults route", n)
	}
}

// BenchmarkLoad1000Routes measures config.Load of a 1,000-route file:
// reading, decoding, and compiling and validating the policy, as idemgate
// validate, a start and every reload do.
func BenchmarkLoad1000Routes(b *testing.B) {
	path := filepath.Join(b.TempDir(), "idemgate.yaml")
	if err := os.WriteFile(path, []byte(bigRoutesYAML()), 0o600); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load(path, nil); err != nil {
			b.Fatal(err)
		}
	}
}
