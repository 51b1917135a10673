package proxy

import (
	"net/http"
	"net/netip"
	"testing"
)

// TestRealIP: behind trusted proxies the client is the rightmost address of
// the X-Forwarded-For chain (all its lines, then the peer) that is not
// trusted, as nginx's realip module with real_ip_recursive finds it.
func TestRealIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	peer := netip.MustParseAddr("10.0.0.1")
	for _, c := range []struct {
		chain []string
		want  string
	}{
		{nil, "10.0.0.1"},
		{[]string{"203.0.113.7"}, "203.0.113.7"},
		{[]string{"6.6.6.6, 203.0.113.7, 10.0.0.9"}, "203.0.113.7"}, // the spoofed 6.6.6.6 is never reached
		{[]string{"6.6.6.6", "203.0.113.7", "10.0.0.9"}, "203.0.113.7"},
		{[]string{"10.1.1.1, 10.0.0.9"}, "10.1.1.1"},       // all trusted: the leftmost
		{[]string{"garbage, 10.0.0.9"}, "10.0.0.9"},        // not an address: the last one read
		{[]string{"203.0.113.7:4711"}, "203.0.113.7"},      // with a port
		{[]string{"[2001:db8::1]:80, ::1"}, "2001:db8::1"}, // IPv6, bracketed with a port
		{[]string{"::ffff:203.0.113.7"}, "203.0.113.7"},    // IPv4-mapped, unmapped
		{[]string{"2001:db8::2,203.0.113.8 , 10.0.0.2"}, "203.0.113.8"},
	} {
		if got := realIP(c.chain, peer, "10.0.0.1:5555", trusted); got != c.want {
			t.Errorf("realIP(%q) = %s, want %s", c.chain, got, c.want)
		}
	}
}

// TestQuoteForwarded: a token stays as is; anything else becomes an RFC
// 9110 quoted-string with only backslash and double quote escaped.
func TestQuoteForwarded(t *testing.T) {
	for in, want := range map[string]string{
		"example.com":    "example.com",
		"127.0.0.1:8080": `"127.0.0.1:8080"`,
		"[::1]:80":       `"[::1]:80"`,
		`a"b\c d`:        `"a\"b\\c d"`,
		"":               "",
	} {
		if got := quoteForwarded(in); got != want {
			t.Errorf("quoteForwarded(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestRemoveFieldsWhateverTheCase: hop-by-hop fields, the fields the
// Connection field names (any case, lists and repeats) and extra go; every
// other field stays.
func TestRemoveFieldsWhateverTheCase(t *testing.T) {
	h := http.Header{
		"connection":        {"X-Secret, keep-alive", "x-other"},
		"Keep-Alive":        {"timeout=5"},
		"x-secret":          {"1"},
		"X-Other":           {"2"},
		"transfer-encoding": {"chunked"},
		"content-length":    {"9"},
		"X-Kept":            {"3"},
		"Content-Type":      {"text/plain"},
	}
	removeFields(h, "Content-Length")
	if len(h) != 2 || h["X-Kept"] == nil || h["Content-Type"] == nil {
		t.Fatalf("left %v, want only X-Kept and Content-Type", h)
	}
}

func BenchmarkRemoveFields(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		h := http.Header{"Content-Type": {"application/json"}, "Content-Length": {"200"}, "Date": {"x"}, "Location": {"/v1/orders/1"}}
		removeFields(h, "Content-Length")
	}
}
