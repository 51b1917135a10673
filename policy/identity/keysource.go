package identity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/idemgate/idemgate/internal/jsonpointer"
)

// KeyFrom names where a route's idempotency key comes from.
type KeyFrom string

// Key sources of the `key:` setting.
const (
	// KeyFromHeader reads the key from a request header (Route.Header):
	// Idempotency-Key by default, or a provider's own field such as
	// X-GitHub-Delivery.
	KeyFromHeader KeyFrom = "header"
	// KeyFromBody reads the key from a member of a JSON request body
	// (KeySource.Pointer), e.g. a webhook event's "/id". The body is then
	// read, within max_request_bytes, before the key.
	KeyFromBody KeyFrom = "body"
)

// KeySource is a parsed `key:` setting. With KeyFromHeader the field is the
// route's Header, so `key: {from: header, name: X}` and `header: X` say the
// same thing.
type KeySource struct {
	// From is KeyFromHeader (the default) or KeyFromBody.
	From KeyFrom
	// Pointer is the RFC 6901 JSON pointer to the key in the body, for
	// KeyFromBody only.
	Pointer string
}

// FromBody reports whether the key is read from the request body, which
// must then be read before the key.
func (k KeySource) FromBody() bool { return k.From == KeyFromBody }

// BodyKey returns the idempotency key at pointer in the JSON text body. The
// value must be a string of 1..255 printable ASCII characters (0x20-0x7E),
// not all spaces, as the content of a quoted Idempotency-Key, or an integer
// (its decimal literal as sent, so 42 and "42" are the same key). It
// returns ErrKeyMissing for an empty body or a member that is absent or
// null, and an error wrapping ErrKeyInvalid for a body that is not JSON
// and for any other value.
func BodyKey(body []byte, pointer string) (string, error) {
	tokens, err := jsonpointer.Parse(pointer)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrKeyInvalid, err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return "", ErrKeyMissing
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("%w: the body is not JSON, so the key at %s cannot be read", ErrKeyInvalid, pointer)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("%w: the body holds more than one JSON value", ErrKeyInvalid)
	}
	for _, tok := range tokens {
		switch node := v.(type) {
		case map[string]any:
			v = node[tok]
		case []any:
			i, ok := jsonpointer.Index(tok)
			if !ok || i >= len(node) {
				return "", ErrKeyMissing
			}
			v = node[i]
		default:
			return "", ErrKeyMissing
		}
	}
	switch key := v.(type) {
	case nil:
		return "", ErrKeyMissing
	case string:
		for i := 0; i < len(key); i++ {
			if c := key[i]; c < 0x20 || c > 0x7e {
				return "", fmt.Errorf("%w: the key at %s contains a character outside printable ASCII at offset %d", ErrKeyInvalid, pointer, i)
			}
		}
		return checkQuotedKey(key)
	case json.Number:
		lit := string(key)
		digits := strings.TrimPrefix(lit, "-")
		if digits == "" || strings.Trim(digits, "0123456789") != "" || (len(digits) > 1 && digits[0] == '0') {
			return "", fmt.Errorf("%w: the key at %s is the number %s; only strings and integers are keys", ErrKeyInvalid, pointer, lit)
		}
		if len(lit) > MaxKeyLength {
			return "", fmt.Errorf("%w: longer than %d characters", ErrKeyInvalid, MaxKeyLength)
		}
		return lit, nil
	default:
		return "", fmt.Errorf("%w: the key at %s is a %s; only strings and integers are keys", ErrKeyInvalid, pointer, jsonKind(v))
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "value"
}
