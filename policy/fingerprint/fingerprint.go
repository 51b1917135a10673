package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gowebpki/jcs"
)

// Prefix starts every fingerprint of the hs1 format. The format
// (docs/protocol.md, "Request fingerprint (hs1)") is frozen: a change to it
// is a new prefix (hs2:), never an edit, because stored records compare
// fingerprints across versions of idemgate.
const Prefix = "hs1:"

// Record tags of the hs1 encoding; each record is tag (1 byte) + length
// (8 bytes, big-endian) + that many bytes.
const (
	tagScheme       = 'S' // "hs1", first record: domain separation from later formats
	tagMethod       = 'M' // request method as sent
	tagPath         = 'P' // escaped path as sent
	tagQuery        = 'Q' // raw query as sent (query: true), possibly empty
	tagQueryAbsent  = 'q' // query: false, zero length
	tagHeaderName   = 'H' // configured header name, lowercase; its values follow
	tagHeaderValue  = 'V' // one field line value of the preceding header
	tagBodyRaw      = 'B' // body bytes (body: raw)
	tagBodyJSON     = 'J' // RFC 8785 canonical JSON (body: json)
	tagBodyFallback = 'F' // body bytes under body: json when not canonicalizable
	tagBodyIgnored  = 'I' // body: ignore, zero length
)

// Header is one configured header of a Input.
type Header struct {
	// Name is the field name; its ASCII letters are lowercased in the
	// encoding.
	Name string
	// Values are the field line values in the order received; none means
	// the header is absent, which differs from one empty value.
	Values []string
}

// Input is everything that enters an hs1 fingerprint, explicitly,
// so that vectors and fuzzing need no *http.Request.
type Input struct {
	// Method is the request method as sent (case-sensitive).
	Method string
	// Path is the escaped path as sent (url.URL.EscapedPath).
	Path string
	// IncludeQuery says whether the query enters (fingerprint.query); when
	// false Query is ignored and the encoding says "absent", which differs
	// from an included empty query.
	IncludeQuery bool
	// Query is the raw query as sent (url.URL.RawQuery), without "?".
	Query string
	// Headers are the configured headers; Fingerprint lowercases the names'
	// ASCII letters and orders them by name bytewise (stable), as
	// Spec does.
	Headers []Header
	// BodyMode says how Body enters: raw, json or ignore; any other value
	// counts as raw.
	BodyMode BodyMode
	// Body is the complete request body in bytes.
	Body []byte
	// Exclude lists RFC 6901 JSON pointers whose object members are removed
	// from a JSON body before it is canonicalized (fingerprint.exclude);
	// Fingerprint sorts them and drops duplicates. It only applies with
	// BodyMode json, and then adds records that no input without exclusions
	// has (docs/protocol.md, "Exclusions"); otherwise it is ignored.
	// With BodyMode protobuf the pointers name fields (one field name per
	// segment) cleared before the message is encoded again.
	Exclude []string
	// Proto are the descriptors a BodyMode protobuf body is decoded with
	// (the method is the one Path names); nil enters the body as bytes.
	Proto *ProtoSchema
}

// Fingerprint returns the hs1 fingerprint of in: "hs1:" + 64 lowercase hex
// digits of SHA-256 over Encoding(in).
func Of(in Input) string {
	f := hashers.Get().(*hasher)
	f.h.Reset()
	f.e = fpEncoder{w: f.h, buf: f.buf[:0]}
	encodeInto(&f.e, in)
	f.e.flush()
	out := finish(f)
	f.buf = f.e.buf[:0]
	f.e = fpEncoder{}
	hashers.Put(f)
	return out
}

// hasher is what one fingerprint needs besides its input: the SHA-256
// state, the encoder's buffer and the digest's bytes. Kept in hashers,
// they cost a fingerprint no allocation of their own (each is handed
// through an interface, so it would escape), which leaves the string.
type hasher struct {
	h   hash.Hash
	e   fpEncoder
	buf []byte
	sum [sha256.Size]byte
}

// hashers holds hashers between fingerprints.
var hashers = sync.Pool{New: func() any {
	return &hasher{h: sha256.New(), buf: make([]byte, 0, 256)}
}}

// Encoding returns the exact bytes that Fingerprint hashes; the
// layout is in docs/protocol.md. Distinct inputs (after lowercasing and
// ordering header names, and canonicalizing a JSON body) never share an
// encoding.
func Encoding(in Input) []byte {
	var b bytes.Buffer
	encodeFingerprint(&b, in)
	return b.Bytes()
}

