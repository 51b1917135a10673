package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
)

var updateVectors = flag.Bool("update-vectors", false, "rewrite testdata/fingerprint_vectors.json (only for new vectors: hs1 is frozen)")

// vector is one entry of testdata/fingerprint_vectors.json.
type vector struct {
	Name         string   `json:"name"`
	Method       string   `json:"method"`
	Path         string   `json:"path"`
	IncludeQuery bool     `json:"include_query"`
	Query        string   `json:"query"`
	Headers      []Header `json:"headers"`
	BodyMode     BodyMode `json:"body_mode"`
	Body         string   `json:"body"`
	Exclude      []string `json:"exclude,omitempty"`
	Encoding     string   `json:"encoding_hex"`
	Fingerprint  string   `json:"fingerprint"`
}

func (v vector) input() Input {
	return Input{Method: v.Method, Path: v.Path, IncludeQuery: v.IncludeQuery, Query: v.Query,
		Headers: v.Headers, BodyMode: v.BodyMode, Body: []byte(v.Body), Exclude: v.Exclude}
}

func vectorInputs() []vector {
	ct := func(vs ...string) []Header { return []Header{{Name: "content-type", Values: vs}} }
	return []vector{
		{Name: "minimal raw, no query, no headers", Method: "POST", Path: "/v1/orders", BodyMode: BodyRaw, Body: `{"amount":100}`},
		{Name: "query included and empty", Method: "POST", Path: "/v1/orders", IncludeQuery: true, Query: "", BodyMode: BodyRaw},
		{Name: "query included", Method: "POST", Path: "/v1/orders", IncludeQuery: true, Query: "a=1&b=%20", BodyMode: BodyRaw},
		{Name: "header present", Method: "POST", Path: "/v1/orders", Headers: ct("application/json"), BodyMode: BodyRaw, Body: "{}"},
		{Name: "header absent", Method: "POST", Path: "/v1/orders", Headers: ct(), BodyMode: BodyRaw, Body: "{}"},
		{Name: "header empty", Method: "POST", Path: "/v1/orders", Headers: ct(""), BodyMode: BodyRaw, Body: "{}"},
		{Name: "two headers, two values", Method: "PATCH", Path: "/v1/a%2Fb", Headers: []Header{
			{Name: "x-tenant", Values: []string{"t1", "t2"}}, {Name: "Content-Type", Values: []string{"text/plain"}}}, BodyMode: BodyRaw, Body: "hi"},
		{Name: "json canonicalized", Method: "POST", Path: "/v1/payments/7/capture", BodyMode: BodyJSON, Body: "{ \"b\": [1, 2.50, \"x\"], \"a\": {\"z\": true, \"y\": null} }"},
		{Name: "json same after canonicalization", Method: "POST", Path: "/v1/payments/7/capture", BodyMode: BodyJSON, Body: `{"a":{"y":null,"z":true},"b":[1,2.5,"x"]}`},
		{Name: "json mode, not JSON", Method: "POST", Path: "/v1/payments/7/capture", BodyMode: BodyJSON, Body: `{"a":`},
		{Name: "json mode, inexact number", Method: "POST", Path: "/v1/x", BodyMode: BodyJSON, Body: `{"id":9007199254740993}`},
		{Name: "json mode, empty body", Method: "POST", Path: "/v1/x", BodyMode: BodyJSON},
		{Name: "body ignored", Method: "POST", Path: "/v1/x", IncludeQuery: true, Query: "q", BodyMode: BodyIgnore, Body: "anything"},
		// Exclusions (fingerprint.exclude): X records, then E, or F for a
		// body that is not canonicalizable.
		{Name: "json with exclusions", Method: "POST", Path: "/v1/orders", BodyMode: BodyJSON,
			Body: `{"meta":{"request_id":"r1","v":2},"client_ts":"2026-01-01T00:00:00Z","amount":5}`, Exclude: []string{"/meta/request_id", "/client_ts"}},
		{Name: "json with exclusions, excluded members changed", Method: "POST", Path: "/v1/orders", BodyMode: BodyJSON,
			Body: `{"amount":5,"client_ts":"2026-01-01T00:00:09Z","meta":{"v":2,"request_id":"r2"}}`, Exclude: []string{"/client_ts", "/meta/request_id"}},
		{Name: "json with exclusions, nothing excluded", Method: "POST", Path: "/v1/orders", BodyMode: BodyJSON,
			Body: `{"amount":5}`, Exclude: []string{"/client_ts"}},
		{Name: "json with exclusions, escaped pointer and array", Method: "POST", Path: "/v1/orders", BodyMode: BodyJSON,
			Body: `{"a/b":1,"m~n":2,"items":[{"ts":1,"sku":"x"},{"ts":2,"sku":"y"}],"k":3}`, Exclude: []string{"/a~1b", "/m~0n", "/items/1/ts"}},
		{Name: "json with exclusions, not JSON", Method: "POST", Path: "/v1/orders", BodyMode: BodyJSON,
			Body: `{"amount":`, Exclude: []string{"/client_ts"}},
	}
}

