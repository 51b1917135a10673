package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyAuthInsideABlockIsNotBypassed: a site whose handle block
// authenticates with forward_auth (copy_headers X-User, the owner's
// field) and proxies, below a top-level idempotency: the Caddyfile an API
// with per-path authentication has. Ordered before the block,
// idempotency would read the owner before the block's authentication
// sets it, and answer Mallory, who sends X-User: alice with her own token
// and Alice's key, Alice's record before forward_auth runs; ordered after
// it, it would never see the block's requests. Caddy refuses the site
// instead, saying to put idempotency inside the block, after the
// authentication.
func TestCaddyAuthInsideABlockIsNotBypassed(t *testing.T) {
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-User", "alice")
	}))
	t.Cleanup(auth.Close)
	up := startUpstream(t)
	_, err := tryRunCaddy(t, caddySite{
		After: fmt.Sprintf("handle /orders* {\n\t\tforward_auth %s {\n\t\t\turi /check\n\t\t\tcopy_headers X-User\n\t\t}\n\t\treverse_proxy %s\n\t}",
			strings.TrimPrefix(auth.URL, "http://"), strings.TrimPrefix(up.URL, "http://")),
	})
	if err == nil || !strings.Contains(err.Error(), "put idempotency inside the block (after any authentication there)") {
		t.Fatalf("Caddy ran (or refused without saying where to put it) a top-level idempotency above a block that authenticates: %v", err)
	}
}

// TestCaddyOrderOptionBeforeAuthRefused: the global option "order" that
// puts idempotency before a block (the way out the refusal of a
// top-level idempotency beside blocks offers) or before the site's
// authentication runs it before an authentication written in that block,
// or at the top: idempotency would read X-User before forward_auth or
// basic_auth set it, and a client naming another's owner, with no
// credentials at all, got the other's record. Caddy refuses those sites,
// and a route block with idempotency written before its authentication;
// with the authentication at the top and idempotency ordered before the
// blocks, the site runs.
func TestCaddyOrderOptionBeforeAuthRefused(t *testing.T) {
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer alice-token" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("X-User", "alice")
	}))
	t.Cleanup(auth.Close)
	up := startUpstream(t)
	vk := valkeytest.Start(t)
	authHost, upHost := strings.TrimPrefix(auth.URL, "http://"), strings.TrimPrefix(up.URL, "http://")
	forwardAuth := fmt.Sprintf("forward_auth %s {\n\t\turi /check\n\t\tcopy_headers X-User\n\t}", authHost)
	// Bob's password is hiccup (Caddy's basic_auth documentation).
	basicAuth := "basic_auth {\n\t\tBob $2a$14$Zkx19XLiW6VYouLHR5NmfOFU0z2GTNmpkT/5qqR7hx4IjWJPDhjvG\n\t}"
	for _, tc := range []struct {
		name, global, after, want string
	}{
		{"forward_auth in a handle block", "order idempotency before handle",
			fmt.Sprintf("handle /orders* {\n\t%s\n\treverse_proxy %s\n\t}", forwardAuth, upHost), "the forward_auth"},
		{"basic_auth in a route block", "order idempotency before route",
			fmt.Sprintf("route /orders* {\n\t%s\n\treverse_proxy %s\n\t}", basicAuth, upHost), "the basic_auth"},
		{"forward_auth at the top", "order idempotency first",
			fmt.Sprintf("%s\n\treverse_proxy %s", forwardAuth, upHost), "the forward_auth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustRefuse(t, caddySite{Global: tc.global, Idempotency: "store_addrs " + vk.Addr(), After: tc.after},
				"idempotency ordered before its authentication", "the authentication and the way out", tc.want, "put idempotency after the authentication")
		})
	}
	// Nested: idempotency in a block, an authentication after that block
	// at an outer level (no order option, or one that moves a block).
	idem := fmt.Sprintf("idempotency {\n\t\tconfig $CONFIG\n\t\tstore_addrs %s\n\t}", vk.Addr())
	for _, tc := range []struct {
		name, global, snippets, directive, want string
	}{
		{"handle, then a route that authenticates", "",
			"", fmt.Sprintf("handle /orders* {\n\t%s\n\t}\n\troute {\n\t%s\n\treverse_proxy %s\n\t}", idem, forwardAuth, upHost),
			"idempotency inside the handle"},
		{"route holding a handle, authentication after it", "",
			"", fmt.Sprintf("route {\n\thandle /orders* {\n\t%s\n\t}\n\t%s\n\treverse_proxy %s\n\t}", idem, forwardAuth, upHost),
			"idempotency inside the handle"},
		{"route ordered before forward_auth", "order route before forward_auth",
			"", fmt.Sprintf("route {\n\t%s\n\t}\n\t%s\n\treverse_proxy %s", idem, forwardAuth, upHost),
			"idempotency inside the route"},
		// One snippet imported twice: the copy placed after the
		// authentication must not vouch for the one placed before it.
		{"snippet imported twice", "",
			"(idem) {\n\t" + strings.Replace(idem, "config $CONFIG", "config $CONFIG\n\t\tname {args[0]}", 1) + "\n}\n",
			fmt.Sprintf("handle /a* {\n\t%s\n\timport idem a\n\treverse_proxy %s\n\t}\n\thandle /orders* {\n\troute {\n\timport idem orders\n\t%s\n\treverse_proxy %s\n\t}\n\t}",
				forwardAuth, upHost, forwardAuth, upHost),
			"is written before the forward_auth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustRefuse(t, caddySite{Global: tc.global, Snippets: tc.snippets, Directive: tc.directive},
				"idempotency nested before an authentication", "where idempotency is and the authentication", tc.want, "forward_auth")
		})
	}
	t.Run("route written before its authentication", func(t *testing.T) {
		_, err := tryRunCaddy(t, caddySite{Directive: fmt.Sprintf("route {\n\t\tidempotency {\n\t\t\tconfig $CONFIG\n\t\t\tstore_addrs %s\n\t\t}\n\t\t%s\n\t\treverse_proxy %s\n\t}", vk.Addr(), forwardAuth, upHost)})
		if err == nil || !strings.Contains(err.Error(), "is written before the forward_auth") {
			t.Fatalf("Caddy ran (or refused without saying why) idempotency written before forward_auth in a route: %v", err)
		}
	})
	t.Run("authentication at the top, ordered before the blocks", func(t *testing.T) {
		c := runCaddy(t, caddySite{Global: "order idempotency before handle", Idempotency: "store_addrs " + vk.Addr(),
			After: fmt.Sprintf("%s\n\thandle /orders* {\n\t\treverse_proxy %s\n\t}", forwardAuth, upHost)})
		forged := postHeader(t, c.URL, http.Header{"X-User": {"alice"}, "Idempotency-Key": {"k-1"}}, `{"amount":1}`)
		if forged.Status != http.StatusUnauthorized {
			t.Fatalf("a forged X-User without credentials: %d %s, want forward_auth's 401", forged.Status, forged.Body)
		}
		h := http.Header{"Authorization": {"Bearer alice-token"}, "Idempotency-Key": {"k-1"}}
		first := postHeader(t, c.URL, h, `{"amount":1}`)
		retry := postHeader(t, c.URL, h, `{"amount":1}`)
		if first.Status != http.StatusCreated || up.execs.Load() != 1 {
			t.Fatalf("first %d, upstream ran %d times; want 201 once\n%s", first.Status, up.execs.Load(), c.out.String())
		}
		sameResponse(t, first, retry)
	})
}

