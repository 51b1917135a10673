package identity

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/idemgate/idemgate/internal/jwttest"
)

func TestJWTOwnerForm(t *testing.T) {
	got, err := JWTOwner([]any{"https://issuer.example", "alice"})
	if err != nil || got != `j:["https://issuer.example","alice"]` {
		t.Fatalf("JWTOwner = %q, %v", got, err)
	}
	// Values that a naive join would run together stay apart.
	pairs := [][2][]any{
		{{"a", "b,c"}, {"a,b", "c"}},
		{{`a","b`}, {"a", "b"}},
		{{"1"}, {json.Number("1")}},
		{{"true"}, {true}},
		{{"<x>&"}, {"\\u003cx\\u003e\\u0026"}},
	}
	for _, p := range pairs {
		a, errA := JWTOwner(p[0])
		b, errB := JWTOwner(p[1])
		if errA != nil || errB != nil || a == b {
			t.Errorf("JWTOwner(%v) = %q, JWTOwner(%v) = %q (%v, %v): want two different owners", p[0], a, p[1], b, errA, errB)
		}
	}
	if got, _ := JWTOwner([]any{"<x>&"}); got != `j:["<x>&"]` {
		t.Errorf("HTML characters escaped: %q", got)
	}
	for _, bad := range [][]any{{""}, {nil}, {map[string]any{"a": "b"}}, {[]any{"a"}}, {1.5}} {
		if got, err := JWTOwner(bad); err == nil {
			t.Errorf("JWTOwner(%#v) = %q, want an error", bad, got)
		}
	}
}

// TestJWTOwnerSurvivesRefresh is the point of owner: jwt: two different
// tokens of the same principal are one owner, whatever key signed them.
func TestJWTOwnerSurvivesRefresh(t *testing.T) {
	clock := jwttest.NewClock()
	ec, ed := jwttest.NewECKey(t, "ec-1"), jwttest.NewEdKey(t, "ed-1")
	rs, ps := jwttest.NewRSAKey(t, "rs-1", jwt.SigningMethodRS256), jwttest.NewRSAKey(t, "ps-1", jwt.SigningMethodPS384)
	srv := jwttest.StartJWKSServer(t, jwttest.JWKSOf(t, ec, ed, rs, ps))
	p, _ := jwtPolicy(t, JWTSettings{JWKSURL: srv.URL + "/jwks.json", Issuers: []string{jwttest.Issuer},
		Audiences: []string{"orders-api"}, Claims: DefaultJWTClaims()}, clock)
	route := p.Defaults()
	want := `j:["` + jwttest.Issuer + `","alice"]`
	for _, k := range []jwttest.Key{ec, ed, rs, ps} {
		first := k.Sign(t, jwttest.ClaimsAt(clock.Now(), "alice"))
		clock.Add(10 * time.Minute)
		refreshed := k.Sign(t, jwttest.ClaimsAt(clock.Now(), "alice"))
		if first == refreshed {
			t.Fatal("test tokens are identical")
		}
		for _, tok := range []string{first, refreshed} {
			got, err := route.OwnerOf(jwttest.Bearer(tok))
			if err != nil || got != want {
				t.Errorf("%s: OwnerOf = %q, %v; want %q", k.Method.Alg(), got, err, want)
			}
		}
		other, err := route.OwnerOf(jwttest.Bearer(k.Sign(t, jwttest.ClaimsAt(clock.Now(), "bob"))))
		if err != nil || other == want {
			t.Errorf("%s: bob's owner = %q, %v; want a different owner", k.Method.Alg(), other, err)
		}
	}
	if n := srv.Fetches.Load(); n != 1 {
		t.Errorf("JWKS fetched %d times, want 1 (cached)", n)
	}
}

func TestJWTOwnerCustomClaims(t *testing.T) {
	clock := jwttest.NewClock()
	k := jwttest.NewECKey(t, "k1")
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwttest.JWKSOf(t, k), 0o600); err != nil {
		t.Fatal(err)
	}
	p, _ := jwtPolicy(t, JWTSettings{JWKSFile: path, Issuers: []string{"https://other.test", jwttest.Issuer},
		Claims: []string{"tenant", "sub"}}, clock)
	c := jwttest.ClaimsAt(clock.Now(), "alice")
	c["tenant"] = 12345678901234567 // beyond float64 precision: kept as written
	got, err := p.Defaults().OwnerOf(jwttest.Bearer(k.Sign(t, c)))
	if err != nil || got != `j:[12345678901234567,"alice"]` {
		t.Fatalf("OwnerOf = %q, %v", got, err)
	}
	c["tenant"] = "12345678901234567"
	if s, _ := p.Defaults().OwnerOf(jwttest.Bearer(k.Sign(t, c))); s == got {
		t.Error("string and number tenant gave one owner")
	}
	// Without a kid, the only key that fits the alg verifies the token.
	noKid := jwttest.Key{Method: k.Method, Priv: k.Priv}
	if s, err := p.Defaults().OwnerOf(jwttest.Bearer(noKid.Sign(t, c))); err != nil || !strings.HasPrefix(s, "j:[") {
		t.Errorf("token without kid, one key: %q, %v", s, err)
	}
}