func TestFingerprintVectors(t *testing.T) {
	const file = "testdata/fingerprint_vectors.json"
	if *updateVectors {
		vs := vectorInputs()
		for i := range vs {
			vs[i].Encoding = hex.EncodeToString(Encoding(vs[i].input()))
			vs[i].Fingerprint = Of(vs[i].input())
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(vs); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var vs []vector
	if err := json.Unmarshal(data, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) < len(vectorInputs()) {
		t.Fatalf("%s has %d vectors, want at least %d", file, len(vs), len(vectorInputs()))
	}
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			enc := hex.EncodeToString(Encoding(v.input()))
			if enc != v.Encoding {
				t.Errorf("encoding\n got %s\nwant %s", enc, v.Encoding)
			}
			raw, _ := hex.DecodeString(v.Encoding)
			sum := sha256.Sum256(raw)
			if want := "hs1:" + hex.EncodeToString(sum[:]); v.Fingerprint != want {
				t.Errorf("vector file: fingerprint %s is not hs1:SHA-256(encoding) = %s", v.Fingerprint, want)
			}
			if got := Of(v.input()); got != v.Fingerprint {
				t.Errorf("Fingerprint = %s, want %s", got, v.Fingerprint)
			}
		})
	}
	byName := map[string]vector{}
	for _, v := range vs {
		byName[v.Name] = v
	}
	if a, b := byName["json canonicalized"], byName["json same after canonicalization"]; a.Fingerprint != b.Fingerprint {
		t.Error("key order and whitespace changed a json-mode fingerprint")
	}
	if a, b := byName["json with exclusions"], byName["json with exclusions, excluded members changed"]; a.Fingerprint != b.Fingerprint {
		t.Error("a change of excluded members changed the fingerprint")
	}
	seen := map[string]string{}
	for _, v := range vs {
		if v.Name == "json same after canonicalization" || v.Name == "json with exclusions, excluded members changed" {
			continue
		}
		if other, dup := seen[v.Fingerprint]; dup {
			t.Errorf("vectors %q and %q share a fingerprint", v.Name, other)
		}
		seen[v.Fingerprint] = v.Name
	}
}

// TestFingerprintLayout builds one encoding by hand from docs/protocol.md,
// so that the encoder cannot drift from the documented layout unnoticed.
func TestFingerprintLayout(t *testing.T) {
	var want bytes.Buffer
	rec := func(tag byte, s string) {
		want.WriteByte(tag)
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		want.Write(n[:])
		want.WriteString(s)
	}
	rec('S', "hs1")
	rec('M', "POST")
	rec('P', "/v1/orders")
	rec('Q', "a=1")
	rec('H', "content-type")
	rec('V', "application/json")
	rec('H', "x-missing")
	rec('J', `{"a":1,"b":2}`)
	got := Encoding(Input{
		Method: "POST", Path: "/v1/orders", IncludeQuery: true, Query: "a=1",
		Headers:  []Header{{Name: "X-Missing"}, {Name: "Content-Type", Values: []string{"application/json"}}},
		BodyMode: BodyJSON, Body: []byte(`{"b":2, "a":1}`),
	})
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("encoding\n got %x\nwant %x", got, want.Bytes())
	}
}

