package fingerprint

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

func TestRecipeRoundTrip(t *testing.T) {
	for _, spec := range []Spec{
		{Body: BodyRaw, Query: true, Headers: []string{"content-type"}},
		{Body: BodyJSON},
		{Body: BodyIgnore, Headers: []string{"a", "content-type", "x-client"}},
		{Body: BodyRaw, Headers: []string{"content-type"}, NormalizeMediaTypes: true},
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
	// Equal settings, equal recipe: header order and case do not matter.
	a := Spec{Body: BodyRaw, Headers: []string{"X-B", "x-a"}}.Recipe()
	b := Spec{Body: BodyRaw, Headers: []string{"x-a", "x-b"}}.Recipe()
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
	old := Spec{Body: BodyRaw, Query: true, Headers: []string{"content-type"}}
	now := Spec{Body: BodyJSON, Headers: []string{"content-type", "x-extra"}}
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

// TestMediaTypes pins what a retry whose Content-Type differs only by default
// parameters gets (fingerprint.media_types): by default (media_types: exact) a
// different fingerprint, so 422; with media_types: normalize the same one,
// recorded as m=normalize in the recipe. A record of the default recipe is
// still compared exactly, whatever the route says now.
func TestMediaTypes(t *testing.T) {
	req := func(ct string) *http.Request {
		r := httptest.NewRequest("POST", "/v1/orders", strings.NewReader("{}"))
		r.Header.Set("Content-Type", ct)
		return r
	}
	exact := Spec{Body: BodyRaw, Query: true, Headers: []string{"content-type"}}
	norm := exact
	norm.NormalizeMediaTypes = true
	same := []string{"application/json", "application/json; charset=utf-8", "Application/JSON;charset=UTF-8", "application/json ; charset=\"utf-8\""}
	for _, ct := range same[1:] {
		if exact.Of(req(ct), []byte("{}")) == exact.Of(req(same[0]), []byte("{}")) {
			t.Errorf("exact: %q fingerprints as application/json", ct)
		}
		if norm.Of(req(ct), []byte("{}")) != norm.Of(req(same[0]), []byte("{}")) {
			t.Errorf("normalize: %q does not fingerprint as application/json", ct)
		}
	}
	for _, ct := range []string{"application/json; charset=latin1", "text/plain", "application/json; profile=x"} {
		if norm.Of(req(ct), []byte("{}")) == norm.Of(req(same[0]), []byte("{}")) {
			t.Errorf("normalize: %q fingerprints as application/json", ct)
		}
	}
	if got := norm.Recipe(); got != "b=raw&h=content-type&m=normalize&q=1&v=hs1" {
		t.Errorf("recipe = %q", got)
	}
	if got := exact.Recipe(); strings.Contains(got, "m=") {
		t.Errorf("exact recipe %q names media types: older builds could not read it", got)
	}
	for in, want := range map[string]string{
		"application/merge-patch+json; charset=UTF-8":      "application/merge-patch+json",
		"text/plain; Charset=UTF-8; format=flowed":         "text/plain; charset=utf-8; format=flowed",
		"application/x-www-form-urlencoded; charset=utf-8": "application/x-www-form-urlencoded",
		"not a media type;;":                               "not a media type;;",
	} {
		if got := NormalizeMediaType(in); got != want {
			t.Errorf("NormalizeMediaType(%q) = %q, want %q", in, got, want)
		}
	}
	if _, err := ParseRecipe("b=raw&m=loose&q=1&v=hs1"); !errors.Is(err, ErrRecipeUnknown) {
		t.Errorf("ParseRecipe with m=loose: %v, want ErrRecipeUnknown", err)
	}
}
