package fingerprint

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
)

func TestExcludeMembers(t *testing.T) {
	for _, c := range []struct {
		body string
		ptrs []string
		want string
	}{
		{`{"a":1,"b":2}`, []string{"/a"}, `{"b":2}`},
		{`{"a":1,"b":2}`, []string{"/b"}, `{"a":1}`},
		{`{"a":1,"b":2}`, []string{"/a", "/b"}, `{}`},
		{`{"a":1}`, []string{"/zz"}, `{"a":1}`},
		{`{"m":{"x":1,"y":{"z":2}},"n":[1,{"t":1,"u":2}]}`, []string{"/m/y/z", "/n/1/t"}, `{"m":{"x":1,"y":{}},"n":[1,{"u":2}]}`},
		// An array element is never removed: its siblings would move.
		{`{"n":[1,2,3]}`, []string{"/n/1", "/n/-"}, `{"n":[1,2,3]}`},
		// "01" is not an array index (RFC 6901), but is a member name.
		{`{"n":[{"a":1},{"a":2}],"o":{"01":1}}`, []string{"/n/01/a", "/o/01"}, `{"n":[{"a":1},{"a":2}],"o":{}}`},
		{`{"a/b":1,"m~n":2,"":3}`, []string{"/a~1b", "/m~0n", "/"}, `{}`},
		{`{"s":"},{\"a\":1","a":1}`, []string{"/a"}, `{"s":"},{\"a\":1"}`},
		{`{"\u00e9":1,"e":2}`, []string{"/é"}, `{"e":2}`},
		{`[{"a":1}]`, []string{"/0/a"}, `[{}]`},
		{`"x"`, []string{"/a"}, `"x"`},
	} {
		canon, ok := canonicalJSON([]byte(c.body))
		if !ok {
			t.Fatalf("%s: not canonicalizable", c.body)
		}
		got := string(excludeMembers(canon, parsePointers(c.ptrs)))
		if got != c.want {
			t.Errorf("excludeMembers(%s, %q) = %s, want %s", c.body, c.ptrs, got, c.want)
		}
	}
}

// TestFingerprintExcludeSeparatesFromHS1: exclusions that remove nothing
// still give another fingerprint than the same body without exclusions,
// and a different exclusion list another one again, so no recipe can be
// answered with a record of another.
func TestFingerprintExcludeSeparatesFromHS1(t *testing.T) {
	in := Input{Method: "POST", Path: "/v1/orders", BodyMode: BodyJSON, Body: []byte(`{"amount":5}`)}
	plain := Of(in)
	in.Exclude = []string{"/client_ts"}
	one := Of(in)
	in.Exclude = []string{"/client_ts", "/meta/request_id"}
	two := Of(in)
	in.Exclude = []string{"/meta/request_id", "/client_ts", "/client_ts"}
	if plain == one || one == two || plain == two {
		t.Fatalf("fingerprints not distinct: %s %s %s", plain, one, two)
	}
	if Of(in) != two {
		t.Fatal("pointer order or duplicates changed the fingerprint")
	}
	// Exclusions only apply to json mode.
	raw := Input{Method: "POST", Path: "/x", BodyMode: BodyRaw, Body: []byte("{}")}
	rawX := raw
	rawX.Exclude = []string{"/a"}
	if Of(raw) != Of(rawX) {
		t.Fatal("exclusions changed a raw-mode fingerprint")
	}
}

