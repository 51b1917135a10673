package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"

	"github.com/idemgate/idemgate/store"
)

// A stored response keeps the content coding the upstream chose for the
// first request, but a retry may come from another client: a first request
// from a browser stored with Content-Encoding: br is useless to a retry
// from curl or a job runner that never asked for br. Replays (and the first
// answer, which goes through the same writer) are therefore decoded when
// the request does not accept the stored coding, as Varnish does for a
// client without gzip and nginx's gunzip module does: Content-Encoding is
// dropped, Content-Length is the decoded length, a strong ETag is weakened
// (the decoded bytes are another representation, RFC 9110 section 8.8.1),
// and Vary stays as the upstream sent it. Accept-Encoding never enters the
// fingerprint: two clients with different codecs sending the same request
// are the same operation.

// errUnknownCoding marks a content coding idemgate cannot decode; the
// response is then written as stored.
var errUnknownCoding = errors.New("content coding idemgate cannot decode")

// errDecodedTooLarge marks a decoded body larger than the route's
// max_response_bytes: decoding it would let a small stored body (a
// compression bomb) cost unbounded memory.
var errDecodedTooLarge = errors.New("decoded body exceeds max_response_bytes")

// acceptEncoding is a parsed Accept-Encoding field (RFC 9110 section
// 12.5.3): the qvalue of each coding named, of "*", and of identity.
type acceptEncoding struct {
	// present is false when the request has no Accept-Encoding field.
	present bool
	// q maps a lowercased coding to its qvalue in thousandths.
	q map[string]int
}

// parseAcceptEncoding parses the field lines of Accept-Encoding. A member
// whose weight is not a valid qvalue counts as q=0: when in doubt the
// response is decoded, which every client can read.
func parseAcceptEncoding(values []string) acceptEncoding {
	a := acceptEncoding{present: len(values) > 0, q: map[string]int{}}
	for _, v := range values {
		for _, member := range strings.Split(v, ",") {
			coding, params, _ := strings.Cut(member, ";")
			coding = strings.ToLower(textproto.TrimString(coding))
			if coding == "" {
				continue
			}
			q := 1000
			for _, p := range strings.Split(params, ";") {
				name, value, ok := strings.Cut(p, "=")
				if !ok || !strings.EqualFold(textproto.TrimString(name), "q") {
					continue
				}
				q = parseQValue(textproto.TrimString(value))
			}
			if old, seen := a.q[coding]; !seen || q < old {
				// A coding listed twice counts with its lower weight.
				a.q[coding] = q
			}
		}
	}
	return a
}

// parseQValue parses a qvalue, "0" ["." 0*3DIGIT] / "1" ["." 0*3("0")]
// (RFC 9110 section 12.4.2), into thousandths; anything else is 0.
func parseQValue(s string) int {
	whole, frac, hasFrac := strings.Cut(s, ".")
	if (whole != "0" && whole != "1") || len(frac) > 3 || (hasFrac && strings.Trim(frac, "0123456789") != "") {
		return 0
	}
	frac += strings.Repeat("0", 3-len(frac))
	n, _ := strconv.Atoi(frac)
	if whole == "1" {
		if n != 0 {
			return 0
		}
		return 1000
	}
	return n
}

// accepts reports whether coding (lowercased, not identity) is acceptable.
// A request without the field is taken to accept identity only: RFC 9110
// lets a server send any coding then, but curl and most HTTP libraries send
// no Accept-Encoding exactly when they cannot decode, which is what Varnish
// and nginx's gunzip assume too.
func (a acceptEncoding) accepts(coding string) bool {
	if !a.present {
		return false
	}
	if q, ok := a.q[coding]; ok {
		return q > 0
	}
	if coding == "gzip" || coding == "x-gzip" {
		// RFC 9110 section 8.4.1.3: x-gzip is gzip.
		for _, alias := range []string{"gzip", "x-gzip"} {
			if q, ok := a.q[alias]; ok {
				return q > 0
			}
		}
	}
	q, ok := a.q["*"]
	return ok && q > 0
}

// acceptsIdentity reports whether the identity (unencoded) form is
// acceptable: always, unless excluded by identity;q=0 or by *;q=0 without
// identity listed (RFC 9110 section 12.5.3).
func (a acceptEncoding) acceptsIdentity() bool {
	if q, ok := a.q["identity"]; ok {
		return q > 0
	}
	if q, ok := a.q["*"]; ok {
		return q > 0
	}
	return true
}

