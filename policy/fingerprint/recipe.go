package fingerprint

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/idemgate/idemgate/internal/httpsyntax"
	"github.com/idemgate/idemgate/internal/jsonpointer"
)

// recipeScheme is the "v" of every recipe this build writes: the
// fingerprint format the recipe's settings feed (docs/protocol.md,
// "Request fingerprint (hs1)").
const recipeScheme = "hs1"

// ErrRecipeUnknown is returned by ParseRecipe for a recipe this build cannot
// follow (another fingerprint format or an unknown setting), e.g. one
// written by a newer idemgate. A retry of such a record can be neither
// replayed nor run: the proxy refuses it rather than guess.
var ErrRecipeUnknown = errors.New("fingerprint recipe unknown to this build")

// Recipe returns the fingerprint recipe of s: how a request was turned into its
// fingerprint, stored with every record (store.ClaimParams.Recipe) so that a
// retry is compared by the settings its first request was fingerprinted with,
// even after the route's fingerprint settings changed (docs/protocol.md,
// "Fingerprint recipes"; TestRecordsKeepTheirRecipe). The form is a URL query,
// keys sorted (url.Values.Encode):
//
//	b=raw&h=content-type&q=1&v=hs1
//
// v is the fingerprint format, b the body mode, q "1" or "0" for the query,
// one h per fingerprinted header name (lowercase, sorted), one x per
// excluded JSON pointer (fingerprint.exclude, sorted; URL-encoded like
// every value, so "/a/b" is x=%2Fa%2Fb), and m=normalize when media types
// are normalized. A spec without exclusions or normalization has neither
// x nor m, so its recipe is the one earlier builds wrote and read. Equal
// specs give equal strings; ParseRecipe reverses it. See docs/protocol.md,
// "Fingerprint recipes".
func (s Spec) Recipe() string {
	v := url.Values{"v": {recipeScheme}, "b": {string(s.Body)}, "q": {"0"}}
	if s.Query {
		v["q"] = []string{"1"}
	}
	if s.NormalizeMediaTypes {
		v["m"] = []string{MediaTypesNormalize}
	}
	if len(s.Headers) > 0 {
		h := make([]string, len(s.Headers))
		for i, name := range s.Headers {
			h[i] = strings.ToLower(name)
		}
		slices.Sort(h)
		v["h"] = slices.Compact(h)
	}
	if len(s.Exclude) > 0 {
		v["x"] = slices.Compact(slices.Sorted(slices.Values(s.Exclude)))
	}
	if s.Body == BodyProtobuf && s.Proto != nil {
		// Which descriptors: a record fingerprinted under others is not
		// compared under these (ParseRecipe refuses b=protobuf, as it
		// cannot load them).
		v["d"] = []string{s.Proto.Digest}
	}
	return v.Encode()
}

// ParseRecipe parses a recipe written by Spec.Recipe. It returns
// an error wrapping ErrRecipeUnknown for another fingerprint format, an
// unknown key or value, or a malformed string.
func ParseRecipe(recipe string) (Spec, error) {
	v, err := url.ParseQuery(recipe)
	if err != nil {
		return Spec{}, fmt.Errorf("%w: %q: %w", ErrRecipeUnknown, recipe, err)
	}
	one := func(k string) (string, bool) {
		vals := v[k]
		return strings.Join(vals, ""), len(vals) == 1
	}
	var s Spec
	if scheme, ok := one("v"); !ok || scheme != recipeScheme {
		return Spec{}, fmt.Errorf("%w: %q: fingerprint format %q", ErrRecipeUnknown, recipe, v["v"])
	}
	switch q, _ := one("q"); q {
	case "1":
		s.Query = true
	case "0":
	default:
		return Spec{}, fmt.Errorf("%w: %q: query %q", ErrRecipeUnknown, recipe, v["q"])
	}
	b, _ := one("b")
	s.Body = BodyMode(b)
	switch s.Body {
	case BodyRaw, BodyJSON, BodyIgnore:
	default:
		return Spec{}, fmt.Errorf("%w: %q: body mode %q", ErrRecipeUnknown, recipe, v["b"])
	}
	for _, h := range v["h"] {
		if !httpsyntax.IsToken(h) || h != strings.ToLower(h) {
			return Spec{}, fmt.Errorf("%w: %q: header %q", ErrRecipeUnknown, recipe, h)
		}
	}
	s.Headers = slices.Clone(v["h"])
	if xs := v["x"]; len(xs) > 0 {
		if s.Body != BodyJSON {
			return Spec{}, fmt.Errorf("%w: %q: exclusions with body mode %q", ErrRecipeUnknown, recipe, s.Body)
		}
		for _, x := range xs {
			if _, err := jsonpointer.Parse(x); err != nil {
				return Spec{}, fmt.Errorf("%w: %q: %w", ErrRecipeUnknown, recipe, err)
			}
		}
		s.Exclude = slices.Compact(slices.Sorted(slices.Values(xs)))
	}
	if _, ok := v["m"]; ok {
		if m, one := one("m"); !one || m != MediaTypesNormalize {
			return Spec{}, fmt.Errorf("%w: %q: media types %q", ErrRecipeUnknown, recipe, v["m"])
		}
		s.NormalizeMediaTypes = true
	}
	for k := range v {
		switch k {
		case "v", "q", "b", "h", "x", "m":
		default:
			return Spec{}, fmt.Errorf("%w: %q: setting %q", ErrRecipeUnknown, recipe, k)
		}
	}
	return s, nil
}
