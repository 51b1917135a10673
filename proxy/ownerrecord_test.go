package proxy_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// ownerRecordOf returns the owner record of the defaults route of a
// policy built on baseRoute with its owners from header.
func ownerRecordOf(t *testing.T, header string) *policy.OwnerRecord {
	t.Helper()
	d := baseRoute()
	d.Owner = identity.OwnerSource{Kind: identity.OwnerHeader, Header: header}
	p, err := policy.New(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := p.Defaults().OwnerRecord()
	if rec == nil {
		t.Fatalf("a header:%s route has no owner record", header)
	}
	return rec
}

// ownerStores runs f on the memory store and on a real Valkey; fresh
// gives each harness a store of its own (on one Valkey server).
func ownerStores(t *testing.T, f func(t *testing.T, fresh func(t *testing.T) option)) {
	t.Run("memory", func(t *testing.T) {
		f(t, func(*testing.T) option { return func(*proxy.Options, *policy.Route, *[]policy.Route) {} })
	})
	t.Run("valkey", func(t *testing.T) {
		srv := valkeytest.Start(t)
		f(t, func(t *testing.T) option {
			st, err := valkey.New(t.Context(), valkey.Options{Addrs: []string{srv.Addr()}, KeyPrefix: t.Name() + ":"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return func(o *proxy.Options, _ *policy.Route, _ *[]policy.Route) { o.Store = st }
		})
	})
}

// claimOwnerRecord claims rec as another instance would, with lease.
func claimOwnerRecord(t *testing.T, st store.Store, rec *policy.OwnerRecord, lease time.Duration) {
	t.Helper()
	res, err := st.Claim(t.Context(), store.ClaimParams{Identity: rec.Identity, Fingerprint: rec.Fingerprint, Recipe: rec.Recipe,
		Token: "another-instance", Lease: lease})
	if err != nil || res.State != store.Claimed {
		t.Fatalf("claiming the owner record as another instance: %+v, %v", res, err)
	}
}

// TestOwnerRecordOfAnotherInstanceMidWrite: the owner record is being
// written by another instance (claimed, not completed) when the first
// keyed request comes. The request waits for it and is never admitted
// without a decision: completed with the same source, the request goes
// on; left unfinished by an instance of the same source (it died), it is
// taken over once that lease ends; left unfinished by one of another
// source, the scope is refused with owner-source-conflict, and nothing
// reaches the upstream.
func TestOwnerRecordOfAnotherInstanceMidWrite(t *testing.T) {
	ownerStores(t, func(t *testing.T, fresh func(t *testing.T) option) {
		t.Run("completed", func(t *testing.T) {
			h := newHarness(t, created, fresh(t))
			rec := ownerRecordOf(t, "X-User")
			claimOwnerRecord(t, h.store, rec, 10*time.Second)
			go func() {
				// The other instance's second round trip, late: the request
				// finds the record running (were it already completed, the
				// answer would be the same; no outcome hangs on the delay).
				time.Sleep(200 * time.Millisecond)
				if ok, err := h.store.Complete(context.Background(), rec.Identity, "another-instance", rec.Response()); !ok || err != nil {
					t.Errorf("completing as the other instance: %v, %v", ok, err)
				}
			}()
			if r := h.do("POST", "/v1/orders", "42", "k", "{}"); r.status != http.StatusCreated {
				t.Fatalf("request while another instance writes the same source: %d %s", r.status, r.body)
			}
		})
		t.Run("same source died", func(t *testing.T) {
			h := newHarness(t, created, fresh(t))
			claimOwnerRecord(t, h.store, ownerRecordOf(t, "X-User"), 300*time.Millisecond)
			if r := h.do("POST", "/v1/orders", "42", "k", "{}"); r.status != http.StatusCreated {
				t.Fatalf("request after an instance of the same source died mid-write: %d %s", r.status, r.body)
			}
		})
		t.Run("another source died", func(t *testing.T) {
			h := newHarness(t, created, fresh(t))
			claimOwnerRecord(t, h.store, ownerRecordOf(t, "X-Partner"), 300*time.Millisecond)
			r := h.do("POST", "/v1/orders", "42", "k", "{}")
			if r.status != http.StatusInternalServerError || !strings.Contains(r.body, "owner-source-conflict") {
				t.Fatalf("request after an instance of header:X-Partner died mid-write: %d %s, want 500 owner-source-conflict", r.status, r.body)
			}
			if c := h.up.count("/v1/orders"); c != 0 {
				t.Fatalf("upstream ran %d times, want 0", c)
			}
			if logs := h.logText(); !strings.Contains(logs, "owner source conflict") || !strings.Contains(logs, "header:X-Partner") {
				t.Fatalf("the conflict is not logged with the recorded source:\n%s", logs)
			}
		})
	})
}

// TestOwnerRecordAdmitsAnotherNumberOfJWTClaims: the owner form of jwt
// counts its claims, as OwnerLedger's does
// (TestOwnerLedgerAdmitsAnotherNumberOfJWTClaims): a route moved from
// [sub] to [iss, sub] gets an owner record of its own, while one moved to
// another single claim conflicts with the record of [sub].
func TestOwnerRecordAdmitsAnotherNumberOfJWTClaims(t *testing.T) {
	jwtRecord := func(claims ...string) *policy.OwnerRecord {
		d := baseRoute()
		d.Owner = identity.OwnerSource{Kind: identity.OwnerJWT}
		d.JWT = &identity.JWTSettings{Claims: claims, Issuers: []string{"https://issuer.example"}, JWKSURL: "https://issuer.example/jwks"}
		p, err := policy.New(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p.Defaults().OwnerRecord()
	}
	sub, issSub, tenant := jwtRecord("sub"), jwtRecord("iss", "sub"), jwtRecord("tenant")
	if sub.Identity == issSub.Identity {
		t.Fatalf("jwt [sub] and [iss, sub] share the owner record %+v: a second claim would be refused", sub.Identity)
	}
	if sub.Identity != tenant.Identity || sub.Fingerprint == tenant.Fingerprint {
		t.Fatalf("jwt [sub] and [tenant]: records %+v %q and %+v %q, want one identity with other fingerprints",
			sub.Identity, sub.Fingerprint, tenant.Identity, tenant.Fingerprint)
	}
}

// TestOwnerRecordCheckedAgainAfterAStoreDisruption: a Valkey that lost
// its data (restarted without persistence; FLUSHALL here) lost the owner
// record too, and an instance with header:X-Partner started since wrote
// its own. The instance with header:X-User that had checked the lost
// record hears of the disruption (NoteStoreFailure, as the store's
// subscription reports it) and checks again: its scope is refused, so
// user 42 and partner 42 never write "h:42" records side by side and
// partner 42 is never answered user 42's response.
func TestOwnerRecordCheckedAgainAfterAStoreDisruption(t *testing.T) {
	srv := valkeytest.Start(t)
	st, err := valkey.New(t.Context(), valkey.Options{Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	up := newUpstream(t, created)
	target, _ := url.Parse(up.URL)
	instance := func(header string) (*proxy.Proxy, string) {
		d := baseRoute()
		d.Owner = identity.OwnerSource{Kind: identity.OwnerHeader, Header: header}
		pol, err := policy.New(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		p, err := proxy.New(proxy.Options{Upstream: target, Store: st, Timeout: 5 * time.Second, Policy: func() *policy.Policy { return pol }})
		if err != nil {
			t.Fatal(err)
		}
		front := httptest.NewServer(p)
		t.Cleanup(front.Close)
		return p, front.URL
	}
	send := func(url, header, value, key string) (int, string, bool) {
		t.Helper()
		req, _ := http.NewRequest("POST", url+"/v1/orders", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(header, value)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get(proxy.ReplayedHeader) == "true"
	}

	users, usersURL := instance("X-User")
	if s, b, _ := send(usersURL, "X-User", "42", "k1"); s != http.StatusCreated {
		t.Fatalf("user 42 before the loss: %d %s", s, b)
	}
	if _, err := srv.CLI("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	_, partnersURL := instance("X-Partner")
	if s, b, _ := send(partnersURL, "X-Partner", "7", "k2"); s != http.StatusCreated {
		t.Fatalf("partner 7 on the instance started after the loss: %d %s", s, b)
	}
	users.NoteStoreFailure()
	if s, b, _ := send(usersURL, "X-User", "42", "k3"); s != http.StatusInternalServerError || !strings.Contains(b, "owner-source-conflict") {
		t.Fatalf("user 42 after the disruption, partner's owner record in the store: %d %s, want 500 owner-source-conflict", s, b)
	}
	if s, b, replayed := send(partnersURL, "X-Partner", "42", "k3"); replayed || s != http.StatusCreated {
		t.Fatalf("partner 42: %d replayed=%v %s, want the upstream's 201", s, replayed, b)
	}
	if c := up.count("/v1/orders"); c != 3 {
		t.Fatalf("upstream ran %d times, want 3 (k1, k2, partner 42's k3)", c)
	}
}