// SentURLKey is the context key of the URL a request was sent with, a
// *url.URL, when a handler in front of the engine in process rewrote it:
// Caddy's handle_path or rewrite, Go's http.StripPrefix. Of takes the
// path and query from it, so that two endpoints whose handlers see one
// path after their prefixes are stripped (/a/orders and /b/orders, both
// /orders) are two requests, as they are to the standalone proxy, which
// sees what the client sent: before, the second endpoint was answered the
// first one's stored response (TestStrippedPrefixesNeverShareAnswers,
// TestCaddyHandlePathBlocksNeverShareRecords). Routes still match the
// path the handler sees.
type SentURLKey struct{}

// sentURL is the URL req was sent with (SentURLKey), or req.URL.
func sentURL(req *http.Request) *url.URL {
	if u, _ := req.Context().Value(SentURLKey{}).(*url.URL); u != nil {
		return u
	}
	return req.URL
}

// Of returns the hs1 fingerprint of req with the given body bytes under s;
// the byte layout is frozen in docs/protocol.md. The proxy calls it with a
// record's recorded recipe (ParseRecipe) to compare a retry the way its
// first request was fingerprinted.
func (s Spec) Of(req *http.Request, body []byte) string {
	in := Input{
		Method:       req.Method,
		IncludeQuery: s.Query,
		BodyMode:     s.Body,
		Body:         body,
		Exclude:      s.Exclude,
		Proto:        s.Proto,
	}
	if u := sentURL(req); u != nil {
		in.Path = u.EscapedPath()
		in.Query = u.RawQuery
	}
	if len(s.Headers) > 0 {
		in.Headers = make([]Header, len(s.Headers))
		for i, name := range s.Headers {
			in.Headers[i] = Header{Name: name, Values: req.Header.Values(name)}
			if s.NormalizeMediaTypes && name == "content-type" {
				// The input changes, not the hs1 encoding: the recipe
				// (m=normalize) says which input a record was taken from.
				vals := make([]string, len(in.Headers[i].Values))
				for j, v := range in.Headers[i].Values {
					vals[j] = NormalizeMediaType(v)
				}
				in.Headers[i].Values = vals
			}
			if name == "host" && req.Host != "" {
				// net/http moves the Host field out of Header; without this
				// it would read as absent and every host share a fingerprint.
				in.Headers[i].Values = []string{req.Host}
			}
		}
	}
	return Of(in)
}

func finish(f *hasher) string {
	// One allocation, the string: prefix and digits built in place.
	var out [len(Prefix) + 2*sha256.Size]byte
	copy(out[:], Prefix)
	hex.Encode(out[len(Prefix):], f.h.Sum(f.sum[:0]))
	return string(out[:])
}

// fpInlineMax is the longest field fpEncoder copies into its buffer; a
// longer one (a body) is written to the hash as it is.
const fpInlineMax = 512

// fpEncoder writes the records of an hs1 encoding: the short ones (tags,
// lengths, method, path, header fields) collect in one buffer, so that
// they cost neither an allocation each (a record's header and a string's
// bytes passed to an io.Writer escape) nor a hash call each. The bytes
// written, and so the fingerprint, are those of one record after the
// other, whatever the split.
type fpEncoder struct {
	w   io.Writer
	buf []byte
}

func (e *fpEncoder) head(tag byte, n int) {
	e.buf = append(e.buf, tag)
	e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(n))
}

func (e *fpEncoder) put(tag byte, s []byte) {
	e.head(tag, len(s))
	if len(s) <= fpInlineMax {
		e.buf = append(e.buf, s...)
		return
	}
	e.flush()
	e.w.Write(s)
}

func (e *fpEncoder) putString(tag byte, s string) {
	e.head(tag, len(s))
	if len(s) <= fpInlineMax {
		e.buf = append(e.buf, s...)
		return
	}
	e.flush()
	io.WriteString(e.w, s)
}

func (e *fpEncoder) flush() {
	if len(e.buf) > 0 {
		e.w.Write(e.buf)
		e.buf = e.buf[:0]
	}
}

func encodeFingerprint(w io.Writer, in Input) {
	e := &fpEncoder{w: w, buf: make([]byte, 0, 256)}
	defer e.flush()
	encodeInto(e, in)
}

