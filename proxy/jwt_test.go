package proxy_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store/memory"
)

const jwtIssuer = "https://issuer.test"

// TestJWTOwnerThroughTheProxy: with owner: jwt a refreshed token is the
// same owner (the retry replays), another subject is another owner, and a
// missing or invalid token is 401 invalid-credentials with nothing sent
// upstream.
func TestJWTOwnerThroughTheProxy(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(jwks)
	}))
	t.Cleanup(idp.Close)
	token := func(sub string, signer any, iat time.Time) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
			"iss": jwtIssuer, "sub": sub, "aud": "orders-api",
			"iat": iat.Unix(), "exp": iat.Add(time.Hour).Unix(), "jti": rand.Text(),
		})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(signer)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	up := newUpstream(t, created)
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	d := baseRoute()
	d.Owner = identity.OwnerSource{Kind: identity.OwnerJWT}
	d.JWT = &identity.JWTSettings{JWKSURL: idp.URL + "/jwks.json", Issuers: []string{jwtIssuer},
		Audiences: []string{"orders-api"}, Claims: identity.DefaultJWTClaims()}
	pol, err := policy.New(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := identity.NewKeyRing(identity.JWKSOptions{Client: &http.Client{Timeout: 5 * time.Second}, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := ring.Bind(t.Context(), pol); err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(up.URL)
	p, err := proxy.New(proxy.Options{Upstream: target, Store: st, Timeout: 5 * time.Second,
		Policy: func() *policy.Policy { return pol }})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	h := &harness{t: t, up: up, store: st, front: front}
	post := func(key, authorization string) result {
		if authorization == "" {
			return h.do("POST", "/v1/orders", "", key, `{"amount":5}`)
		}
		return h.do("POST", "/v1/orders", "", key, `{"amount":5}`, "Authorization", authorization)
	}

	now := time.Now()
	first := post("order-1", "Bearer "+token("alice", key, now.Add(-10*time.Minute)))
	if first.status != http.StatusCreated || first.header.Get(proxy.ReplayedHeader) != "" {
		t.Fatalf("first request: %d %v %s", first.status, first.header, first.body)
	}
	// The client refreshed its access token: another token, same iss and sub.
	retry := post("order-1", "Bearer "+token("alice", key, now))
	if retry.status != http.StatusCreated || retry.header.Get(proxy.ReplayedHeader) != "true" || retry.body != first.body {
		t.Fatalf("retry with a refreshed token: %d %v %s; want the replay", retry.status, retry.header, retry.body)
	}
	if n := up.count("/v1/orders"); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
	// Another subject with the same key is another owner.
	bob := post("order-1", "Bearer "+token("bob", key, now))
	if bob.status != http.StatusCreated || bob.header.Get(proxy.ReplayedHeader) != "" {
		t.Fatalf("bob: %d %v; want his own first request", bob.status, bob.header)
	}
	if n := up.count("/v1/orders"); n != 2 {
		t.Fatalf("upstream executed %d times, want 2", n)
	}

	forged, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	expired := token("alice", key, now.Add(-2*time.Hour))
	for name, c := range map[string]struct{ authorization, challenge string }{
		"no token":  {"", "Bearer"},
		"basic":     {"Basic YWxpY2U6czNjcmV0", `Bearer error="invalid_token"`},
		"forged":    {"Bearer " + token("alice", forged, now), `Bearer error="invalid_token"`},
		"expired":   {"Bearer " + expired, `Bearer error="invalid_token"`},
		"not a JWT": {"Bearer alice", `Bearer error="invalid_token"`},
		"tampered":  {"Bearer " + strings.Replace(token("alice", key, now), "e", "f", 1), `Bearer error="invalid_token"`},
	} {
		r := post("order-1", c.authorization)
		if r.status != http.StatusUnauthorized || problemType(t, r) != "invalid-credentials" {
			t.Errorf("%s: %d %s; want 401 invalid-credentials", name, r.status, r.body)
		}
		if got := r.header.Get("WWW-Authenticate"); got != c.challenge {
			t.Errorf("%s: WWW-Authenticate %q, want %q", name, got, c.challenge)
		}
	}
	if n := up.count("/v1/orders"); n != 2 {
		t.Fatalf("upstream executed %d times after refused tokens, want 2", n)
	}
	// A request without a key is not enforced, so it needs no token.
	if r := post("", ""); r.status != http.StatusCreated {
		t.Errorf("keyless request without a token: %d", r.status)
	}
}

// TestJWTVerifiedOncePerRequest: on a route whose DELETE tombstones the
// records of its creates (resource_from), the bearer token of a keyed
// DELETE names both the request's owner and the owner whose records it
// tombstones; it is verified once, even when the tombstoning route is
// another route than the one the DELETE matched. Each verification reads
// the key ring's clock once (the token's exp and nbf checks) and nothing
// else does with a jwks_file already read, so the clock's reads count the
// verifications.
func TestJWTVerifiedOncePerRequest(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}
	jwksFile := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(jwksFile, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": jwtIssuer, "sub": "alice", "exp": time.Now().Add(time.Hour).Unix(),
	})
	tok.Header["kid"] = "k1"
	bearer, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}

	api := &ordersAPI{}
	up := newUpstream(t, api.serve)
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	d := baseRoute()
	d.Methods = []string{"POST", "DELETE"}
	d.Owner = identity.OwnerSource{Kind: identity.OwnerJWT}
	d.JWT = &identity.JWTSettings{JWKSFile: jwksFile, Issuers: []string{jwtIssuer}, Claims: identity.DefaultJWTClaims()}
	d.ResourceFrom = policy.ResourceFromLocation
	d.TombstoneMethods = []string{http.MethodDelete}
	del := d
	del.Name, del.Match, del.ResourceFrom, del.TombstoneMethods = "deletes", "DELETE /v1/orders/{id}", "", nil
	pol, err := policy.New(d, []policy.Route{del})
	if err != nil {
		t.Fatal(err)
	}
	var clockReads atomic.Int64
	ring, err := identity.NewKeyRing(identity.JWKSOptions{Client: &http.Client{Timeout: 5 * time.Second},
		Now: func() time.Time { clockReads.Add(1); return time.Now() }})
	if err != nil {
		t.Fatal(err)
	}
	if err := ring.Bind(t.Context(), pol); err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(up.URL)
	p, err := proxy.New(proxy.Options{Upstream: target, Store: st, Timeout: 5 * time.Second,
		Policy: func() *policy.Policy { return pol }})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	h := &harness{t: t, up: up, store: st, front: front}

	if r := h.do("POST", "/v1/orders", "", "c1", `{}`, "Authorization", "Bearer "+bearer); r.status != http.StatusCreated {
		t.Fatalf("create = %d %s", r.status, r.body)
	}
	for _, c := range []struct{ name, path string }{
		{"the defaults route, which also tombstones", "/v1/orders"},
		{"route deletes, the defaults route tombstones", "/v1/orders/1"},
	} {
		before := clockReads.Load()
		r := h.do("DELETE", c.path, "", "d-"+c.path, "", "Authorization", "Bearer "+bearer)
		if r.status != http.StatusNoContent {
			t.Fatalf("%s: DELETE = %d %s", c.name, r.status, r.body)
		}
		if n := clockReads.Load() - before; n != 1 {
			t.Errorf("%s: the token was verified %d times for one DELETE, want 1", c.name, n)
		}
	}
	// The DELETE tombstoned alice's create: the JWT owner it computed
	// once served both.
	if r := h.do("POST", "/v1/orders", "", "c1", `{}`, "Authorization", "Bearer "+bearer); r.status != http.StatusGone {
		t.Fatalf("retry of the create after its DELETE = %d %s, want 410", r.status, r.body)
	}
}