func TestSpecOf(t *testing.T) {
	r := &Spec{Headers: []string{"content-type", "x-tenant"}, Query: true, Body: BodyRaw}
	req := httptest.NewRequest("POST", "/v1/a%2Fb?x=1&y=%20", nil)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Add("X-Tenant", "t1")
	req.Header.Add("X-Tenant", "t2")
	body := []byte(`{"a":1}`)
	want := Of(Input{Method: "POST", Path: "/v1/a%2Fb", IncludeQuery: true, Query: "x=1&y=%20",
		Headers:  []Header{{Name: "content-type", Values: []string{"application/json"}}, {Name: "x-tenant", Values: []string{"t1", "t2"}}},
		BodyMode: BodyRaw, Body: body})
	if got := r.Of(req, body); got != want {
		t.Fatalf("Of = %s, want %s", got, want)
	}
	if !strings.HasPrefix(want, "hs1:") || len(want) != 4+64 {
		t.Fatalf("fingerprint %q is not hs1: + 64 hex digits", want)
	}

	differs := func(name string, mutate func(*Spec, *http.Request) []byte) {
		t.Helper()
		r2 := *r
		req2 := req.Clone(req.Context())
		b := mutate(&r2, req2)
		if b == nil {
			b = body
		}
		if got := r2.Of(req2, b); got == want {
			t.Errorf("%s: fingerprint unchanged", name)
		}
	}
	differs("method", func(_ *Spec, q *http.Request) []byte { q.Method = "PATCH"; return nil })
	differs("path", func(_ *Spec, q *http.Request) []byte { q.URL.Path, q.URL.RawPath = "/v1/a/b", ""; return nil })
	differs("query order", func(_ *Spec, q *http.Request) []byte { q.URL.RawQuery = "y=%20&x=1"; return nil })
	differs("query off", func(r *Spec, _ *http.Request) []byte { r.Query = false; return nil })
	differs("header value", func(_ *Spec, q *http.Request) []byte { q.Header.Set("Content-Type", "text/plain"); return nil })
	differs("header value order", func(_ *Spec, q *http.Request) []byte { q.Header["X-Tenant"] = []string{"t2", "t1"}; return nil })
	differs("header absent", func(_ *Spec, q *http.Request) []byte { q.Header.Del("Content-Type"); return nil })
	differs("header empty", func(_ *Spec, q *http.Request) []byte { q.Header.Set("Content-Type", ""); return nil })
	differs("body", func(_ *Spec, _ *http.Request) []byte { return []byte(`{"a":2}`) })
	differs("body whitespace in raw mode", func(_ *Spec, _ *http.Request) []byte { return []byte(`{"a": 1}`) })

	// Headers not configured do not matter.
	req3 := req.Clone(req.Context())
	req3.Header.Set("User-Agent", "other")
	if got := r.Of(req3, body); got != want {
		t.Error("an unconfigured header changed the fingerprint")
	}
}

func TestFingerprintQueryAbsentVersusEmpty(t *testing.T) {
	in := Input{Method: "POST", Path: "/x", BodyMode: BodyRaw}
	absent := Of(in)
	in.IncludeQuery = true
	if empty := Of(in); empty == absent {
		t.Fatal("query excluded and query included-but-empty share a fingerprint")
	}
	// Excluded: the query's content does not matter.
	a := Of(Input{Method: "POST", Path: "/x", Query: "a=1", BodyMode: BodyRaw})
	if a != absent {
		t.Fatal("an excluded query changed the fingerprint")
	}
}

func TestFingerprintJSON(t *testing.T) {
	fp := func(body string) string {
		return Of(Input{Method: "POST", Path: "/x", BodyMode: BodyJSON, Body: []byte(body)})
	}
	raw := func(body string) string {
		return Of(Input{Method: "POST", Path: "/x", BodyMode: BodyRaw, Body: []byte(body)})
	}
	same := [][2]string{
		{`{"a":1,"b":2}`, `{"b":2,"a":1}`},
		{`{"a":1,"b":2}`, " {\n\t\"b\" : 2 ,\r\n \"a\":1 } \n"},
		{`{"a":{"x":[1,2],"y":"z"}}`, `{"a":{"y":"z","x":[1,2]}}`},
		{`{"s":"A"}`, `{"s":"\u0041"}`},
		{`{"n":1}`, `{"n":1.0}`},
		{`{"n":100}`, `{"n":1e2}`},
		{`{"n":0.1}`, `{"n":0.10}`},
	}
	for _, p := range same {
		if fp(p[0]) != fp(p[1]) {
			t.Errorf("json mode: %q and %q differ", p[0], p[1])
		}
	}
	differ := [][2]string{
		{`[1,2]`, `[2,1]`},
		{`{"a":[1,2]}`, `{"a":[2,1]}`},
		{`{"a":1}`, `{"a":"1"}`},
		{`{"id":9007199254740993}`, `{"id":9007199254740992}`},
		{`{"n":0.1}`, `{"n":0.1000000000000000055511151231257827}`},
		{`{"a":`, `{"a": `},
		{`not json`, `not  json`},
	}
	for _, p := range differ {
		if fp(p[0]) == fp(p[1]) {
			t.Errorf("json mode: %q and %q share a fingerprint", p[0], p[1])
		}
	}
	// A body that is not canonical JSON falls back to raw bytes, tagged F,
	// so it never collides with raw mode's B nor with a canonical J.
	for _, b := range []string{`{"a":`, ``, `{"id":9007199254740993}`} {
		enc := Encoding(Input{Method: "POST", Path: "/x", BodyMode: BodyJSON, Body: []byte(b)})
		if tag := enc[len(enc)-9-len(b)]; tag != 'F' {
			t.Errorf("json mode %q: body tag %q, want F", b, tag)
		}
		if fp(b) == raw(b) {
			t.Errorf("json-mode fallback and raw mode share a fingerprint for %q", b)
		}
	}
	// Valid canonical JSON in json mode is tagged J, so it never equals raw
	// mode's record of the same bytes.
	if fp(`{"a":1}`) == raw(`{"a":1}`) {
		t.Error("json and raw mode share a fingerprint")
	}
}