// contentCodings returns the codings of h's Content-Encoding in the order
// they were applied, lowercased, without identity.
func contentCodings(h http.Header) []string {
	var out []string
	for key, values := range h {
		// Compared in any case without canonicalizing each key: this runs
		// on every replay, for every field of the record (2 % of a replay's
		// CPU in process).
		if !foldEqual(key, "Content-Encoding") {
			continue
		}
		for _, v := range values {
			for _, c := range strings.Split(v, ",") {
				if c = strings.ToLower(textproto.TrimString(c)); c != "" && c != "identity" {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// fitCoding returns resp as r can read it: resp itself when r accepts its
// content codings (or it has none, or nothing can be done), else a copy
// decoded to identity. limit bounds the decoded body. The error says why a
// response that r does not accept is written as stored anyway
// (errUnknownCoding, errDecodedTooLarge, or a corrupt body).
func fitCoding(r *http.Request, resp *store.Response, limit int64) (*store.Response, error) {
	codings := contentCodings(resp.Header)
	if len(codings) == 0 {
		return resp, nil
	}
	accept := parseAcceptEncoding(r.Header.Values("Accept-Encoding"))
	acceptable := true
	for _, c := range codings {
		if !accept.accepts(c) {
			acceptable = false
			break
		}
	}
	if acceptable || !accept.acceptsIdentity() {
		// Decoding cannot help a client that refuses identity too; the
		// stored form is the one the upstream chose.
		return resp, nil
	}
	body := resp.Body
	for i := len(codings) - 1; i >= 0; i-- {
		var err error
		if body, err = decodeBody(codings[i], body, limit); err != nil {
			return resp, err
		}
	}
	out := *resp
	out.Body = body
	out.Header = make(http.Header, len(resp.Header))
	for name, values := range resp.Header {
		switch textproto.CanonicalMIMEHeaderKey(name) {
		case "Content-Encoding":
			// Dropped: the body is now the identity form.
		case "Content-Digest", "Repr-Digest", "Digest", "Content-Md5":
			// Computed over the encoded bytes (RFC 9530 sections 2 and 3:
			// content codings are part of the representation), so wrong
			// for the decoded ones.
		case "Etag":
			out.Header[name] = weakETags(values)
		default:
			out.Header[name] = values
		}
	}
	if len(resp.Trailer) > 0 {
		out.Trailer = make(http.Header, len(resp.Trailer))
		for name, values := range resp.Trailer {
			if k := textproto.CanonicalMIMEHeaderKey(name); k != "Content-Digest" && k != "Repr-Digest" {
				out.Trailer[name] = values
			}
		}
	}
	return &out, nil
}

// weakETags returns values with each strong entity tag made weak: the
// decoded body is not byte for byte the representation the tag names
// (RFC 9110 section 8.8.1), as nginx's gunzip does.
func weakETags(values []string) []string {
	out := make([]string, len(values))
	for i, v := range values {
		if t := strings.TrimSpace(v); strings.HasPrefix(t, `"`) {
			v = "W/" + t
		}
		out[i] = v
	}
	return out
}

// decodeBody removes one content coding from body, reading at most limit
// decoded bytes.
func decodeBody(coding string, body []byte, limit int64) ([]byte, error) {
	var (
		rd  io.Reader
		err error
	)
	src := bytes.NewReader(body)
	switch coding {
	case "gzip", "x-gzip":
		var z *gzip.Reader
		if z, err = gzip.NewReader(src); err == nil {
			defer z.Close()
			rd = z
		}
	case "deflate":
		// RFC 9110 section 8.4.1.2: deflate is the zlib format; some
		// servers send raw DEFLATE anyway, which is tried when the zlib
		// header is missing.
		var z io.ReadCloser
		if z, err = zlib.NewReader(src); err == nil {
			defer z.Close()
			rd = z
		} else {
			f := flate.NewReader(bytes.NewReader(body))
			defer f.Close()
			rd, err = f, nil
		}
	case "br":
		rd = brotli.NewReader(src)
	case "zstd":
		// RFC 8878 section 7.2: a window of at most 8 MiB for HTTP.
		var z *zstd.Decoder
		if z, err = zstd.NewReader(src, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(8<<20)); err == nil {
			defer z.Close()
			rd = z
		}
	default:
		return nil, fmt.Errorf("%w: %q", errUnknownCoding, coding)
	}
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", coding, err)
	}
	out, err := readLimited(rd, -1, limit)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", coding, err)
	}
	if int64(len(out)) > limit {
		return nil, fmt.Errorf("%w (%d bytes)", errDecodedTooLarge, limit)
	}
	return out, nil
}