// mustRefuse starts Caddy with site and fails unless Caddy refuses it
// with an error holding every one of wants. what says what a site Caddy
// ran would do (a forged X-User is then sent, and its answer shown);
// naming says what the error must name.
func mustRefuse(t *testing.T, site caddySite, what, naming string, wants ...string) {
	t.Helper()
	c, err := tryRunCaddy(t, site)
	if err == nil {
		r := post(t, c.URL, "alice", "k-forged", `{"amount":1}`)
		t.Fatalf("Caddy ran %s: a forged X-User got %d", what, r.Status)
	}
	for _, want := range wants {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("refused without naming %s:\n%v", naming, err)
		}
	}
}

// postHeader sends POST url/orders with the fields h and reads the whole
// answer.
func postHeader(t *testing.T, url string, h http.Header, body string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, b, err := gatetest.Post(ctx, nil, url+"/orders", "", h, body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}

// TestReadmeForwardAuthOwner runs caddy/README.md's YAML, whose owner is
// the X-User field forward_auth sets, behind forward_auth as its Caddyfile
// shows: Alice's retry is replayed, while Mallory, sending X-User: alice
// with her own token and Alice's key, is the owner the authentication
// vouched for and never gets Alice's record, and a request without
// credentials is refused before idempotency.
func TestReadmeForwardAuthOwner(t *testing.T) {
	text, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, yaml, ok := strings.Cut(string(text), "```yaml\n")
	yaml, _, ok2 := strings.Cut(yaml, "```")
	if !ok || !ok2 || !strings.Contains(yaml, "owner: header:X-User") {
		t.Fatalf("caddy/README.md: no yaml block with owner header:X-User")
	}
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, ok := map[string]string{"Bearer alice-token": "alice", "Bearer mallory-token": "mallory"}[r.Header.Get("Authorization")]
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("X-User", user)
	}))
	t.Cleanup(auth.Close)
	up := startUpstream(t)
	vk := valkeytest.Start(t)
	c := runCaddy(t, caddySite{
		YAML: strings.Replace(yaml, "127.0.0.1:6379", vk.Addr(), 1),
		After: fmt.Sprintf("forward_auth %s {\n\t\turi /check\n\t\tcopy_headers X-User\n\t}\n\treverse_proxy %s",
			strings.TrimPrefix(auth.URL, "http://"), strings.TrimPrefix(up.URL, "http://")),
	})
	as := func(token string) http.Header {
		h := http.Header{"X-User": {"alice"}, "Idempotency-Key": {"order-1"}}
		if token != "" {
			h.Set("Authorization", "Bearer "+token)
		}
		return h
	}
	first := postHeader(t, c.URL, as("alice-token"), `{"amount":1}`)
	if first.Status != http.StatusCreated {
		t.Fatalf("alice: %d %s\n%s", first.Status, first.Body, c.out.String())
	}
	sameResponse(t, first, postHeader(t, c.URL, as("alice-token"), `{"amount":1}`))
	if nobody := postHeader(t, c.URL, as(""), `{"amount":1}`); nobody.Status != http.StatusUnauthorized {
		t.Fatalf("X-User: alice without credentials: %d %s, want forward_auth's 401", nobody.Status, nobody.Body)
	}
	mallory := postHeader(t, c.URL, as("mallory-token"), `{"amount":1}`)
	if mallory.replayed() || mallory.Body == first.Body {
		t.Fatalf("mallory naming alice got alice's record: %d %s", mallory.Status, mallory.Body)
	}
	if n := up.execs.Load(); n != 2 {
		t.Fatalf("upstream ran %d times, want 2 (alice once, mallory once as herself)", n)
	}
}