func TestJWTRejections(t *testing.T) {
	clock := jwttest.NewClock()
	good, stranger := jwttest.NewECKey(t, "good"), jwttest.NewECKey(t, "good") // same kid, other key
	rs := jwttest.NewRSAKey(t, "rsa", jwt.SigningMethodRS256)
	srv := jwttest.StartJWKSServer(t, jwttest.JWKSOf(t, good, rs, jwttest.NewECKey(t, "second-ec")))
	p, _ := jwtPolicy(t, JWTSettings{JWKSURL: srv.URL, Issuers: []string{jwttest.Issuer},
		Audiences: []string{"orders-api", "billing-api"}, Claims: DefaultJWTClaims()}, clock)
	route := p.Defaults()
	now := clock.Now()
	with := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := jwttest.ClaimsAt(now, "alice")
		edit(c)
		return c
	}
	if _, err := route.OwnerOf(jwttest.Bearer(good.Sign(t, jwttest.ClaimsAt(now, "alice")))); err != nil {
		t.Fatalf("valid token refused: %v", err)
	}

	rsaPub, err := x509.MarshalPKIXPublicKey(rs.Priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	pemPub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: rsaPub})
	hmacWith := func(secret []byte) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwttest.ClaimsAt(now, "alice"))
		tok.Header["kid"] = "rsa"
		s, err := tok.SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	none := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodNone, jwttest.ClaimsAt(now, "alice"))
		tok.Header["kid"] = "good"
		s, err := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	withHeader := func(name string, v any) string {
		tok := jwt.NewWithClaims(good.Method, jwttest.ClaimsAt(now, "alice"))
		tok.Header["kid"] = "good"
		tok.Header[name] = v
		s, err := tok.SignedString(good.Priv)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	resigned := func(tok string, edit func(header map[string]any)) string {
		// Keeps the signature, changes the header: the signature no longer matches.
		parts := strings.Split(tok, ".")
		raw, _ := base64.RawURLEncoding.DecodeString(parts[0])
		var h map[string]any
		_ = json.Unmarshal(raw, &h)
		edit(h)
		raw, _ = json.Marshal(h)
		parts[0] = base64.RawURLEncoding.EncodeToString(raw)
		return strings.Join(parts, ".")
	}
	tests := []struct {
		name, token, why string
	}{
		{"bad signature", stranger.Sign(t, jwttest.ClaimsAt(now, "alice")), "signature is invalid"},
		{"tampered payload", func() string {
			parts := strings.Split(good.Sign(t, jwttest.ClaimsAt(now, "alice")), ".")
			c, _ := json.Marshal(jwttest.ClaimsAt(now, "mallory"))
			parts[1] = base64.RawURLEncoding.EncodeToString(c)
			return strings.Join(parts, ".")
		}(), "signature is invalid"},
		{"unknown kid", jwttest.NewECKey(t, "nobody").Sign(t, jwttest.ClaimsAt(now, "alice")), "no signing key"},
		{"no kid, several keys", jwttest.Key{Method: good.Method, Priv: good.Priv}.Sign(t, jwttest.ClaimsAt(now, "alice")), "several keys"},
		{"kid of another key type", resigned(good.Sign(t, jwttest.ClaimsAt(now, "alice")), func(h map[string]any) { h["kid"] = "rsa" }), "does not fit"},
		{"kid not a string", withHeader("kid", 7), "kid header is not a string"},
		{"crit header", withHeader("crit", []string{"exp"}), "crit"},
		{"expired", good.Sign(t, with(func(c jwt.MapClaims) { c["exp"] = now.Add(-JWTLeeway - time.Second).Unix() })), "expired"},
		{"no exp", good.Sign(t, with(func(c jwt.MapClaims) { delete(c, "exp") })), "exp"},
		{"not yet valid", good.Sign(t, with(func(c jwt.MapClaims) { c["nbf"] = now.Add(JWTLeeway + time.Minute).Unix() })), "not valid yet"},
		{"wrong iss", good.Sign(t, with(func(c jwt.MapClaims) { c["iss"] = "https://evil.test" })), "issuer is not accepted"},
		{"no iss", good.Sign(t, with(func(c jwt.MapClaims) { delete(c, "iss") })), "issuer is not accepted"},
		{"iss not a string", good.Sign(t, with(func(c jwt.MapClaims) { c["iss"] = []string{jwttest.Issuer} })), "invalid type"},
		{"wrong aud", good.Sign(t, with(func(c jwt.MapClaims) { c["aud"] = "admin-api" })), "audience"},
		{"no aud", good.Sign(t, with(func(c jwt.MapClaims) { delete(c, "aud") })), "aud"},
		{"missing sub", good.Sign(t, with(func(c jwt.MapClaims) { delete(c, "sub") })), `no "sub" claim`},
		{"empty sub", good.Sign(t, with(func(c jwt.MapClaims) { c["sub"] = "" })), "empty string"},
		{"object sub", good.Sign(t, with(func(c jwt.MapClaims) { c["sub"] = map[string]any{"id": 1} })), "not a string"},
		{"alg none", none(), "signing method none is invalid"},
		{"HMAC with the public key (PEM)", hmacWith(pemPub), "signing method HS256 is invalid"},
		{"HMAC with the public key (DER)", hmacWith(rsaPub), "signing method HS256 is invalid"},
		{"alg relabelled HS256", resigned(rs.Sign(t, jwttest.ClaimsAt(now, "alice")), func(h map[string]any) { h["alg"] = "HS256" }), "HS256 is invalid"},
		{"malformed", "not.a.jwt", "malformed"},
		{"too long", strings.Repeat("a", maxBearerTokenBytes+1), "longer than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := route.OwnerOf(jwttest.Bearer(tc.token))
			if !errors.Is(err, ErrInvalidCredentials) {
				t.Fatalf("OwnerOf = %q, %v; want ErrInvalidCredentials", got, err)
			}
			if got != "" {
				t.Errorf("owner %q returned with an error", got)
			}
			if !strings.Contains(err.Error(), tc.why) {
				t.Errorf("error %q does not say %q", err, tc.why)
			}
		})
	}
	// The leeway accepts a token that expired a moment ago.
	c := with(func(c jwt.MapClaims) { c["exp"] = now.Add(-JWTLeeway / 2).Unix() })
	if _, err := route.OwnerOf(jwttest.Bearer(good.Sign(t, c))); err != nil {
		t.Errorf("token within the %v leeway refused: %v", JWTLeeway, err)
	}
}

