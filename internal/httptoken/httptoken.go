// Package httptoken checks the token syntax of RFC 9110 section 5.6.2,
// which field names and methods share: the configuration's header names,
// owner headers and methods, and the header names a stored fingerprint
// recipe lists, are all checked by this one rule.
package httptoken

import "strings"

// Valid reports whether s is an RFC 9110 section 5.6.2 token (the
// syntax of field names and methods).
func Valid(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
