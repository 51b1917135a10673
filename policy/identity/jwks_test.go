package identity

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/idemgate/idemgate/internal/jwttest"
)

// TestJWKSRotationURL: a new kid is picked up by refetching, at most once
// per MinRefetchInterval, and a key removed from the set stops verifying.
func TestJWKSRotationURL(t *testing.T) {
	clock := jwttest.NewClock()
	old, next := jwttest.NewECKey(t, "2026-01"), jwttest.NewECKey(t, "2026-02")
	srv := jwttest.StartJWKSServer(t, jwttest.JWKSOf(t, old))
	p, _ := jwtPolicy(t, JWTSettings{JWKSURL: srv.URL + "/.well-known/jwks.json", Issuers: []string{jwttest.Issuer}, Claims: DefaultJWTClaims()}, clock)
	route := p.Defaults()
	owner := func(k jwttest.Key) (string, error) {
		return route.OwnerOf(jwttest.Bearer(k.Sign(t, jwttest.ClaimsAt(clock.Now(), "alice"))))
	}

	if srv.Fetches.Load() != 0 {
		t.Fatal("Bind fetched a JWKS URL; it must not do network IO while a config loads")
	}
	if _, err := owner(old); err != nil {
		t.Fatalf("first token: %v", err)
	}
	if n := srv.Fetches.Load(); n != 1 {
		t.Fatalf("%d fetches after the first token, want 1", n)
	}
	// The issuer rotates: its set now holds only the new key.
	srv.Set(jwttest.JWKSOf(t, next), http.StatusOK)
	clock.Add(DefaultJWKSMinRefetchInterval / 2)
	if _, err := owner(next); !errors.Is(err, ErrInvalidCredentials) {
		t.Fatalf("new kid within the refetch limit: %v; want a refusal", err)
	}
	if n := srv.Fetches.Load(); n != 1 {
		t.Fatalf("%d fetches: an unknown kid refetched inside the rate limit", n)
	}
	clock.Add(DefaultJWKSMinRefetchInterval)
	if _, err := owner(next); err != nil {
		t.Fatalf("new kid after the refetch limit: %v", err)
	}
	if n := srv.Fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
	if _, err := owner(old); !errors.Is(err, ErrInvalidCredentials) {
		t.Fatalf("retired key still verifies: %v", err)
	}
	// A flood of made-up kids costs no fetch.
	for i := range 50 {
		_, _ = owner(jwttest.NewEdKey(t, "bogus-"+string(rune('a'+i%26))))
	}
	if n := srv.Fetches.Load(); n != 2 {
		t.Fatalf("%d fetches after a flood of unknown kids, want 2", n)
	}
}