// TestCaddyOwnerFieldSetAfterIdempotencyRefused: a request_header that
// sets the field the owner is read from (owner: header:X-User) is an
// authentication for the directive's place: one that runs after
// idempotency (nested in a block after it, put after it by the global
// option order, or written after it in a route) would leave idempotency
// reading the client's own X-User, so that a client naming another's
// owner gets that owner's records. Caddy refuses those sites; one that
// sets the field before idempotency, or sets another field after it,
// runs, and its owner is the one request_header set.
func TestCaddyOwnerFieldSetAfterIdempotencyRefused(t *testing.T) {
	up := startUpstream(t)
	vk := valkeytest.Start(t)
	upHost := strings.TrimPrefix(up.URL, "http://")
	setOwner := "request_header X-User {http.request.header.X-Auth-User}"
	for _, tc := range []struct {
		name, global, after, directive, want string
	}{
		{"in a handle block ordered after idempotency", "order idempotency before handle", fmt.Sprintf("handle /orders* {\n\t%s\n\treverse_proxy %s\n\t}", setOwner, upHost), "",
			"idempotency comes before the request_header"},
		{"at the top, ordered after idempotency, added in lower case", "order idempotency first", fmt.Sprintf("request_header +x-user {http.request.header.X-Auth-User}\n\treverse_proxy %s", upHost), "",
			"idempotency comes before the request_header"},
		{"with a matcher, ordered after idempotency", "order idempotency first", fmt.Sprintf("request_header /orders* X-User {http.request.header.X-Auth-User}\n\treverse_proxy %s", upHost), "",
			"idempotency comes before the request_header"},
		{"written after idempotency in a route", "", "",
			fmt.Sprintf("route {\n\t\tidempotency {\n\t\t\tconfig $CONFIG\n\t\t\tstore_addrs %s\n\t\t}\n\t\t%s\n\t\treverse_proxy %s\n\t}", vk.Addr(), setOwner, upHost),
			"is written before the request_header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			site := caddySite{Global: tc.global, After: tc.after, Directive: tc.directive}
			if tc.directive == "" {
				site.Idempotency = "store_addrs " + vk.Addr()
			}
			mustRefuse(t, site, "idempotency before the request_header that sets its owner's field",
				"the request_header and the way out", tc.want, "put idempotency after the request_header")
		})
	}
	t.Run("another field after idempotency", func(t *testing.T) {
		runCaddy(t, caddySite{Global: "order idempotency before handle", Idempotency: "store_addrs " + vk.Addr(),
			After: fmt.Sprintf("handle /orders* {\n\t\trequest_header X-Request-Id 1\n\t\trequest_header -X-User\n\t\treverse_proxy %s\n\t}", upHost)})
	})
	t.Run("set before idempotency", func(t *testing.T) {
		c := runCaddy(t, caddySite{Idempotency: "store_addrs " + vk.Addr(), After: fmt.Sprintf("%s\n\treverse_proxy %s", setOwner, upHost)})
		alice := http.Header{"X-Auth-User": {"alice"}, "X-User": {"mallory"}, "Idempotency-Key": {"k-set"}}
		first := postHeader(t, c.URL, alice, `{"amount":1}`)
		if first.Status != http.StatusCreated || up.execs.Load() != 1 {
			t.Fatalf("first %d, upstream ran %d times; want 201 once\n%s", first.Status, up.execs.Load(), c.out.String())
		}
		sameResponse(t, first, postHeader(t, c.URL, alice, `{"amount":1}`))
		// Bob naming alice in X-User is bob: request_header set the
		// field before idempotency read it.
		bob := postHeader(t, c.URL, http.Header{"X-Auth-User": {"bob"}, "X-User": {"alice"}, "Idempotency-Key": {"k-set"}}, `{"amount":1}`)
		if bob.Status != http.StatusCreated || bob.Header.Get("Idempotent-Replayed") != "" || up.execs.Load() != 2 {
			t.Fatalf("bob naming alice: %d (replayed %q), upstream ran %d times; want his own 201, a second execution",
				bob.Status, bob.Header.Get("Idempotent-Replayed"), up.execs.Load())
		}
	})
}
