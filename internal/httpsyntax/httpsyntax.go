// Package httpsyntax holds the HTTP syntax rules that more than one
// package of idemgate applies, so that they apply them alike: the token
// syntax of RFC 9110 section 5.6.2, which field names and methods share
// (the configuration's header names, owner headers and methods, and the
// header names a stored fingerprint recipe lists), and the canonical form
// of a request's host (routes match it; key scopes are made of it).
package httpsyntax

import "strings"

// IsToken reports whether s is an RFC 9110 section 5.6.2 token (the
// syntax of field names and methods).
func IsToken(s string) bool {
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

// Host returns the request host (with any port) as ServeMux should
// compare it: host names are case-insensitive and a fully qualified name may
// end in one dot (RFC 3986 section 3.2.2, RFC 1034 section 3.1), so
// "API.Example.COM." is "api.example.com".
func Host(host string) string {
	name, port := host, ""
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		name, port = host[:i], host[i:]
	}
	if strings.HasSuffix(name, ".") && !strings.HasSuffix(name, "..") {
		name = name[:len(name)-1]
	} else if !strings.ContainsFunc(name, func(c rune) bool { return 'A' <= c && c <= 'Z' }) {
		return host
	}
	return strings.ToLower(name) + port
}
