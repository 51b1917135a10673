package policy

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// variantSet builds a request's path variants on first use (a GET with an
// escaped query needs none) and remembers whether they were cut short.
type variantSet struct {
	r         *http.Request
	forms     []pathForm
	built     bool
	truncated bool
}

// get returns the path variants, or none when they were cut short: the
// request is refused then (decide), so matching them would be wasted.
func (v *variantSet) get() []pathForm {
	if !v.built {
		v.forms, v.truncated = pathForms(v.r)
		v.built = true
		if v.truncated {
			v.forms = nil
		}
	}
	return v.forms
}

// pathForm is one path variant: an escaped path (matched as sent, its
// escapes kept) or a decoded one.
type pathForm struct {
	path    string
	escaped bool
	raw     bool // the form as sent: its route is the matched one
}

// maxPathForms bounds the path forms a request is matched in: past it the
// request is refused (ambiguous-request) rather than matched hundreds of
// times. A path combining every normalization Decide knows would have
// several hundred forms; a legitimate one has at most a few dozen.
const maxPathForms = 64

// maxDecodes bounds how many times in all (net/http's decoding included) a
// path is decoded for its variants: a hop that decodes once more than the
// upstream's router reads "%252F" as "/"; three rounds cover "%25252F",
// and the bound keeps a crafted path from multiplying the matches.
const maxDecodes = 3