func TestJWTOwnerOfAuthorizationField(t *testing.T) {
	clock := jwttest.NewClock()
	k := jwttest.NewEdKey(t, "k1")
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwttest.JWKSOf(t, k), 0o600); err != nil {
		t.Fatal(err)
	}
	p, _ := jwtPolicy(t, JWTSettings{JWKSFile: path, Issuers: []string{jwttest.Issuer}, Claims: DefaultJWTClaims()}, clock)
	route := p.Defaults()
	tok := k.Sign(t, jwttest.ClaimsAt(clock.Now(), "alice"))
	req := func(values ...string) *http.Request {
		r := jwttest.Bearer("")
		for _, v := range values {
			r.Header.Add("Authorization", v)
		}
		return r
	}
	if got, err := route.OwnerOf(req("bearer  " + tok + " ")); err != nil || !strings.HasPrefix(got, "j:") {
		t.Errorf("lower-case scheme and extra spaces: %q, %v", got, err)
	}
	for name, r := range map[string]*http.Request{
		"absent":      req(),
		"empty":       req(" "),
		"basic":       req("Basic YWxpY2U6c2VjcmV0"),
		"scheme only": req("Bearer"),
		"twice":       req("Bearer "+tok, "Bearer "+tok),
	} {
		if got, err := route.OwnerOf(r); !errors.Is(err, ErrInvalidCredentials) {
			t.Errorf("%s: OwnerOf = %q, %v; want ErrInvalidCredentials", name, got, err)
		}
	}
	// A route compiled but never bound refuses rather than guessing.
	unbound := *route
	unbound.jwt = nil
	if _, err := unbound.OwnerOf(req("Bearer " + tok)); !errors.Is(err, ErrInvalidCredentials) {
		t.Errorf("unbound route: %v", err)
	}
}
