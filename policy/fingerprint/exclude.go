package fingerprint

import (
	"encoding/json"
	"slices"

	"github.com/idemgate/idemgate/internal/jsonpointer"
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
				if k, ok := jsonpointer.Index(p[0]); ok && k == n && len(p) > 1 {
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

// NormalizeExclude validates fingerprint.exclude and returns it sorted and
// without duplicates, as the recipe records it.
func NormalizeExclude(ptrs []string) ([]string, []error) {
	var errs []error
	var out []string
	for _, p := range ptrs {
		if _, err := jsonpointer.Parse(p); err != nil {
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
		if toks, err := jsonpointer.Parse(p); err == nil {
			out = append(out, toks)
		}
	}
	return out
}