func TestNumberExact(t *testing.T) {
	for lit, want := range map[string]bool{
		"0": true, "-0": true, "1": true, "1.0": true, "0.1": true, "1e2": true, "123456789012345": true,
		"9007199254740992": true, "9007199254740993": false, "1.5e300": true, "1e400": false, "1e-400": false,
		"0.30000000000000004": true, "0.3000000000000000444": false, "5e-324": true,
		"12345678901234567890123456789012345678901234567890": false,
	} {
		if got := numberExact(lit); got != want {
			t.Errorf("numberExact(%q) = %v, want %v", lit, got, want)
		}
	}
}

// decodeEncoding parses an hs1 encoding back into its canonical input; it
// fails on any byte sequence the encoder cannot produce. Together with
// encoding(canonical(x)) == encoding(x) this proves that the encoding is
// injective on canonical inputs.
func decodeEncoding(t *testing.T, enc []byte) Input {
	t.Helper()
	var in Input
	next := func() (byte, []byte) {
		if len(enc) < 9 {
			t.Fatalf("truncated record header: %x", enc)
		}
		tag, n := enc[0], binary.BigEndian.Uint64(enc[1:9])
		if uint64(len(enc)-9) < n {
			t.Fatalf("record %q: length %d past the end", tag, n)
		}
		val := enc[9 : 9+n]
		enc = enc[9+n:]
		return tag, val
	}
	expect := func(want byte) []byte {
		tag, v := next()
		if tag != want {
			t.Fatalf("tag %q, want %q", tag, want)
		}
		return v
	}
	if s := expect('S'); string(s) != "hs1" {
		t.Fatalf("scheme %q", s)
	}
	in.Method = string(expect('M'))
	in.Path = string(expect('P'))
	switch tag, v := next(); tag {
	case 'Q':
		in.IncludeQuery, in.Query = true, string(v)
	case 'q':
		if len(v) != 0 {
			t.Fatal("q record with content")
		}
	default:
		t.Fatalf("tag %q, want Q or q", tag)
	}
	for {
		tag, v := next()
		switch tag {
		case 'H':
			in.Headers = append(in.Headers, Header{Name: string(v)})
			continue
		case 'V':
			if len(in.Headers) == 0 {
				t.Fatal("V before H")
			}
			h := &in.Headers[len(in.Headers)-1]
			h.Values = append(h.Values, string(v))
			continue
		case 'B':
			in.BodyMode, in.Body = BodyRaw, v
		case 'J':
			in.BodyMode, in.Body = BodyJSON, v
		case 'F':
			in.BodyMode, in.Body = BodyJSON, v
		case 'X':
			in.Exclude = append(in.Exclude, string(v))
			continue
		case 'E':
			if len(in.Exclude) == 0 {
				t.Fatal("E without X")
			}
			in.BodyMode, in.Body = BodyJSON, v
		case 'I':
			in.BodyMode = BodyIgnore
		default:
			t.Fatalf("unexpected tag %q", tag)
		}
		break
	}
	if len(enc) != 0 {
		t.Fatalf("%d trailing bytes", len(enc))
	}
	return in
}

// canonicalInput is what an input reduces to before encoding.
func canonicalInput(in Input) (Input, string) {
	out := Input{Method: in.Method, Path: in.Path, IncludeQuery: in.IncludeQuery}
	if in.IncludeQuery {
		out.Query = in.Query
	}
	for _, h := range in.Headers {
		out.Headers = append(out.Headers, Header{Name: asciiLower(h.Name), Values: h.Values})
	}
	slices.SortStableFunc(out.Headers, func(a, b Header) int { return strings.Compare(a.Name, b.Name) })
	bodyTag := "B"
	switch in.BodyMode {
	case BodyIgnore:
		out.BodyMode, bodyTag = BodyIgnore, "I"
	case BodyJSON:
		out.BodyMode = BodyJSON
		if len(in.Exclude) > 0 {
			out.Exclude = slices.Compact(slices.Sorted(slices.Values(in.Exclude)))
		}
		c, ok := canonicalJSON(in.Body)
		switch {
		case ok && out.Exclude != nil:
			out.Body, bodyTag = excludeMembers(c, parsePointers(out.Exclude)), "E"
		case ok:
			out.Body, bodyTag = c, "J"
		default:
			out.Body, bodyTag = in.Body, "F"
		}
	default:
		out.BodyMode, out.Body = BodyRaw, in.Body
	}
	return out, bodyTag
}

