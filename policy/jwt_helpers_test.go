package policy

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
)

const testIssuer = "https://issuer.test"

// testKey is a signing key of a test issuer, generated per test run.
type testKey struct {
	kid    string
	method jwt.SigningMethod
	priv   crypto.Signer
}

func newECKey(t testing.TB, kid string) testKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return testKey{kid: kid, method: jwt.SigningMethodES256, priv: k}
}

func newEdKey(t testing.TB, kid string) testKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return testKey{kid: kid, method: jwt.SigningMethodEdDSA, priv: k}
}

var (
	rsaOnce sync.Once
	rsaKey  *rsa.PrivateKey
)

// newRSAKey returns a 2048-bit RSA key, one per test binary (generating
// them is slow under -race).
func newRSAKey(t testing.TB, kid string, method jwt.SigningMethod) testKey {
	t.Helper()
	rsaOnce.Do(func() {
		var err error
		if rsaKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	})
	return testKey{kid: kid, method: method, priv: rsaKey}
}

// jwksOf returns the JWK Set document of keys' public halves.
func jwksOf(t testing.TB, keys ...testKey) []byte {
	t.Helper()
	set := jose.JSONWebKeySet{}
	for _, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.priv.Public(), KeyID: k.kid, Algorithm: k.method.Alg(), Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sign returns a compact JWS of claims signed by k, with k's kid.
func (k testKey) sign(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(k.method, claims)
	if k.kid != "" {
		tok.Header["kid"] = k.kid
	}
	s, err := tok.SignedString(k.priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// claimsAt returns standard claims for sub, valid for an hour from now.
func claimsAt(now time.Time, sub string) jwt.MapClaims {
	return jwt.MapClaims{
		"iss": testIssuer,
		"sub": sub,
		"aud": "orders-api",
		"iat": now.Unix(),
		"exp": now.Add(time.Hour).Unix(),
		"jti": rand.Text(),
	}
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// jwksServer serves a JWK Set on 127.0.0.1 and counts the fetches.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	doc     []byte
	status  int
	fetches atomic.Int32
}

func startJWKSServer(t testing.TB, doc []byte) *jwksServer {
	t.Helper()
	s := &jwksServer{doc: doc, status: http.StatusOK}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		doc, status := s.doc, s.status
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.WriteHeader(status)
		_, _ = w.Write(doc)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(doc []byte, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.doc, s.status = doc, status
}

// jwtPolicy compiles a policy whose defaults route uses owner: jwt with s,
// and binds it with a KeyRing on clock.
func jwtPolicy(t testing.TB, s JWTSettings, clock *fakeClock) (*Policy, *KeyRing) {
	t.Helper()
	d := DefaultRoute()
	d.Owner = OwnerSource{Kind: OwnerJWT}
	d.JWT = &s
	p, err := New(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := NewKeyRing(JWKSOptions{Client: &http.Client{Timeout: 5 * time.Second}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := ring.Bind(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return p, ring
}

// bearer returns a POST request carrying token as its bearer credential.
func bearer(token string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/orders", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}