// encodeInto writes the records of in's encoding to e, leaving the last
// of them in e's buffer for the caller's flush.
func encodeInto(e *fpEncoder, in Input) {
	put, putString := e.put, e.putString

	putString(tagScheme, "hs1")
	putString(tagMethod, in.Method)
	putString(tagPath, in.Path)
	if in.IncludeQuery {
		putString(tagQuery, in.Query)
	} else {
		put(tagQueryAbsent, nil)
	}
	headers := in.Headers
	if !sortedLower(headers) {
		headers = slices.Clone(headers)
		for i := range headers {
			headers[i].Name = asciiLower(headers[i].Name)
		}
		slices.SortStableFunc(headers, func(a, b Header) int { return strings.Compare(a.Name, b.Name) })
	}
	for _, h := range headers {
		putString(tagHeaderName, h.Name)
		for _, v := range h.Values {
			putString(tagHeaderValue, v)
		}
	}
	switch in.BodyMode {
	case BodyIgnore:
		put(tagBodyIgnored, nil)
	case BodyProtobuf:
		for _, x := range sortedExclude(in.Exclude) {
			put(tagExclude, []byte(x))
		}
		put(protoBody(in))
	case BodyJSON:
		if len(in.Exclude) > 0 {
			encodeExcluded(put, in)
			return
		}
		if c, ok := canonicalJSON(in.Body); ok {
			put(tagBodyJSON, c)
		} else {
			put(tagBodyFallback, in.Body)
		}
	default:
		put(tagBodyRaw, in.Body)
	}
}

// encodeExcluded writes the body records of a json-mode input with
// exclusions: one X record per pointer (sorted, without duplicates), then
// E with the canonical form of the body less the excluded members, or F
// with the body bytes when the body is not canonicalizable. The X records
// keep every such encoding apart from any encoding without exclusions, and
// from one with other exclusions.
func encodeExcluded(put func(byte, []byte), in Input) {
	ptrs := in.Exclude
	if !slices.IsSorted(ptrs) || len(slices.Compact(slices.Clone(ptrs))) != len(ptrs) {
		ptrs = slices.Compact(slices.Sorted(slices.Values(ptrs)))
	}
	for _, p := range ptrs {
		put(tagExclude, []byte(p))
	}
	c, ok := canonicalJSON(in.Body)
	if !ok {
		put(tagBodyFallback, in.Body)
		return
	}
	put(tagBodyExcluded, excludeMembers(c, parsePointers(ptrs)))
}

// asciiLower lowercases A-Z only: field names are ASCII tokens, and bytes
// outside ASCII must pass through unchanged so that the encoding stays
// injective (strings.ToLower would turn invalid UTF-8 into U+FFFD).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func sortedLower(hs []Header) bool {
	for i, h := range hs {
		for j := 0; j < len(h.Name); j++ {
			if 'A' <= h.Name[j] && h.Name[j] <= 'Z' {
				return false
			}
		}
		if i > 0 && hs[i-1].Name > h.Name {
			return false
		}
	}
	return true
}

// canonicalJSON returns the RFC 8785 form of body, or false when body is not
// JSON or holds a number that an IEEE 754 double cannot carry without
// merging it with a different number (RFC 8785 section 3.2.2.3 serializes
// numbers as doubles, so 9007199254740993 would become 9007199254740992 and
// two different requests would share a fingerprint).
func canonicalJSON(body []byte) ([]byte, bool) {
	if len(body) == 0 {
		return nil, false
	}
	c, err := jcs.Transform(body)
	if err != nil {
		return nil, false
	}
	if !numbersExact(body) {
		return nil, false
	}
	return c, true
}

// numbersExact reports whether every number literal of the valid JSON text
// body denotes the same decimal value as the shortest form of the double it
// parses to; only then can two literals share a canonical form solely by
// being numerically equal.
func numbersExact(body []byte) bool {
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == '"':
			for i++; i < len(body) && body[i] != '"'; i++ {
				if body[i] == '\\' {
					i++
				}
			}
		case c == '-' || ('0' <= c && c <= '9'):
			j := i
			for j < len(body) && strings.IndexByte("+-.eE0123456789", body[j]) >= 0 {
				j++
			}
			if !numberExact(string(body[i:j])) {
				return false
			}
			i = j - 1
		}
	}
	return true
}

// Bounds that keep numberExact cheap: a double has at most 17 significant
// digits and exponents within about ±324, so a literal beyond these cannot
// be exact anyway, and big arithmetic on it could be made slow.
const (
	maxExactDigits   = 40
	maxExactExponent = 400
)

func numberExact(lit string) bool {
	mant, exp, hasExp := strings.Cut(strings.ToLower(lit), "e")
	mant = strings.TrimPrefix(mant, "-")
	intPart, frac, _ := strings.Cut(mant, ".")
	frac = strings.TrimRight(frac, "0")
	digits := strings.TrimLeft(intPart+frac, "0")
	if !hasExp && len(digits) <= 15 {
		// Any decimal of at most 15 significant digits survives a round trip
		// through a double (DBL_DIG).
		return true
	}
	if len(digits) > maxExactDigits {
		return false
	}
	if hasExp {
		e, err := strconv.Atoi(exp)
		if err != nil || e > maxExactExponent || e < -maxExactExponent {
			return false
		}
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return false
	}
	want, ok := new(big.Rat).SetString(lit)
	if !ok {
		return false
	}
	got, ok := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	return ok && want.Cmp(got) == 0
}
