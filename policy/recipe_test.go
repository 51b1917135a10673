package policy

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

func TestRecipeRoundTrip(t *testing.T) {
	for _, spec := range []FingerprintSpec{
		{Body: BodyRaw, Query: true, Headers: []string{"content-type"}},
		{Body: BodyJSON},
		{Body: BodyIgnore, Headers: []string{"a", "content-type", "x-client"}},
	} {
		got, err := ParseRecipe(spec.Recipe())
		if err != nil {
			t.Fatalf("ParseRecipe(%q): %v", spec.Recipe(), err)
		}
		if len(spec.Headers) == 0 {
			spec.Headers = []string{}
		}
		if got.Headers == nil {
			got.Headers = []string{}
		}
		if !reflect.DeepEqual(got, spec) {
			t.Fatalf("round trip of %q = %+v, want %+v", spec.Recipe(), got, spec)
		}
	}
	if got := DefaultRoute().Fingerprint.Recipe(); got != "b=raw&h=content-type&q=1&v=hs1" {
		t.Fatalf("default recipe = %q; docs/protocol.md gives b=raw&h=content-type&q=1&v=hs1", got)
	}
	// Equal settings, equal recipe: header order and case do not matter.
	a := FingerprintSpec{Body: BodyRaw, Headers: []string{"X-B", "x-a"}}.Recipe()
	b := FingerprintSpec{Body: BodyRaw, Headers: []string{"x-a", "x-b"}}.Recipe()
	if a != b {
		t.Fatalf("recipes of equal settings differ: %q, %q", a, b)
	}
}

func TestParseRecipeRefusesWhatItCannotFollow(t *testing.T) {
	for _, r := range []string{
		"", "v=hs2&b=raw&q=1", "b=raw&q=1", "b=raw&q=2&v=hs1", "b=zip&q=1&v=hs1",
		"b=raw&q=1&v=hs1&x=%2Fclient_ts", "b=raw&h=Content-Type&q=1&v=hs1", "b=raw&h=a%20b&q=1&v=hs1",
		"b=raw&b=json&q=1&v=hs1", "%zz",
	} {
		if _, err := ParseRecipe(r); !errors.Is(err, ErrRecipeUnknown) {
			t.Errorf("ParseRecipe(%q) = %v, want ErrRecipeUnknown", r, err)
		}
	}
}

// TestFingerprintUnderRecordedRecipe pins what the proxy relies on: a
// request fingerprinted under a recorded recipe gives the fingerprint the
// first request got under those settings, whatever the route says now.
func TestFingerprintUnderRecordedRecipe(t *testing.T) {
	old := FingerprintSpec{Body: BodyRaw, Query: true, Headers: []string{"content-type"}}
	now := FingerprintSpec{Body: BodyJSON, Headers: []string{"content-type", "x-extra"}}
	req := func() *http.Request {
		r := httptest.NewRequest("POST", "/v1/orders?a=1", strings.NewReader(""))
		r.Header.Set("Content-Type", "application/json")
		return r
	}
	body := []byte(`{"b":1, "a":2}`)
	first := old.Of(req(), body)
	if now.Of(req(), body) == first {
		t.Fatal("test premise: the changed settings should change the fingerprint")
	}
	spec, err := ParseRecipe(old.Recipe())
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.Of(req(), body); got != first {
		t.Fatalf("fingerprint under the recorded recipe = %s, want %s", got, first)
	}
}
