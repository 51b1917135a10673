package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
)

const e2eIssuer = "https://issuer.test"

// signer is one signing key of the test issuer.
type signer struct {
	kid    string
	method jwt.SigningMethod
	key    any // private key
	public any
}

func (s signer) token(t *testing.T, sub string, iat time.Time) string {
	t.Helper()
	tok := jwt.NewWithClaims(s.method, jwt.MapClaims{
		"iss": e2eIssuer, "sub": sub, "aud": "orders-api",
		"iat": iat.Unix(), "exp": iat.Add(time.Hour).Unix(), "jti": rand.Text(),
	})
	tok.Header["kid"] = s.kid
	out, err := tok.SignedString(s.key)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func jwkSet(t *testing.T, keys ...signer) []byte {
	t.Helper()
	set := jose.JSONWebKeySet{}
	for _, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.public, KeyID: k.kid, Algorithm: k.method.Alg(), Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// postBearer sends a keyed POST with authorization as the Authorization
// field (none when "").
func postBearer(t *testing.T, url, authorization, key, body string) Answer {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), "POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Answer{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// TestJWTOwnerSurvivesTokenRefresh runs the binary with owner: jwt on
// two routes, one with a jwks_file and one with a jwks_url served on
// 127.0.0.1: a retry with a refreshed token replays, another subject is
// another owner, refused tokens are 401 and never reach the upstream, and
// a key rotated in the jwks_file is picked up on SIGHUP.
func TestJWTOwnerSurvivesTokenRefresh(t *testing.T) {
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	edPub, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k1 := signer{kid: "2026-01", method: jwt.SigningMethodES256, key: ecKey, public: ecKey.Public()}
	k2 := signer{kid: "2026-02", method: jwt.SigningMethodEdDSA, key: edKey, public: edPub}

	jwksPath := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(jwksPath, jwkSet(t, k1), 0o600); err != nil {
		t.Fatal(err)
	}
	idpDoc := jwkSet(t, k1)
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(idpDoc)
	}))
	t.Cleanup(idp.Close)

	up := startUpstream(t)
	routes := fmt.Sprintf(`  - name: orders
    match: "POST /v1/orders"
    owner: jwt
    jwt:
      jwks_file: %q
      issuers: [%q]
      audiences: [orders-api]
  - name: payments
    match: "POST /v1/payments"
    owner: jwt
    jwt:
      jwks_url: %q
      issuers: [%q]
`, jwksPath, e2eIssuer, idp.URL+"/.well-known/jwks.json", e2eIssuer)
	g := startGate(t, gateConfig{Upstream: up.URL, Routes: routes})
	orders, payments := g.URL+"/v1/orders", g.URL+"/v1/payments"
	body := `{"amount":5}`

	now := time.Now()
	first := postBearer(t, orders, "Bearer "+k1.token(t, "alice", now.Add(-10*time.Minute)), "order-1", body)
	if first.Status != http.StatusCreated || first.replayed() {
		t.Fatalf("first request: %d %s", first.Status, first.Body)
	}
	// The client refreshed its access token and retries with the same key.
	retry := postBearer(t, orders, "Bearer "+k1.token(t, "alice", now), "order-1", body)
	if retry.Status != http.StatusCreated || !retry.replayed() || string(retry.Body) != string(first.Body) {
		t.Fatalf("retry with a refreshed token: %d replayed=%v %s", retry.Status, retry.replayed(), retry.Body)
	}
	if n := up.Total(); n != 1 {
		t.Fatalf("upstream executed %d times, want 1", n)
	}
	bob := postBearer(t, orders, "Bearer "+k1.token(t, "bob", now), "order-1", body)
	if bob.Status != http.StatusCreated || bob.replayed() {
		t.Fatalf("another subject: %d replayed=%v", bob.Status, bob.replayed())
	}
	if n := up.Total(); n != 2 {
		t.Fatalf("upstream executed %d times, want 2", n)
	}

	forged, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	forger := signer{kid: k1.kid, method: jwt.SigningMethodES256, key: forged}
	for name, authz := range map[string]string{
		"forged signature": "Bearer " + forger.token(t, "alice", now),
		"expired":          "Bearer " + k1.token(t, "alice", now.Add(-3*time.Hour)),
		"no token":         "",
		"opaque token":     "Bearer alice",
	} {
		a := postBearer(t, orders, authz, "order-9", body)
		if !a.isProblem(http.StatusUnauthorized, "invalid-credentials") || a.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: %d %v %s; want 401 invalid-credentials", name, a.Status, a.Header, a.Body)
		}
	}
	if n := up.Total(); n != 2 {
		t.Fatalf("upstream executed %d times after refused tokens, want 2", n)
	}

	// jwks_url: fetched by the binary from the issuer, then cached.
	p1 := postBearer(t, payments, "Bearer "+k1.token(t, "alice", now.Add(-time.Minute)), "pay-1", body)
	p2 := postBearer(t, payments, "Bearer "+k1.token(t, "alice", now), "pay-1", body)
	if p1.Status != http.StatusCreated || p2.Status != http.StatusCreated || !p2.replayed() {
		t.Fatalf("jwks_url route: %d, %d replayed=%v: %s", p1.Status, p2.Status, p2.replayed(), p2.Body)
	}

	// Rotation in the jwks_file, picked up by SIGHUP (a config reload).
	if err := os.WriteFile(jwksPath, jwkSet(t, k2), 0o600); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	_ = g.cmd.Process.Signal(syscall.SIGHUP)
	g.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := postBearer(t, orders, "Bearer "+k2.token(t, "alice", time.Now()), "order-2", body)
		if a.Status == http.StatusCreated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotated key not accepted after SIGHUP: %d %s", a.Status, a.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The new kid may be taken before the reload (an unknown kid rereads
	// the file at once), so wait for the reload before the last check.
	eventually(t, 10*time.Second, "the reload's log line", func() bool { return strings.Contains(g.Logs(), "config reloaded") })
	if a := postBearer(t, orders, "Bearer "+k1.token(t, "alice", time.Now()), "order-3", body); !a.isProblem(http.StatusUnauthorized, "invalid-credentials") {
		t.Errorf("key removed from the jwks_file still accepted after the reload: %d %s", a.Status, a.Body)
	}
}