func equalInputs(a, b Input) bool {
	if a.Method != b.Method || a.Path != b.Path || a.IncludeQuery != b.IncludeQuery || a.Query != b.Query ||
		a.BodyMode != b.BodyMode || !bytes.Equal(a.Body, b.Body) || len(a.Headers) != len(b.Headers) ||
		!slices.Equal(a.Exclude, b.Exclude) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i].Name != b.Headers[i].Name || !slices.Equal(a.Headers[i].Values, b.Headers[i].Values) {
			return false
		}
	}
	return true
}

// fuzzInput builds an input from fuzz arguments: headers is split on "\n"
// into lines "name:value1\x00value2" ("name" alone: absent).
func fuzzInput(method, path string, query string, flags uint8, headers string, body []byte) Input {
	in := Input{Method: method, Path: path, Query: query, IncludeQuery: flags&1 != 0, Body: body}
	in.BodyMode = []BodyMode{BodyRaw, BodyJSON, BodyIgnore}[int(flags>>1)%3]
	if headers != "" {
		for _, line := range strings.Split(headers, "\n") {
			name, vals, ok := strings.Cut(line, ":")
			h := Header{Name: name}
			if ok {
				h.Values = strings.Split(vals, "\x00")
			}
			in.Headers = append(in.Headers, h)
		}
	}
	return in
}

func FuzzFingerprint(f *testing.F) {
	f.Add("POST", "/v1/orders", "a=1", uint8(1), "content-type:application/json", []byte(`{"a":1}`),
		"POST", "/v1/orders", "a=1", uint8(3), "content-type:application/json", []byte(`{ "a" : 1 }`))
	f.Add("POST", "/a", "", uint8(0), "x", []byte(""), "POST", "/a", "", uint8(1), "x:", []byte(""))
	f.Add("POST", "/aM", "", uint8(0), "", []byte("x"), "POST", "/a", "", uint8(0), "", []byte("Mx"))
	f.Add("P", "OST/a", "", uint8(2), "a:b\nc:d", []byte("[1,2]"), "PO", "ST/a", "", uint8(2), "c:d\na:b", []byte("[2,1]"))
	f.Fuzz(func(t *testing.T, m1, p1, q1 string, f1 uint8, h1 string, b1 []byte, m2, p2, q2 string, f2 uint8, h2 string, b2 []byte) {
		in1, in2 := fuzzInput(m1, p1, q1, f1, h1, b1), fuzzInput(m2, p2, q2, f2, h2, b2)
		e1, e2 := Encoding(in1), Encoding(in2)
		c1, _ := canonicalInput(in1)
		c2, _ := canonicalInput(in2)
		if d := decodeEncoding(t, e1); !equalInputs(d, c1) {
			t.Fatalf("decode(encode(x)) != canonical(x):\n%+v\n%+v", d, c1)
		}
		if bytes.Equal(e1, e2) != equalInputs(c1, c2) {
			t.Fatalf("encodings equal = %v but canonical inputs equal = %v:\n%+v\n%+v", bytes.Equal(e1, e2), equalInputs(c1, c2), c1, c2)
		}
		if Of(in1) != "hs1:"+hex.EncodeToString(sha256Of(e1)) {
			t.Fatal("Fingerprint is not hs1: + SHA-256 of the encoding")
		}
	})
}

func sha256Of(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

func BenchmarkFingerprint(b *testing.B) {
	var body bytes.Buffer
	body.WriteString(`{"items":[`)
	for i := 0; body.Len() < 1000; i++ {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"sku":"SKU-000123","qty":2,"price":19.99,"note":"gift wrap"}`)
	}
	body.WriteString(`],"currency":"EUR"}`)
	data := body.Bytes()
	req := httptest.NewRequest("POST", "/v1/orders?source=web", nil)
	req.Header.Set("Content-Type", "application/json")
	for _, mode := range []BodyMode{BodyRaw, BodyJSON} {
		r := &Spec{Headers: []string{"content-type"}, Query: true, Body: mode}
		b.Run(string(mode), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				r.Of(req, data)
			}
		})
	}
}
