package policy

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// bigRoutes is a realistic 1,000-route configuration (docs/performance.md,
// "1,000 routes"): 25
// services of 40 routes each, 10 resources per service with a create
// (POST, required on even resources), an update (PATCH /{id}), an action
// (POST /{id}/actions/{action}) and a fourth route that is a PUT, a
// DELETE or a passthrough GET. Services 0 to 19 keep their records in a
// scope of their own (as services behind one proxy do), 20 to 23 share the
// default scope, and service 24's creates name a host (a few host
// patterns, each its own derived scope). targets[i] is a request line that
// route i governs.
func bigRoutes() (routes []Route, targets []string) {
	for s := range 25 {
		svc := fmt.Sprintf("svc%02d", s)
		for j := range 40 {
			res, kind := j/4, j%4
			base := fmt.Sprintf("/v1/%s/res%d", svc, res)
			r := DefaultRoute()
			r.Name = fmt.Sprintf("%s-res%d-%d", svc, res, kind)
			if s < 20 {
				r.Scope = svc
			} else {
				r.Scope = ""
			}
			var method, target string
			switch kind {
			case 0:
				method, target = "POST", base
				r.Match = "POST " + base
				r.Required = res%2 == 0
				if s == 24 {
					r.Match = "POST api" + fmt.Sprint(res) + ".example.com" + base
				}
			case 1:
				method, target = "PATCH", base+"/42"
				r.Match = "PATCH " + base + "/{id}"
			case 2:
				method, target = "POST", base+"/42/actions/refund"
				r.Match = "POST " + base + "/{id}/actions/{action}"
			case 3:
				switch res % 3 {
				case 0:
					method = "PUT"
				case 1:
					method = "DELETE"
				case 2:
					method = "GET"
					r.Mode = ModePassthrough
				}
				target = base + "/42"
				r.Match = method + " " + base + "/{id}"
			}
			r.Methods = []string{method}
			if method == "GET" {
				r.Methods = []string{"GET", "HEAD"}
			}
			routes = append(routes, r)
			host := "x"
			if s == 24 && kind == 0 {
				host = fmt.Sprintf("api%d.example.com", res)
			}
			targets = append(targets, method+" "+target+" HTTP/1.1\r\nHost: "+host)
		}
	}
	return routes, targets
}

func bigPolicy(t testing.TB) (*Policy, []Route, []string) {
	t.Helper()
	routes, targets := bigRoutes()
	p, err := New(DefaultRoute(), routes)
	if err != nil {
		t.Fatalf("New with %d routes: %v", len(routes), err)
	}
	return p, routes, targets
}

// TestBigRoutesMatch pins the benchmark's configuration: every target is
// governed by its own route, so the benchmark measures real matches.
func TestBigRoutesMatch(t *testing.T) {
	p, routes, targets := bigPolicy(t)
	for i, target := range targets {
		r := parseRequest(t, target+"\r\nIdempotency-Key: k", "")
		d := p.Decide(r)
		if d.Route.Name != routes[i].Name || d.Refuse != "" {
			t.Errorf("%q: route %s (refuse %q), want %s", target, d.Route.Name, d.Refuse, routes[i].Name)
		}
	}
}

// BenchmarkDecide1000Routes measures what the proxy asks the policy per
// request (Decide; Match alone for comparison) with 1,000 routes: the first,
// a middle and the last route of the file, and a request no route matches.
// The target is under 2 µs per request (docs/performance.md, "1,000 routes").
func BenchmarkDecide1000Routes(b *testing.B) {
	p, _, targets := bigPolicy(b)
	const json = "\r\nIdempotency-Key: k\r\nContent-Type: application/json"
	for _, bc := range []struct{ name, head string }{
		{"first", targets[0] + json},
		{"middle", targets[500] + json},
		{"last", targets[999] + json},
		{"host", targets[960] + json},
		{"none", "POST /v2/unknown/thing HTTP/1.1\r\nHost: x" + json},
	} {
		r := parseRequest(b, bc.head, `{"amount":1}`)
		b.Run(bc.name+"/match", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Match(r)
			}
		})
		b.Run(bc.name+"/decide", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Decide(r)
			}
		})
	}
}

// BenchmarkNew1000Routes measures compiling (and validating) 1,000 routes,
// as a start and every reload do.
func BenchmarkNew1000Routes(b *testing.B) {
	routes, _ := bigRoutes()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := New(DefaultRoute(), routes); err != nil {
			b.Fatal(err)
		}
	}
}

