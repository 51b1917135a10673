package identity

import (
	"errors"
	"strings"
	"testing"

	"github.com/dunglas/httpsfv"
)

func TestParseKey(t *testing.T) {
	k255 := strings.Repeat("k", 255)
	k256 := strings.Repeat("k", 256)
	tests := []struct {
		name    string
		values  []string
		want    string
		wantErr error
		why     string // substring of the error message
	}{
		{name: "absent", values: nil, wantErr: ErrKeyMissing},
		{name: "quoted uuid", values: []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, want: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{name: "bare uuid", values: []string{`8e03978e-40d5-43e8-bc93-6894a57f9324`}, want: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{name: "bare underscore", values: []string{"order_123"}, want: "order_123"},
		{name: "bare base64ish", values: []string{"abc.def:ghi/jkl+=="}, want: "abc.def:ghi/jkl+=="},
		{name: "bare digits", values: []string{"12345"}, want: "12345"},
		{name: "bare sf-token-like star", values: []string{"*abc"}, want: "*abc"},
		{name: "OWS trimmed", values: []string{" \t\"abc\"\t "}, want: "abc"},
		{name: "OWS trimmed bare", values: []string{"  abc  "}, want: "abc"},
		{name: "quoted with inner space", values: []string{`"a b"`}, want: "a b"},
		{name: "escaped quote", values: []string{`"a\"b"`}, want: `a"b`},
		{name: "escaped backslash", values: []string{`"a\\b"`}, want: `a\b`},
		{name: "255 bare", values: []string{k255}, want: k255},
		{name: "255 quoted", values: []string{`"` + k255 + `"`}, want: k255},
		{name: "255 quoted all escaped", values: []string{`"` + strings.Repeat(`\"`, 255) + `"`}, want: strings.Repeat(`"`, 255)},
		{name: "256 bare", values: []string{k256}, wantErr: ErrKeyInvalid, why: "longer than 255"},
		{name: "256 quoted", values: []string{`"` + k256 + `"`}, wantErr: ErrKeyInvalid, why: "longer than 255"},
		{name: "huge quoted", values: []string{`"` + strings.Repeat("k", 5000) + `"`}, wantErr: ErrKeyInvalid, why: "longer than 255"},
		{name: "list quoted", values: []string{`"a", "b"`}, wantErr: ErrKeyInvalid, why: "list"},
		{name: "list bare", values: []string{`a, b`}, wantErr: ErrKeyInvalid, why: "comma"},
		{name: "list bare no space", values: []string{`a,b`}, wantErr: ErrKeyInvalid, why: "comma"},
		{name: "two fields", values: []string{`"a"`, `"b"`}, wantErr: ErrKeyInvalid, why: "sent 2 times"},
		{name: "two equal fields", values: []string{`"a"`, `"a"`}, wantErr: ErrKeyInvalid, why: "sent 2 times"},
		{name: "parameters quoted", values: []string{`"a";x=1`}, wantErr: ErrKeyInvalid, why: "parameters"},
		{name: "parameters bare", values: []string{`a;x=1`}, wantErr: ErrKeyInvalid, why: "parameters"},
		{name: "empty", values: []string{""}, wantErr: ErrKeyInvalid, why: "empty"},
		{name: "empty quoted", values: []string{`""`}, wantErr: ErrKeyInvalid, why: "empty"},
		{name: "whitespace only", values: []string{" \t "}, wantErr: ErrKeyInvalid, why: "empty"},
		{name: "quoted spaces only", values: []string{`"   "`}, wantErr: ErrKeyInvalid, why: "only spaces"},
		{name: "inner space bare", values: []string{"a b"}, wantErr: ErrKeyInvalid, why: "whitespace"},
		{name: "inner tab bare", values: []string{"a\tb"}, wantErr: ErrKeyInvalid, why: "whitespace"},
		{name: "non-ASCII bare", values: []string{"clé"}, wantErr: ErrKeyInvalid, why: "non-ASCII"},
		{name: "non-ASCII quoted", values: []string{`"clé"`}, wantErr: ErrKeyInvalid, why: "non-ASCII"},
		{name: "control bare", values: []string{"a\x01b"}, wantErr: ErrKeyInvalid, why: "control"},
		{name: "control quoted", values: []string{"\"a\x7fb\""}, wantErr: ErrKeyInvalid, why: "control"},
		{name: "tab in quoted", values: []string{"\"a\tb\""}, wantErr: ErrKeyInvalid, why: "control"},
		{name: "unterminated", values: []string{`"abc`}, wantErr: ErrKeyInvalid, why: "sf-string"},
		{name: "bad escape", values: []string{`"a\nb"`}, wantErr: ErrKeyInvalid, why: "sf-string"},
		{name: "trailing garbage", values: []string{`"a"b`}, wantErr: ErrKeyInvalid, why: "sf-string"},
		{name: "quote inside bare", values: []string{`a"b`}, wantErr: ErrKeyInvalid, why: "double quote"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKey(tt.values)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ParseKey(%q) = %q, %v; want error %v", tt.values, got, err, tt.wantErr)
				}
				if got != "" {
					t.Errorf("ParseKey(%q) returned key %q with an error", tt.values, got)
				}
				if !strings.Contains(err.Error(), tt.why) {
					t.Errorf("ParseKey(%q) error %q does not say %q", tt.values, err, tt.why)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseKey(%q) = %q, %v; want %q", tt.values, got, err, tt.want)
			}
		})
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "order_123", `"a\"b"`, `"a", "b"`, `"a";x=1`, " ", "", "é", `"\\"`, "abc.def:ghi/jkl+=="} {
		f.Add(s, "")
	}
	f.Add(`"a"`, `"b"`)
	f.Fuzz(func(t *testing.T, v1, v2 string) {
		// The allocation-free fast path must agree with the RFC 8941 parser.
		if s, ok := simpleSFString(v1); ok {
			item, err := httpsfv.UnmarshalItem([]string{v1})
			if err != nil || item.Value != s {
				t.Fatalf("simpleSFString(%q) = %q but httpsfv says %v, %v", v1, s, item.Value, err)
			}
		}
		values := []string{v1}
		if v2 != "" {
			values = append(values, v2)
		}
		k, err := ParseKey(values)
		if err != nil {
			if !errors.Is(err, ErrKeyInvalid) && !errors.Is(err, ErrKeyMissing) {
				t.Fatalf("ParseKey(%q): error %v wraps neither ErrKeyInvalid nor ErrKeyMissing", values, err)
			}
			if k != "" {
				t.Fatalf("ParseKey(%q) returned %q with error %v", values, k, err)
			}
			return
		}
		if len(values) != 1 {
			t.Fatalf("ParseKey(%q) accepted a field sent twice", values)
		}
		if len(k) < 1 || len(k) > MaxKeyLength {
			t.Fatalf("ParseKey(%q) = %q: length %d outside 1..%d", values, k, len(k), MaxKeyLength)
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x20 || k[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte 0x%02x at %d is not printable ASCII", values, k, k[i], i)
			}
		}
		// Round trip: every accepted key is accepted again, unchanged, as an
		// sf-string, and as a bare token whenever it has bare-token syntax.
		q, err := httpsfv.Marshal(httpsfv.NewItem(k))
		if err != nil {
			t.Fatalf("cannot serialize accepted key %q as an sf-string: %v", k, err)
		}
		if k2, err := ParseKey([]string{q}); err != nil || k2 != k {
			t.Fatalf("quoted round trip of %q via %q = %q, %v", k, q, k2, err)
		}
		if !strings.ContainsAny(k, "\",; ") {
			if k2, err := ParseKey([]string{k}); err != nil || k2 != k {
				t.Fatalf("bare round trip of %q = %q, %v", k, k2, err)
			}
		}
	})
}

func BenchmarkParseKey(b *testing.B) {
	for _, v := range []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `8e03978e-40d5-43e8-bc93-6894a57f9324`} {
		name := "bare"
		if v[0] == '"' {
			name = "quoted"
		}
		b.Run(name, func(b *testing.B) {
			values := []string{v}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseKey(values); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
