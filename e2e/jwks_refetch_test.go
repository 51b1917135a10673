package e2e

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// jwksIssuer serves a JWK Set on 127.0.0.1 that the test can change, and
// counts its fetches; status 0 answers 200.
type jwksIssuer struct {
	*httptest.Server
	mu      sync.Mutex
	doc     []byte
	status  int
	fetches atomic.Int64
}

func startJWKSIssuer(t *testing.T, doc []byte, status int) *jwksIssuer {
	t.Helper()
	s := &jwksIssuer{doc: doc, status: status}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		doc, status := s.doc, s.status
		s.mu.Unlock()
		if status == 0 {
			status = http.StatusOK
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.WriteHeader(status)
		_, _ = w.Write(doc)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksIssuer) set(doc []byte, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.doc, s.status = doc, status
}

func newES256Signer(t *testing.T, kid string) signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signer{kid: kid, method: jwt.SigningMethodES256, key: k, public: k.Public()}
}

func jwtRoutes(jwksURL string) string {
	return fmt.Sprintf(`  - name: payments
    match: "POST /v1/payments"
    owner: jwt
    jwt:
      jwks_url: %q
      issuers: [%q]
`, jwksURL, e2eIssuer)
}

// readyz returns the admin /readyz answer.
func readyz(t *testing.T, g *Gate) Answer {
	t.Helper()
	return adminDo(t, http.MethodGet, g.AdminURL+"/readyz", "")
}

// TestJWKSNewKidTakenOnFirstUse: the issuer publishes a new key; the
// first token signed with it is accepted (the binary reads the JWKS again
// at once on an unknown kid), and a flood of tokens naming made-up kids
// reads the JWKS at most once per 5 s interval.
func TestJWKSNewKidTakenOnFirstUse(t *testing.T) {
	k1, k2 := newES256Signer(t, "2026-01"), newES256Signer(t, "2026-02")
	idp := startJWKSIssuer(t, jwkSet(t, k1), 0)
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL, Routes: jwtRoutes(idp.URL + "/.well-known/jwks.json")})
	url := g.URL + "/v1/payments"
	eventually(t, 10*time.Second, "the JWKS read at start", func() bool { return idp.fetches.Load() >= 1 })

	if a := postBearer(t, url, "Bearer "+k1.token(t, "alice", time.Now()), "pay-1", `{}`); a.Status != http.StatusCreated {
		t.Fatalf("token of the first key: %d %s", a.Status, a.Body)
	}
	// The issuer rotates in a new key and a client uses it at once.
	idp.set(jwkSet(t, k1, k2), 0)
	before := idp.fetches.Load()
	if a := postBearer(t, url, "Bearer "+k2.token(t, "alice", time.Now()), "pay-2", `{}`); a.Status != http.StatusCreated {
		t.Fatalf("first token of the newly published key: %d %s; want 201", a.Status, a.Body)
	}
	if n := idp.fetches.Load() - before; n != 1 {
		t.Fatalf("%d JWKS reads for the new kid, want 1", n)
	}

	// A flood of tokens naming kids the issuer never published.
	before = idp.fetches.Load()
	start := time.Now()
	var wg sync.WaitGroup
	var refused atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				_, priv, _ := ed25519.GenerateKey(rand.Reader)
				bogus := signer{kid: fmt.Sprintf("bogus-%d-%d", w, i), method: jwt.SigningMethodEdDSA, key: priv}
				if a := postBearer(t, url, "Bearer "+bogus.token(t, "mallory", time.Now()), fmt.Sprintf("b-%d-%d", w, i), `{}`); a.isProblem(http.StatusUnauthorized, "invalid-credentials") {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if refused.Load() != 200 {
		t.Errorf("%d of 200 tokens with unknown kids refused with 401, want all", refused.Load())
	}
	// At most one read per 5 s interval, counting the interval the new
	// kid's read opened.
	limit := int64(elapsed/(5*time.Second)) + 1
	if n := idp.fetches.Load() - before; n > limit {
		t.Errorf("%d JWKS reads for 200 unknown kids in %v, want at most %d", n, elapsed, limit)
	}
	if n := up.Total(); n != 2 {
		t.Errorf("upstream executed %d times, want 2", n)
	}
}

// TestJWKSUnreadableNotReady: a jwt route whose JWKS cannot be read
// makes /readyz answer 503 naming the route and the JWKS, and validate
// warns about it; once the issuer answers, /readyz is 200 and tokens work.
func TestJWKSUnreadableNotReady(t *testing.T) {
	k1 := newES256Signer(t, "k1")
	idp := startJWKSIssuer(t, []byte("not here"), http.StatusNotFound)
	jwksURL := idp.URL + "/.well-known/jwks.json"

	code, out := runValidate(t, "upstream:\n  url: http://127.0.0.1:1\nroutes:\n"+jwtRoutes(jwksURL))
	if code != 0 || !strings.Contains(out, "WARNING") || !strings.Contains(out, "route payments") || !strings.Contains(out, "404") {
		t.Errorf("validate with an unreadable jwks_url: exit %d, want 0 with a warning naming the route:\n%s", code, out)
	}

	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL, Routes: jwtRoutes(jwksURL)})
	eventually(t, 10*time.Second, "a failed JWKS read", func() bool { return idp.fetches.Load() >= 1 })
	a := readyz(t, g)
	if !a.isProblem(http.StatusServiceUnavailable, "not-ready") || !strings.Contains(string(a.Body), "payments") || !strings.Contains(string(a.Body), jwksURL) {
		t.Fatalf("/readyz with an unreadable JWKS: %d %s; want 503 naming the route and the JWKS", a.Status, a.Body)
	}
	// The failure is logged after the issuer answered: wait for the line.
	eventually(t, 10*time.Second, "the failed read's log line", func() bool { return strings.Contains(g.Logs(), "no keys were read yet") })
	if strings.Contains(g.Logs(), "keeping the keys read before") {
		t.Errorf("the log claims keys were kept when none were read:\n%s", g.Logs())
	}
	idp.set(jwkSet(t, k1), 0)
	eventually(t, 15*time.Second, "/readyz 200 after the issuer answers", func() bool { return readyz(t, g).Status == http.StatusOK })
	if a := postBearer(t, g.URL+"/v1/payments", "Bearer "+k1.token(t, "alice", time.Now()), "pay-1", `{}`); a.Status != http.StatusCreated {
		t.Fatalf("token after recovery: %d %s", a.Status, a.Body)
	}
}
