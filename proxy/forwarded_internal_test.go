package proxy

import (
	"net/http"
	"testing"
)

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