// pathForms returns r's path variants, most normalized first: decoded
// (most rounds first) before escaped, "\" as "/" and ";" parameters
// stripped before kept, extension and trailing dots removed before kept
// (tailForms), each cleaned of dot segments and repeated slashes, lower
// case before as sent, without trailing slash before with. Duplicates are
// dropped. A CONNECT request (authority, not path) has none. Past
// maxPathForms forms it stops, and reports that the list is cut short.
func pathForms(r *http.Request) ([]pathForm, bool) {
	if r.Method == http.MethodConnect {
		return nil, false
	}
	esc := r.URL.EscapedPath()
	rawPath := CleanPath(esc)
	type source struct {
		path    string
		escaped bool
	}
	var buf [maxDecodes + 1]source // decoded again, decoded, escaped
	sources := buf[:0]
	var again []string
	for dec, i := r.URL.Path, 1; i < maxDecodes && strings.ContainsRune(dec, '%'); i++ {
		next, err := url.PathUnescape(dec)
		if err != nil || next == dec {
			break
		}
		again, dec = append(again, next), next
	}
	for i := len(again) - 1; i >= 0; i-- {
		sources = append(sources, source{again[i], false})
	}
	if r.URL.RawPath != "" || strings.ContainsRune(r.URL.Path, ' ') {
		// RawPath is set exactly when the path was sent with escapes that
		// differ from the default encoding: %2F, %2E, %5C, an escaped letter.
		// A space is escaped in the default encoding: only the decoded
		// path shows it trailing a segment.
		sources = append(sources, source{r.URL.Path, false})
	}
	sources = append(sources, source{esc, true})
	var out []pathForm
	full := false
	add := func(path string, escaped bool) {
		if escaped && !strings.ContainsRune(path, '%') {
			escaped = false
		}
		for _, f := range out {
			if f.path == path && f.escaped == escaped {
				return
			}
		}
		if len(out) == maxPathForms {
			full = true
			return
		}
		out = append(out, pathForm{path: path, escaped: escaped})
	}
gen:
	for _, src := range sources {
		backslash := strings.ContainsRune(src.path, '\\') || src.escaped && containsFold(src.path, "%5c")
		params := strings.ContainsRune(src.path, ';')
		for _, bs := range []bool{true, false} {
			if bs && !backslash {
				continue
			}
			for _, st := range []bool{true, false} {
				if st && !params {
					continue
				}
				base := src.path
				if bs {
					base = strings.ReplaceAll(base, `\`, "/")
					if src.escaped {
						base = strings.ReplaceAll(strings.ReplaceAll(base, "%5C", "/"), "%5c", "/")
					}
				}
				if st {
					base = stripParams(base)
				}
				var tailBuf [4]string
				for _, tail := range tailForms(tailBuf[:0], CleanPath(base)) {
					cases := []string{tail}
					if lower := strings.ToLower(tail); lower != tail {
						cases = []string{lower, tail}
					}
					for _, c := range cases {
						trimmed, slashed := c, c
						if len(c) > 1 && strings.HasSuffix(c, "/") {
							trimmed = strings.TrimSuffix(c, "/")
						} else if c != "/" {
							slashed = c + "/"
						}
						add(trimmed, src.escaped)
						add(slashed, src.escaped)
						if full {
							break gen
						}
					}
				}
			}
		}
	}
	for i := range out {
		if out[i].path == rawPath && (out[i].escaped || !strings.ContainsRune(rawPath, '%')) {
			out[i].raw = true
		}
	}
	return out, full
}

// tailForms appends to dst the clean path p and its variants with the
// last segment's format extension removed (stripExtension) and with
// trailing dots and spaces stripped from every segment (trimSegmentTails),
// each alone and combined, most normalized first and p last, without
// duplicates. Rails runs /v1/orders.json as /v1/orders, IIS and Windows
// hosts /v1/orders. and /v1/orders%20 too.
func tailForms(dst []string, p string) []string {
	x := strings.TrimSuffix(p, "/")
	var cand [4]string
	n := 0
	if hasSegmentTail(x) {
		dots := trimSegmentTails(x)
		cand[0], cand[1], n = stripExtension(dots), dots, 2
	}
	cand[n], cand[n+1] = stripExtension(x), p
	for _, f := range cand[:n+2] {
		if f == "" {
			f = "/"
		}
		if !slices.Contains(dst, f) {
			dst = append(dst, f)
		}
	}
	return dst
}

// stripExtension removes a ".ext" format extension from the last segment
// of x (a clean path without trailing slash), as Rails' "(.:format)" does:
// from the segment's last dot, when the extension is not empty and the
// stem is not only dots. The result is a prefix of x, still clean.
func stripExtension(x string) string {
	seg := x[strings.LastIndexByte(x, '/')+1:]
	i := strings.LastIndexByte(seg, '.')
	if i <= 0 || i == len(seg)-1 || strings.Trim(seg[:i], ".") == "" {
		return x
	}
	return x[:len(x)-len(seg)+i]
}

// hasSegmentTail reports whether a segment of x ends in "." or " ".
func hasSegmentTail(x string) bool {
	for i := 0; i < len(x); i++ {
		if (x[i] == '.' || x[i] == ' ') && (i+1 == len(x) || x[i+1] == '/') {
			return true
		}
	}
	return false
}

// trimSegmentTails strips trailing dots and spaces from every segment of
// x, as Windows path normalization (IIS) does, dropping segments that
// become empty; the result is clean, without trailing slash.
func trimSegmentTails(x string) string {
	var b strings.Builder
	for _, seg := range strings.Split(x, "/") {
		if seg = strings.TrimRight(seg, ". "); seg != "" {
			b.WriteByte('/')
			b.WriteString(seg)
		}
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}

// stripParams removes ";params" from every segment of p, as Tomcat and
// Jetty do with ";jsessionid=…" before routing.
func stripParams(p string) string {
	var b strings.Builder
	for i, seg := range strings.Split(p, "/") {
		if i > 0 {
			b.WriteByte('/')
		}
		if j := strings.IndexByte(seg, ';'); j >= 0 {
			seg = seg[:j]
		}
		b.WriteString(seg)
	}
	return b.String()
}

// isCanonicalPath reports whether r's path needs no variant but its letter
// case, trailing slash, extension and trailing dots, which mayVary covers:
// sent in the default encoding (no RawPath), clean, without backslashes,
// ";" parameters or "%" (a decoded "%" was sent as "%25", which a hop that
// decodes again reads as an escape).
func isCanonicalPath(u *url.URL) bool {
	if u.RawPath != "" {
		return false
	}
	p := u.Path
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '\\' || c == ';' || c == '%':
			return false
		}
	}
	return isClean(p)
}

// isClean reports whether CleanPath(p) == p, without allocating: rooted,
// no empty, "." or ".." segment except a trailing empty one.
func isClean(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	start := 1 // of the current segment
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		switch p[start:i] {
		case ".", "..":
			return false
		case "":
			if i < len(p) {
				return false // "//"
			}
		}
		start = i + 1
	}
	return true
}
