package proxy

import (
	"bufio"
	"net/http"
	"net/textproto"
	"reflect"
	"strings"
	"testing"
)

// FuzzStoredHeader checks the header filter for replays on two kinds of
// input: a response header block as the upstream transport parses it (the
// real path), and a header map built directly, keys not canonical. For every
// input: no hop-by-hop field (RFC 9110 section 7.6.1), no field the
// Connection field names and no Content-Length survives, in any ASCII letter
// case (field names are tokens; other bytes compare as themselves);
// every surviving field keeps its values exactly, in order (each Set-Cookie
// line separate, never joined); the input is not changed; the output shares
// no slice with the input; and filtering again changes nothing.
func FuzzStoredHeader(f *testing.F) {
	f.Add("Content-Type: application/json\r\nSet-Cookie: a=1; Path=/\r\nSet-Cookie: b=2\r\nLocation: /x\r\n", "Connection", "close")
	f.Add("Connection: X-Secret, keep-alive\r\nX-Secret: s\r\nKeep-Alive: timeout=5\r\nETag: \"1\"\r\n", "x-secret", "v")
	f.Add("Transfer-Encoding: chunked\r\nTrailer: X-T\r\nContent-Length: 10\r\nUpgrade: h2c\r\nProxy-Authenticate: Basic\r\n", "content-length", "5")
	f.Add("Connection: ,,, set-cookie ,\r\nSet-Cookie: a=1\r\n", "connection", "Location")
	f.Add("Te: trailers\r\nProxy-Connection: keep-alive\r\nX-A: 1\r\nX-A: 2\r\n", "keep-alive", "1")
	f.Fuzz(func(t *testing.T, block, name, value string) {
		inputs := []http.Header{}
		if h, err := textproto.NewReader(bufio.NewReader(strings.NewReader(block + "\r\n"))).ReadMIMEHeader(); err == nil {
			inputs = append(inputs, http.Header(h))
		}
		// A map built by hand, as a custom Transport might return it.
		raw := http.Header{}
		for _, line := range strings.Split(block, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSuffix(line, "\r"), ":"); ok {
				raw[k] = append(raw[k], strings.TrimSpace(v))
			}
		}
		raw[name] = append(raw[name], value)
		inputs = append(inputs, raw)

		for _, in := range inputs {
			before := deepCopy(in)
			out := StoredHeader(in)
			if !reflect.DeepEqual(in, before) {
				t.Fatalf("StoredHeader changed its input:\n%v\nwas\n%v", in, before)
			}
			dropped := map[string]bool{"content-length": true, asciiLower(ReplayedHeader): true}
			for _, n := range hopHeaders {
				dropped[asciiLower(n)] = true
			}
			for k, vs := range in {
				if asciiLower(k) != "connection" {
					continue
				}
				for _, v := range vs {
					for _, n := range strings.Split(v, ",") {
						if n = textproto.TrimString(n); n != "" {
							dropped[asciiLower(n)] = true
						}
					}
				}
			}
			for k, vs := range out {
				if dropped[asciiLower(k)] {
					t.Fatalf("field %q survived the filter (in %v, out %v)", k, in, out)
				}
				if !reflect.DeepEqual(vs, in[k]) {
					t.Fatalf("field %q: values %q, want %q as received", k, vs, in[k])
				}
			}
			for k, vs := range in {
				if !dropped[asciiLower(k)] && !reflect.DeepEqual(out[k], vs) {
					t.Fatalf("end-to-end field %q lost: got %q, want %q", k, out[k], vs)
				}
			}
			if again := StoredHeader(out); !reflect.DeepEqual(again, out) {
				t.Fatalf("filtering twice changed the result:\n%v\n%v", again, out)
			}
			for k, vs := range out {
				for i := range vs {
					vs[i] = "mutated"
				}
				if len(in[k]) > 0 && in[k][0] == "mutated" && before[k][0] != "mutated" {
					t.Fatalf("output field %q shares its values with the input", k)
				}
			}
		}
	})
}

// asciiLower folds a field name's ASCII letters only: names are tokens, and
// any other byte (invalid UTF-8 included) stays itself, as
// textproto.CanonicalMIMEHeaderKey leaves a name with such a byte
// uncanonicalized and strings.ToLower would read it as U+FFFD.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func deepCopy(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, vs := range h {
		out[k] = append([]string(nil), vs...)
	}
	return out
}
