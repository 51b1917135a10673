// Package jsonpointer reads RFC 6901 JSON pointers, the way the
// configuration names a member of a JSON request body: the idempotency key
// of `key: {from: body, pointer: /id}` (package identity) and the members
// fingerprint.exclude removes before a body is fingerprinted (package
// fingerprint). Both refuse the same pointers, so a pointer valid in one
// setting is valid in the other.
package jsonpointer

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrInvalid is wrapped by Parse for a string that is not an
// RFC 6901 JSON pointer usable by idemgate.
var ErrInvalid = errors.New("invalid JSON pointer")

// Parse splits an RFC 6901 JSON pointer into its reference tokens,
// unescaped (~1 is "/", ~0 is "~"). It refuses the empty pointer (the
// whole document, which excluding or reading as a key makes no sense), a
// pointer that does not start with "/", a "~" not followed by 0 or 1, and
// invalid UTF-8 (a JSON member name is always valid UTF-8, so such a
// pointer could never match).
func Parse(p string) ([]string, error) {
	switch {
	case p == "":
		return nil, fmt.Errorf("%w: the empty pointer names the whole body", ErrInvalid)
	case p[0] != '/':
		return nil, fmt.Errorf("%w: %q must start with \"/\", e.g. /client_ts", ErrInvalid, p)
	case !utf8.ValidString(p):
		return nil, fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalid, p)
	}
	tokens := strings.Split(p[1:], "/")
	for i, tok := range tokens {
		for j := 0; j < len(tok); j++ {
			if tok[j] == '~' && (j+1 == len(tok) || (tok[j+1] != '0' && tok[j+1] != '1')) {
				return nil, fmt.Errorf("%w: %q: \"~\" must be followed by 0 or 1 (RFC 6901: ~0 is \"~\", ~1 is \"/\")", ErrInvalid, p)
			}
		}
		// Order matters (RFC 6901 section 4): ~01 is "~1", not "/".
		tokens[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
	}
	return tokens, nil
}

// Index returns the index an RFC 6901 reference token names in an
// array: "0" or digits without a leading zero; "-" and anything else name
// no element.
func Index(tok string) (int, bool) {
	if tok == "" || len(tok) > 9 || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(tok)
	return n, err == nil
}