// randomTarget returns a request line near the big configuration's
// routes: a route's own target or a mutation of one (letter case, trailing
// slash, extension, trailing dot, another service or resource, unknown
// segments, a non-ASCII letter, a long path).
func randomTarget(rng *rand.Rand, targets []string) string {
	line, _, _ := strings.Cut(targets[rng.IntN(len(targets))], " HTTP/1.1")
	method, path, _ := strings.Cut(line, " ")
	methods := []string{"POST", "PATCH", "PUT", "DELETE", "GET", "post"}
	if rng.IntN(3) == 0 {
		method = methods[rng.IntN(len(methods))]
	}
	segs := strings.Split(path, "/")
	for n := rng.IntN(3); n > 0; n-- {
		i := 1 + rng.IntN(len(segs)-1)
		switch rng.IntN(9) {
		case 0:
			segs[i] = strings.ToUpper(segs[i])
		case 1:
			segs[i] += "."
		case 2:
			segs[i] += ".json"
		case 3:
			segs[i] = fmt.Sprintf("svc%02d", rng.IntN(26))
		case 4:
			segs[i] = fmt.Sprintf("res%d", rng.IntN(11))
		case 5:
			segs[i] = "ſvc" // folds to "s" in strings.EqualFold
		case 6:
			segs = append(segs[:i], segs[i+1:]...)
		case 7:
			segs[i] = strings.Repeat("a", 300)
		case 8:
			segs = append(segs, "")
		}
		if len(segs) < 2 {
			segs = append(segs, "x")
		}
	}
	return method + " " + strings.Join(segs, "/")
}

// linearPolicy returns a copy of p that decides as the policy did before it was
// indexed for 1,000 routes: rivals found by scanning every prefix, and a
// ServeMux without the catch-all pattern.
func linearPolicy(t testing.TB, p *Policy) *Policy {
	t.Helper()
	q := *p
	q.mux = http.NewServeMux()
	for _, r := range p.routes {
		if err := register(q.mux, r); err != nil {
			t.Fatal(err)
		}
	}
	scan := func(rvs []rival) []rival {
		out := slices.Clone(rvs)
		for i := range out {
			if out[i].set != nil {
				out[i].set = &prefixSet{prefixes: out[i].set.prefixes}
			}
		}
		return out
	}
	q.rivals = map[*Route][]rival{}
	q.overrides = map[*Route][EnforcedRequired + 1][]rival{}
	for rt, rvs := range p.rivals {
		q.rivals[rt] = scan(rvs)
	}
	for rt, levels := range p.overrides {
		for i := range levels {
			levels[i] = scan(levels[i])
		}
		q.overrides[rt] = levels
	}
	return &q
}

// TestIndexedDecideAgreesWithLinear is the property of the rival index:
// over many random requests near the 1,000 routes (and a small policy with
// subtrees and a catch-all), the indexed policy decides exactly as the
// linear scan does.
func TestIndexedDecideAgreesWithLinear(t *testing.T) {
	big, _, targets := bigPolicy(t)
	small := variantPolicy(t)
	catchAll := mustNew(t, testRoute("all", "/{rest...}"), testRoute("orders", "POST /v1/orders"))
	rng := rand.New(rand.NewPCG(17, 1))
	bodies := []string{"", `{"_method":"PATCH"}`, `{"amount":1}`}
	for _, p := range []*Policy{big, small, catchAll} {
		lin := linearPolicy(t, p)
		for range 20000 {
			line := randomTarget(rng, targets)
			head := line + " HTTP/1.1\r\nHost: x"
			if rng.IntN(8) == 0 {
				head = line + " HTTP/1.1\r\nHost: API" + fmt.Sprint(rng.IntN(10)) + ".example.com"
			}
			head += "\r\nIdempotency-Key: k\r\nContent-Type: application/json"
			body := bodies[rng.IntN(len(bodies))]
			r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head + "\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body)))
			if err != nil {
				continue
			}
			got, want := p.Decide(r), lin.Decide(r)
			if got.Route.Name != want.Route.Name || got.Matched.Name != want.Matched.Name || got.Refuse != want.Refuse || got.NeedBody != want.NeedBody {
				t.Fatalf("%q: indexed %s/%s %q %v, linear %s/%s %q %v", head, got.Route.Name, got.Matched.Name, got.Refuse, got.NeedBody,
					want.Route.Name, want.Matched.Name, want.Refuse, want.NeedBody)
			}
		}
	}
}

// TestPrefixSetAgreesWithScan checks the index against the scan it
// replaces on paths in every letter case, non-ASCII letters (the Kelvin
// sign and "ſ" fold to ASCII letters in strings.EqualFold) and paths longer
// than the index takes.
func TestPrefixSetAgreesWithScan(t *testing.T) {
	s := newPrefixSet([]string{"/v1/orders", "/v1/items", "/ſvc", "/a/b/c", "/k"})
	scan := &prefixSet{prefixes: s.prefixes}
	rng := rand.New(rand.NewPCG(17, 2))
	parts := []string{"v1", "V1", "orders", "ORDERS", "items", "ſvc", "Svc", "svc", "a", "b", "c", "K", "\u212a", "x", strings.Repeat("a", 300)}
	for range 50000 {
		x := ""
		for n := rng.IntN(5); n >= 0; n-- {
			x += "/" + parts[rng.IntN(len(parts))]
		}
		if got, want := s.covers(x), scan.covers(x); got != want {
			t.Fatalf("covers(%q) = %v, the scan says %v", x, got, want)
		}
	}
}
