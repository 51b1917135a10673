package policy

import (
	"bufio"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
)

// mutatePath applies the spellings frameworks or hops read as one path:
// percent-encoding, doubled and trailing slashes, backslashes, ";"
// parameters, extensions, letter case, dot segments.
func mutatePath(rng *rand.Rand, path string) string {
	for n := rng.IntN(3); n > 0; n-- {
		switch rng.IntN(11) {
		case 0:
			path += "/"
		case 1:
			path = strings.Replace(path, "/", "//", 1+rng.IntN(2))
		case 2:
			if i := strings.LastIndexByte(path, '/'); i >= 0 && i+1 < len(path) {
				path = path[:i+1] + "%" + strings.ToUpper(hex2(path[i+1])) + path[i+2:]
			}
		case 3:
			path = strings.Replace(path, "/", "%2F", 1+rng.IntN(2))
			if !strings.HasPrefix(path, "/") {
				path = "/" + path
			}
		case 4:
			path += ".json"
		case 5:
			path = strings.ToUpper(path)
		case 6:
			path += ";jsessionid=1"
		case 7:
			path = strings.Replace(path, "/", `\`, 2)
			if !strings.HasPrefix(path, "/") {
				path = "/" + path[1:]
			}
		case 8:
			path = "/v1/x/.." + path[3:]
		case 9:
			path = strings.Replace(path, "/", "%252F", 2)
			if !strings.HasPrefix(path, "/") {
				path = "/" + path
			}
		case 10:
			path += "."
		}
	}
	return path
}

func hex2(b byte) string {
	const h = "0123456789abcdef"
	return string([]byte{h[b>>4], h[b&15]})
}

// TestDecideShortcutsAgreeUnderOverridesAndSpellings is
// TestDecideShortcutsAgreeWithExhaustive with the other override channels
// (form bodies, the _method query parameter, the override headers in their
// spellings) and the path spellings of mutatePath, against the shape
// policy's scopes and host routes: the shortcut decision equals the
// exhaustive one.
func TestDecideShortcutsAgreeUnderOverridesAndSpellings(t *testing.T) {
	paths := []string{"/v1/svc00/res0", "/v1/svc00/res0/42", "/v1/svc00/res0/42/actions/refund",
		"/v1/svc00/res1", "/v1/svc00/res1/42", "/v1/svc01", "/v1/svc01/x", "/v1/svc02", "/v1/svc02/a/b",
		"/v1/svc00/res2", "/v1/svc00/res2/", "/v1/docs/a", "/v1/docs/inner", "/v1/docs/inner/x", "/v1/orders", "/v1/items/7", "/elsewhere"}
	methods := []string{"POST", "PATCH", "PUT", "DELETE", "GET", "post", "Patch"}
	hosts := []string{"x", "API1.example.com", "api2.example.com:8443", "api1.example.com.", "api2.example.com"}
	overrides := []string{"", "PATCH", "DELETE", "PUT", "POST", "patch", "GET"}
	headerNames := append([]string{"X_HTTP_METHOD_OVERRIDE", "x-http-method-override"}, MethodOverrideHeaders...)
	rng := rand.New(rand.NewPCG(4, 4))
	big, _, bigTargets := bigPolicy(t)
	var bigPaths []string
	for _, tg := range bigTargets {
		line, _, _ := strings.Cut(tg, " HTTP/1.1")
		_, path, _ := strings.Cut(line, " ")
		bigPaths = append(bigPaths, path)
	}
	for _, c := range []struct {
		p     *Policy
		paths []string
	}{{shapesPolicy(t), paths}, {variantPolicy(t), paths}, {big, bigPaths}, {variantPolicy(t), bigPaths}} {
		p := c.p
		ex := exhaustivePolicy(p)
		for range 10000 {
			path := mutatePath(rng, c.paths[rng.IntN(len(c.paths))])
			query := ""
			if o := overrides[rng.IntN(len(overrides))]; o != "" && rng.IntN(3) == 0 {
				query = "?_method=" + o
			}
			head := methods[rng.IntN(len(methods))] + " " + path + query + " HTTP/1.1\r\nHost: " + hosts[rng.IntN(len(hosts))]
			if rng.IntN(2) == 0 {
				head += "\r\nIdempotency-Key: k"
			}
			if o := overrides[rng.IntN(len(overrides))]; o != "" && rng.IntN(3) == 0 {
				head += "\r\n" + headerNames[rng.IntN(len(headerNames))] + ": " + o
			}
			body := ""
			switch rng.IntN(3) {
			case 0:
				head += "\r\nContent-Type: application/json"
				if o := overrides[rng.IntN(len(overrides))]; o != "" {
					body = `{"_method":"` + o + `"}`
				} else {
					body = `{"a":1}`
				}
			case 1:
				head += "\r\nContent-Type: application/x-www-form-urlencoded"
				if o := overrides[rng.IntN(len(overrides))]; o != "" {
					body = "a=1&_method=" + o
				} else {
					body = "a=1"
				}
			}
			r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head + "\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body)))
			if err != nil {
				continue
			}
			for _, withBody := range []bool{false, true} {
				got, want := p.Decide(r), ex.Decide(r)
				if withBody {
					got, want = p.DecideBody(r, []byte(body)), ex.DecideBody(r, []byte(body))
				}
				if got.Route.Name != want.Route.Name || got.Matched.Name != want.Matched.Name || got.Refuse != want.Refuse || got.NeedBody != want.NeedBody {
					t.Fatalf("%q body %q (DecideBody %v): fast %s/%s %q %v, exhaustive %s/%s %q %v", head, body, withBody,
						got.Route.Name, got.Matched.Name, got.Refuse, got.NeedBody, want.Route.Name, want.Matched.Name, want.Refuse, want.NeedBody)
				}
			}
		}
	}
}