// TestJWKSConcurrentUnknownKid: callers that meet one new kid at once share
// one fetch.
func TestJWKSConcurrentUnknownKid(t *testing.T) {
	clock := jwttest.NewClock()
	k := jwttest.NewECKey(t, "k1")
	srv := jwttest.StartJWKSServer(t, jwttest.JWKSOf(t, k))
	p, _ := jwtPolicy(t, JWTSettings{JWKSURL: srv.URL, Issuers: []string{jwttest.Issuer}, Claims: DefaultJWTClaims()}, clock)
	tok := k.Sign(t, jwttest.ClaimsAt(clock.Now(), "alice"))
	errs := make(chan error, 16)
	for range cap(errs) {
		go func() {
			_, err := p.Defaults().OwnerOf(jwttest.Bearer(tok))
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := srv.Fetches.Load(); n != 1 {
		t.Errorf("%d fetches for 16 concurrent first tokens, want 1", n)
	}
}

// TestJWKSPeriodicRefresh: KeyRing.Run fetches a URL again once it is
// RefreshInterval old, keeps the old keys when the fetch fails, and retries.
func TestJWKSPeriodicRefresh(t *testing.T) {
	clock := jwttest.NewClock()
	a, b := jwttest.NewECKey(t, "a"), jwttest.NewECKey(t, "b")
	srv := jwttest.StartJWKSServer(t, jwttest.JWKSOf(t, a))
	p := newTestPolicy(JWTSettings{JWKSURL: srv.URL, Issuers: []string{jwttest.Issuer}, Claims: DefaultJWTClaims()})
	ring, err := NewKeyRing(JWKSOptions{Client: &http.Client{}, Now: clock.Now, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := ring.Bind(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { ring.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	waitFetches := func(n int32) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for srv.Fetches.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d fetches, want %d", srv.Fetches.Load(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFetches(1) // Run fetches a set never fetched at once
	time.Sleep(30 * time.Millisecond)
	if n := srv.Fetches.Load(); n != 1 {
		t.Fatalf("%d fetches before RefreshInterval passed, want 1", n)
	}
	owner := func(k jwttest.Key) error {
		_, err := p.Defaults().OwnerOf(jwttest.Bearer(k.Sign(t, jwttest.ClaimsAt(clock.Now(), "alice"))))
		return err
	}
	if err := owner(a); err != nil {
		t.Fatal(err)
	}
	// The issuer fails for a while: the cached keys keep working.
	srv.Set([]byte("oops"), http.StatusInternalServerError)
	clock.Add(DefaultJWKSRefreshInterval)
	waitFetches(2)
	if err := owner(a); err != nil {
		t.Fatalf("a failed refresh dropped the cached keys: %v", err)
	}
	// It recovers with a rotated set; Run retries after MinRefetchInterval.
	srv.Set(jwttest.JWKSOf(t, b), http.StatusOK)
	clock.Add(DefaultJWKSMinRefetchInterval)
	waitFetches(3)
	deadline := time.Now().Add(5 * time.Second)
	for owner(b) != nil {
		if time.Now().After(deadline) {
			t.Fatal("rotated key not picked up by the periodic refresh")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestJWKSFile: Bind reads the file (so a config reload rereads it), an
// unknown kid rereads it too, and Run sees a changed file.
func TestJWKSFile(t *testing.T) {
	clock := jwttest.NewClock()
	a, b, c := jwttest.NewECKey(t, "a"), jwttest.NewEdKey(t, "b"), jwttest.NewECKey(t, "c")
	path := filepath.Join(t.TempDir(), "jwks.json")
	write := func(keys ...jwttest.Key) {
		t.Helper()
		if err := os.WriteFile(path, jwttest.JWKSOf(t, keys...), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(a)
	settings := JWTSettings{JWKSFile: path, Issuers: []string{jwttest.Issuer}, Claims: DefaultJWTClaims()}
	p, ring := jwtPolicy(t, settings, clock)
	owner := func(p *testPolicy, k jwttest.Key) error {
		_, err := p.Defaults().OwnerOf(jwttest.Bearer(k.Sign(t, jwttest.ClaimsAt(clock.Now(), "alice"))))
		return err
	}
	if err := owner(p, a); err != nil {
		t.Fatal(err)
	}
	// Rotation in the file: an unknown kid rereads it (rate limited).
	write(a, b)
	clock.Add(DefaultJWKSMinRefetchInterval)
	if err := owner(p, b); err != nil {
		t.Fatalf("new kid in the file not picked up: %v", err)
	}
	// A config reload binds a new policy, which reads the file at once.
	write(c)
	p2 := newTestPolicy(settings)
	if err := ring.Bind(t.Context(), p2); err != nil {
		t.Fatal(err)
	}
	if err := owner(p2, c); err != nil {
		t.Fatalf("reload did not reread the file: %v", err)
	}
	if err := owner(p2, a); !errors.Is(err, ErrInvalidCredentials) {
		t.Fatalf("key removed from the file still verifies after the reload: %v", err)
	}
	// Run (here one poll) rereads the file of the policy bound last.
	write(a)
	ring.sets[settings.Source()].refreshIfDue(t.Context())
	if err := owner(p2, a); err != nil {
		t.Fatalf("changed file not reread by the poll: %v", err)
	}
}

func TestParseJWKS(t *testing.T) {
	ec := jwttest.NewECKey(t, "ec")
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := json.Marshal(jose.JSONWebKey{Key: ec.Priv, KeyID: "private", Algorithm: "ES256"})
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := json.Marshal(jose.JSONWebKey{Key: ec.Priv.Public(), KeyID: "enc", Use: "enc"})
	weak, _ := json.Marshal(jose.JSONWebKey{Key: &small.PublicKey, KeyID: "weak"})
	hs, _ := json.Marshal(jose.JSONWebKey{Key: ec.Priv.Public(), KeyID: "hs", Algorithm: "HS256"})
	doc := `{"keys":[` + string(priv) + `,` + string(enc) + `,` + string(weak) + `,` + string(hs) +
		`,{"kty":"oct","kid":"sym","k":"c2VjcmV0"},{"kty":"XYZ","kid":"odd"}]}`
	ks, skipped, err := parseJWKS([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(ks.keys) != 1 || ks.keys[0].kid != "private" {
		t.Fatalf("usable keys %v; want only the public half of the private key", ks.kids())
	}
	if len(skipped) != 5 {
		t.Errorf("skipped %d keys, want 5: %q", len(skipped), skipped)
	}
	if _, err := ks.find("private", "ES256"); err != nil {
		t.Error(err)
	}
	if _, err := ks.find("private", "ES384"); err == nil || errors.Is(err, errNoKey) {
		t.Errorf("ES256 key found for ES384: %v", err)
	}
	for _, bad := range []string{`[]`, `{}`, `{"keys":[]}`, `not json`} {
		if _, _, err := parseJWKS([]byte(bad)); err == nil {
			t.Errorf("parseJWKS(%s) accepted", bad)
		}
	}
}

// TestJWKSFetchFailures: a URL that fails, answers non-200 or oversized
// leaves a verifier refusing tokens, never accepting them.
func TestJWKSFetchFailures(t *testing.T) {
	clock := jwttest.NewClock()
	k := jwttest.NewECKey(t, "k")
	srv := jwttest.StartJWKSServer(t, []byte(`{"keys":[]}`))
	p, _ := jwtPolicy(t, JWTSettings{JWKSURL: srv.URL, Issuers: []string{jwttest.Issuer}, Claims: DefaultJWTClaims()}, clock)
	tok := k.Sign(t, jwttest.ClaimsAt(clock.Now(), "alice"))
	for _, c := range []struct {
		doc    []byte
		status int
	}{
		{[]byte(`{"keys":[]}`), 200},
		{jwttest.JWKSOf(t, k), 404},
		{append(append([]byte(`{"keys":[],"pad":"`), strings.Repeat("x", maxJWKSBytes)...), `"}`...), 200},
	} {
		srv.Set(c.doc, c.status)
		clock.Add(DefaultJWKSMinRefetchInterval)
		if _, err := p.Defaults().OwnerOf(jwttest.Bearer(tok)); !errors.Is(err, ErrInvalidCredentials) {
			t.Errorf("status %d: %v", c.status, err)
		}
	}
	srv.Set(jwttest.JWKSOf(t, k), 200)
	clock.Add(DefaultJWKSMinRefetchInterval)
	if _, err := p.Defaults().OwnerOf(jwttest.Bearer(tok)); err != nil {
		t.Errorf("after recovery: %v", err)
	}
}

// TestJWKSNewKidAfterPeriodicRead: a key published right after a periodic
// read (KeyRing.Run) is taken on its first use; only reads caused by
// unknown kids count against MinRefetchInterval, shared by all callers.
func TestJWKSNewKidAfterPeriodicRead(t *testing.T) {
	clock := jwttest.NewClock()
	old, next := jwttest.NewECKey(t, "2026-01"), jwttest.NewECKey(t, "2026-02")
	srv := jwttest.StartJWKSServer(t, jwttest.JWKSOf(t, old))
	p, ring := jwtPolicy(t, JWTSettings{JWKSURL: srv.URL, Issuers: []string{jwttest.Issuer}, Claims: DefaultJWTClaims()}, clock)
	if err := ring.Unready(); err == nil || !strings.Contains(err.Error(), "route default") || !strings.Contains(err.Error(), "not read yet") {
		t.Fatalf("Unready before any read: %v", err)
	}
	for _, s := range ring.sets {
		s.refreshIfDue(t.Context()) // what Run does at start
	}
	if err := ring.Unready(); err != nil {
		t.Fatalf("Unready after a read: %v", err)
	}
	owner := func(k jwttest.Key) error {
		_, err := p.Defaults().OwnerOf(jwttest.Bearer(k.Sign(t, jwttest.ClaimsAt(clock.Now(), "alice"))))
		return err
	}
	srv.Set(jwttest.JWKSOf(t, old, next), http.StatusOK)
	clock.Add(time.Second)
	if err := owner(next); err != nil {
		t.Fatalf("key published after the periodic read refused on first use: %v", err)
	}
	if n := srv.Fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
	errs := make(chan error, 32)
	for i := range cap(errs) {
		go func() { errs <- owner(jwttest.NewEdKey(t, fmt.Sprintf("bogus-%d", i))) }()
	}
	for range cap(errs) {
		if err := <-errs; !errors.Is(err, ErrInvalidCredentials) {
			t.Errorf("unknown kid: %v", err)
		}
	}
	if n := srv.Fetches.Load(); n != 2 {
		t.Fatalf("%d fetches after a flood inside the interval, want 2", n)
	}
	clock.Add(DefaultJWKSMinRefetchInterval)
	for i := range cap(errs) {
		go func() { errs <- owner(jwttest.NewEdKey(t, fmt.Sprintf("bogus2-%d", i))) }()
	}
	for range cap(errs) {
		<-errs
	}
	if n := srv.Fetches.Load(); n != 3 {
		t.Fatalf("%d fetches after a flood in the next interval, want 3", n)
	}
}

// TestJWKSUnreadyNamesFailure: a URL that cannot be read leaves the ring
// unready, naming the route and the reason.
func TestJWKSUnreadyNamesFailure(t *testing.T) {
	clock := jwttest.NewClock()
	srv := jwttest.StartJWKSServer(t, []byte("oops"))
	srv.Set([]byte("oops"), http.StatusNotFound)
	_, ring := jwtPolicy(t, JWTSettings{JWKSURL: srv.URL + "/jwks", Issuers: []string{jwttest.Issuer}, Claims: DefaultJWTClaims()}, clock)
	for _, s := range ring.sets {
		s.refreshIfDue(t.Context())
	}
	err := ring.Unready()
	if err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), srv.URL+"/jwks") {
		t.Fatalf("Unready: %v", err)
	}
}
