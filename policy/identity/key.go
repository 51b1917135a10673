package identity

import (
	"fmt"
	"strings"

	"github.com/dunglas/httpsfv"
)

// MaxKeyLength is the longest idempotency key accepted, in characters (one
// byte each, since keys are ASCII).
const MaxKeyLength = 255

// ParseKey extracts the idempotency key from the values of the key field
// (h.Values(name)). It accepts an RFC 8941 sf-string item, as
// draft-ietf-httpapi-idempotency-key-header section 2 defines, and a bare
// token. It returns ErrKeyMissing when there is no value, and an error
// wrapping ErrKeyInvalid for: an empty key, more than 255 characters, list
// syntax, parameters, non-printable or non-ASCII characters, or the field
// sent more than once.
//
// Leading and trailing OWS (space, tab) around the field value is trimmed
// first (RFC 9110 section 5.5). A value that starts with `"` must be exactly
// one sf-string (RFC 8941 section 3.3.3) without parameters; its key is the
// unescaped content: 1..255 characters of 0x20-0x7E, not all spaces. Any
// other value is a bare token, taken literally: 1..255 characters of
// 0x21-0x7E except `"`, `,` and `;` (so no whitespace, no list and no
// parameter syntax), e.g. `order_123` or `abc.def:ghi/jkl+==`. The error
// message says why a key is invalid; it is meant for a problem detail.
func ParseKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", ErrKeyMissing
	case 1:
	default:
		return "", fmt.Errorf("%w: the field was sent %d times; send it once with one key", ErrKeyInvalid, len(values))
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return "", fmt.Errorf("%w: the field value is empty", ErrKeyInvalid)
	}
	if v[0] == '"' {
		return parseQuotedKey(v)
	}
	return parseBareKey(v)
}

// maxQuotedLength bounds the raw sf-string before parsing: 255 characters,
// each possibly escaped, plus the quotes.
const maxQuotedLength = 2*MaxKeyLength + 2

func parseQuotedKey(v string) (string, error) {
	if err := checkASCII(v, true); err != nil {
		return "", err
	}
	if s, ok := simpleSFString(v); ok {
		return checkQuotedKey(s)
	}
	item, err := httpsfv.UnmarshalItem([]string{v})
	if err != nil {
		if l, lerr := httpsfv.UnmarshalList([]string{v}); lerr == nil && len(l) > 1 {
			return "", fmt.Errorf("%w: the field carries a list of %d members; send one key", ErrKeyInvalid, len(l))
		}
		if len(v) > maxQuotedLength {
			return "", fmt.Errorf("%w: longer than %d characters", ErrKeyInvalid, MaxKeyLength)
		}
		return "", fmt.Errorf("%w: not a single RFC 8941 sf-string: %v", ErrKeyInvalid, err)
	}
	s, ok := item.Value.(string)
	if !ok {
		return "", fmt.Errorf("%w: not an RFC 8941 sf-string", ErrKeyInvalid)
	}
	if item.Params != nil && len(item.Params.Names()) > 0 {
		return "", fmt.Errorf("%w: parameters (;name=value) are not allowed", ErrKeyInvalid)
	}
	return checkQuotedKey(s)
}

// simpleSFString returns the content of v when v is one sf-string without
// escapes, parameters or anything after it, the form nearly every client
// sends; such a value means what RFC 8941 section 4.2.5 parses it to,
// without the general parser's allocations.
func simpleSFString(v string) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	s := v[1 : len(v)-1]
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' || c < 0x20 || c > 0x7e {
			return "", false
		}
	}
	return s, true
}

func checkQuotedKey(s string) (string, error) {
	switch {
	case s == "":
		return "", fmt.Errorf("%w: the quoted key is empty", ErrKeyInvalid)
	case len(s) > MaxKeyLength:
		return "", fmt.Errorf("%w: longer than %d characters", ErrKeyInvalid, MaxKeyLength)
	case strings.Trim(s, " ") == "":
		return "", fmt.Errorf("%w: the quoted key is only spaces", ErrKeyInvalid)
	}
	return s, nil
}

func parseBareKey(v string) (string, error) {
	if err := checkASCII(v, false); err != nil {
		return "", err
	}
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case ',':
			return "", fmt.Errorf("%w: contains a comma (list syntax); send one key", ErrKeyInvalid)
		case ';':
			return "", fmt.Errorf("%w: contains a semicolon (parameters are not allowed)", ErrKeyInvalid)
		case '"':
			return "", fmt.Errorf("%w: contains a double quote outside an sf-string", ErrKeyInvalid)
		case ' ', '\t':
			return "", fmt.Errorf("%w: contains whitespace; quote the key as an sf-string", ErrKeyInvalid)
		}
	}
	if len(v) > MaxKeyLength {
		return "", fmt.Errorf("%w: longer than %d characters", ErrKeyInvalid, MaxKeyLength)
	}
	return v, nil
}

// checkASCII rejects control and non-ASCII bytes up front so that the
// message says so rather than reporting a parser offset.
func checkASCII(v string, quoted bool) error {
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= 0x80:
			return fmt.Errorf("%w: contains a non-ASCII byte at offset %d", ErrKeyInvalid, i)
		case c == '\t' && !quoted:
			// Reported as whitespace by the caller.
		case c < 0x20 || c == 0x7f:
			return fmt.Errorf("%w: contains a control character at offset %d", ErrKeyInvalid, i)
		}
	}
	return nil
}
