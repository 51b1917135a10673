// Package jwttest signs JWT bearer tokens and serves JWK Sets for the tests
// of owner: jwt (packages identity, policy and proxy): keys generated per
// run, a settable clock, and a JWKS server on 127.0.0.1 that counts its
// fetches.
package jwttest

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

// Issuer is the "iss" of every token ClaimsAt makes.
const Issuer = "https://issuer.test"

// Key is a signing key of a test issuer, generated per test run.
type Key struct {
	Kid    string            // "kid" of its tokens and its JWK; "" names none
	Method jwt.SigningMethod // the algorithm it signs with
	Priv   crypto.Signer
}

// NewECKey returns a new ES256 key with kid.
func NewECKey(t testing.TB, kid string) Key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return Key{Kid: kid, Method: jwt.SigningMethodES256, Priv: k}
}

// NewEdKey returns a new EdDSA key with kid.
func NewEdKey(t testing.TB, kid string) Key {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return Key{Kid: kid, Method: jwt.SigningMethodEdDSA, Priv: k}
}

var (
	rsaOnce sync.Once
	rsaKey  *rsa.PrivateKey
)

// NewRSAKey returns a 2048-bit RSA key, one per test binary (generating
// them is slow under -race).
func NewRSAKey(t testing.TB, kid string, method jwt.SigningMethod) Key {
	t.Helper()
	rsaOnce.Do(func() {
		var err error
		if rsaKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	})
	return Key{Kid: kid, Method: method, Priv: rsaKey}
}

// JWKSOf returns the JWK Set document of keys' public halves.
func JWKSOf(t testing.TB, keys ...Key) []byte {
	t.Helper()
	set := jose.JSONWebKeySet{}
	for _, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.Priv.Public(), KeyID: k.Kid, Algorithm: k.Method.Alg(), Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Sign returns a compact JWS of claims signed by k, with k's kid.
func (k Key) Sign(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(k.Method, claims)
	if k.Kid != "" {
		tok.Header["kid"] = k.Kid
	}
	s, err := tok.SignedString(k.Priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ClaimsAt returns standard claims for sub, valid for an hour from now.
func ClaimsAt(now time.Time, sub string) jwt.MapClaims {
	return jwt.MapClaims{
		"iss": Issuer,
		"sub": sub,
		"aud": "orders-api",
		"iat": now.Unix(),
		"exp": now.Add(time.Hour).Unix(),
		"jti": rand.Text(),
	}
}

// Clock is a settable clock.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock at a fixed instant.
func NewClock() *Clock { return &Clock{t: time.Unix(1_800_000_000, 0)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// JWKSServer serves a JWK Set on 127.0.0.1 and counts the Fetches.
type JWKSServer struct {
	*httptest.Server
	mu     sync.Mutex
	doc    []byte
	status int
	// Fetches counts the requests s answered.
	Fetches atomic.Int32
}

// StartJWKSServer serves doc with status 200 until the test ends.
func StartJWKSServer(t testing.TB, doc []byte) *JWKSServer {
	t.Helper()
	s := &JWKSServer{doc: doc, status: http.StatusOK}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Fetches.Add(1)
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

// Set makes s serve doc with status from now on.
func (s *JWKSServer) Set(doc []byte, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.doc, s.status = doc, status
}

// Bearer returns a POST request carrying token as its Bearer credential.
func Bearer(token string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/orders", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}
