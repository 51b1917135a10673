package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Record tags that only a fingerprint with exclusions
// (fingerprint.exclude) writes; docs/protocol.md, "Exclusions". No input
// without exclusions produces them, so every fingerprint written before
// they existed keeps its encoding, and an input with exclusions can never
// share an encoding with one without: its encoding holds at least one X
// record where any other has its body record.
const (
	tagExclude      = 'X' // one excluded JSON pointer, as configured; sorted, before the body
	tagBodyExcluded = 'E' // RFC 8785 canonical JSON with the excluded members removed
)

// ErrPointerInvalid is wrapped by ParsePointer for a string that is not an
// RFC 6901 JSON pointer usable by idemgate.
var ErrPointerInvalid = errors.New("invalid JSON pointer")

// ParsePointer splits an RFC 6901 JSON pointer into its reference tokens,
// unescaped (~1 is "/", ~0 is "~"). It refuses the empty pointer (the
// whole document, which excluding or reading as a key makes no sense), a
// pointer that does not start with "/", a "~" not followed by 0 or 1, and
// invalid UTF-8 (a JSON member name is always valid UTF-8, so such a
// pointer could never match).
func ParsePointer(p string) ([]string, error) {
	switch {
	case p == "":
		return nil, fmt.Errorf("%w: the empty pointer names the whole body", ErrPointerInvalid)
	case p[0] != '/':
		return nil, fmt.Errorf("%w: %q must start with \"/\", e.g. /client_ts", ErrPointerInvalid, p)
	case !utf8.ValidString(p):
		return nil, fmt.Errorf("%w: %q is not valid UTF-8", ErrPointerInvalid, p)
	}
	tokens := strings.Split(p[1:], "/")
	for i, tok := range tokens {
		for j := 0; j < len(tok); j++ {
			if tok[j] == '~' && (j+1 == len(tok) || (tok[j+1] != '0' && tok[j+1] != '1')) {
				return nil, fmt.Errorf("%w: %q: \"~\" must be followed by 0 or 1 (RFC 6901: ~0 is \"~\", ~1 is \"/\")", ErrPointerInvalid, p)
			}
		}
		// Order matters (RFC 6901 section 4): ~01 is "~1", not "/".
		tokens[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
	}
	return tokens, nil
}

// arrayIndex returns the index an RFC 6901 reference token names in an
// array: "0" or digits without a leading zero; "-" and anything else name
// no element.
func arrayIndex(tok string) (int, bool) {
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

// excludeMembers returns the canonical JSON text canon (the output of
// canonicalJSON) without the object members that the pointers name. A
// pointer is followed through objects by member name and through arrays by
// index; it removes the member it ends at, and nothing when it ends at an
// array element (removing one would renumber its siblings) or names
// nothing. Everything else is copied byte for byte, so the result is still
// RFC 8785 canonical.
func excludeMembers(canon []byte, pointers [][]string) []byte {
	out := make([]byte, 0, len(canon))
	_, out = copyValue(canon, 0, pointers, out)
	return out
}

// copyValue appends the value that starts at b[i] to out, without the
// members that ptrs (tokens relative to this value) remove, and returns the
// index after the value.
func copyValue(b []byte, i int, ptrs [][]string, out []byte) (int, []byte) {
	if len(ptrs) == 0 || (b[i] != '{' && b[i] != '[') {
		end := skipValue(b, i)
		return end, append(out, b[i:end]...)
	}
	if b[i] == '[' {
		out = append(out, '[')
		i++
		for n := 0; b[i] != ']'; n++ {
			if n > 0 {
				out = append(out, ',')
				i++ // the comma
			}
			var sub [][]string
			for _, p := range ptrs {
				if k, ok := arrayIndex(p[0]); ok && k == n && len(p) > 1 {
					sub = append(sub, p[1:])
				}
			}
			i, out = copyValue(b, i, sub, out)
		}
		return i + 1, append(out, ']')
	}
	out = append(out, '{')
	i++
	first := true
	for b[i] != '}' {
		if b[i] == ',' {
			i++
		}
		nameEnd := skipValue(b, i)
		var name string
		_ = json.Unmarshal(b[i:nameEnd], &name) // canonical, hence valid, JSON string
		valStart := nameEnd + 1                 // the colon
		removed := false
		var sub [][]string
		for _, p := range ptrs {
			if p[0] != name {
				continue
			}
			if len(p) == 1 {
				removed = true
			} else {
				sub = append(sub, p[1:])
			}
		}
		if removed {
			i = skipValue(b, valStart)
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, b[i:valStart]...)
		i, out = copyValue(b, valStart, sub, out)
	}
	return i + 1, append(out, '}')
}

// skipValue returns the index after the JSON value (or member name) that
// starts at b[i] in valid JSON text without insignificant whitespace.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		for i++; b[i] != '"'; i++ {
			if b[i] == '\\' {
				i++
			}
		}
		return i + 1
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = skipValue(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
		i++
	}
	return i
}

// normalizeExclude validates fingerprint.exclude and returns it sorted and
// without duplicates, as the recipe records it.
func normalizeExclude(ptrs []string) ([]string, []error) {
	var errs []error
	var out []string
	for _, p := range ptrs {
		if _, err := ParsePointer(p); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return slices.Compact(out), errs
}

// parsePointers parses already validated pointers.
func parsePointers(ptrs []string) [][]string {
	out := make([][]string, 0, len(ptrs))
	for _, p := range ptrs {
		if toks, err := ParsePointer(p); err == nil {
			out = append(out, toks)
		}
	}
	return out
}