// TestRouteFingerprintExclude: a retry whose excluded field changed has the
// first request's fingerprint; a change anywhere else does not.
func TestRouteFingerprintExclude(t *testing.T) {
	spec := Spec{Body: BodyJSON, Headers: []string{"content-type"}, Exclude: []string{"/client_ts", "/meta/request_id"}}
	fp := func(body string) string {
		r := httptest.NewRequest("POST", "/v1/orders", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		return spec.Of(r, []byte(body))
	}
	first := fp(`{"amount":5,"client_ts":1,"meta":{"request_id":"a","src":"app"}}`)
	if got := fp(`{"meta":{"src":"app","request_id":"b"},"amount":5,"client_ts":2}`); got != first {
		t.Errorf("excluded fields changed the fingerprint")
	}
	if got := fp(`{"amount":5,"meta":{"src":"app"}}`); got != first {
		t.Errorf("excluded fields left out changed the fingerprint")
	}
	if got := fp(`{"amount":6,"client_ts":1,"meta":{"request_id":"a","src":"app"}}`); got == first {
		t.Errorf("a change outside the exclusions kept the fingerprint")
	}
	if got := fp(`{"amount":5,"client_ts":1,"meta":{"request_id":"a","src":"web"}}`); got == first {
		t.Errorf("a change beside an excluded member kept the fingerprint")
	}
}

func TestRecipeWithExclusions(t *testing.T) {
	spec := Spec{Body: BodyJSON, Query: true, Headers: []string{"content-type"}, Exclude: []string{"/meta/request_id", "/client_ts", "/a~1b"}}
	rec := spec.Recipe()
	if want := "b=json&h=content-type&q=1&v=hs1&x=%2Fa~1b&x=%2Fclient_ts&x=%2Fmeta%2Frequest_id"; rec != want {
		t.Fatalf("Recipe = %q, want %q (docs/protocol.md)", rec, want)
	}
	got, err := ParseRecipe(rec)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/a~1b", "/client_ts", "/meta/request_id"}; !reflect.DeepEqual(got.Exclude, want) || got.Body != BodyJSON {
		t.Fatalf("ParseRecipe(%q) = %+v", rec, got)
	}
	if got.Recipe() != rec {
		t.Fatalf("round trip %q -> %q", rec, got.Recipe())
	}
	for _, bad := range []string{"b=json&q=1&v=hs1&x=client_ts", "b=json&q=1&v=hs1&x=%2Fa~2", "b=ignore&q=1&v=hs1&x=%2Fa", "b=json&q=1&v=hs1&x="} {
		if _, err := ParseRecipe(bad); !errors.Is(err, ErrRecipeUnknown) {
			t.Errorf("ParseRecipe(%q) = %v, want ErrRecipeUnknown", bad, err)
		}
	}
}

// FuzzFingerprintExclude checks the exclusion path: the encoding decodes
// back to its canonical input (so it is injective), never equals the
// encoding of the same request without exclusions, the E body is canonical
// JSON without the excluded members, and changing an excluded member's
// value never changes the fingerprint.
func FuzzFingerprintExclude(f *testing.F) {
	f.Add([]byte(`{"a":1,"b":{"c":[1,{"d":2}]}}`), "/a\n/b/c/1/d", "x")
	f.Add([]byte(`{"a/b":"~","":[]}`), "/a~1b\n/", "1")
	f.Add([]byte(`not json`), "/a", "")
	f.Add([]byte(`[{"a":1},{"a":2}]`), "/1/a\n/0", "{}")
	f.Fuzz(func(t *testing.T, body []byte, ptrs string, repl string) {
		exclude := strings.Split(ptrs, "\n")
		in := Input{Method: "POST", Path: "/v1/x", BodyMode: BodyJSON, Body: body, Exclude: exclude}
		enc := Encoding(in)
		canon, tag := canonicalInput(in)
		if d := decodeEncoding(t, enc); !equalInputs(d, canon) {
			t.Fatalf("decode(encode(x)) != canonical(x):\n%+v\n%+v", d, canon)
		}
		plain := in
		plain.Exclude = nil
		if bytes.Equal(enc, Encoding(plain)) {
			t.Fatal("an encoding with exclusions equals the one without")
		}
		if Of(in) != "hs1:"+hex.EncodeToString(sha256Of(enc)) {
			t.Fatal("Fingerprint is not hs1: + SHA-256 of the encoding")
		}
		if tag != "E" {
			return
		}
		if c, err := jcs.Transform(canon.Body); err != nil || !bytes.Equal(c, canon.Body) {
			t.Fatalf("E body %s is not canonical JSON: %v", canon.Body, err)
		}
		// A top-level member a pointer names is gone, and replacing its
		// value in the original keeps the fingerprint.
		var out, orig map[string]json.RawMessage
		if json.Unmarshal(canon.Body, &out) != nil {
			return // not an object
		}
		c, _ := canonicalJSON(body)
		if err := json.Unmarshal(c, &orig); err != nil {
			t.Fatal(err)
		}
		for _, p := range parsePointers(canon.Exclude) {
			if len(p) != 1 {
				continue
			}
			if _, ok := out[p[0]]; ok {
				t.Fatalf("member %q still in %s", p[0], canon.Body)
			}
			v, _ := json.Marshal(repl)
			orig[p[0]] = v
			mod, err := json.Marshal(orig)
			if err != nil {
				t.Fatal(err)
			}
			in2 := in
			in2.Body = mod
			if _, ok := canonicalJSON(mod); ok && Of(in2) != Of(in) {
				t.Fatalf("changing excluded %q changed the fingerprint: %s vs %s", p[0], body, mod)
			}
		}
	})
}
