package e2e

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// postAccount sends a keyed POST the way a platform's client library does
// for a connected account: one credential, the account in Stripe-Account
// (and in X-User, which the test upstream counts by).
func postAccount(t *testing.T, u, auth, account, key, body string) Answer {
	t.Helper()
	a := postHeaders(20*time.Second, u, "", body, http.Header{"Authorization": {auth}, "Stripe-Account": {account},
		"X-User": {account}, "Idempotency-Key": {key}})
	if a.Err != nil {
		t.Fatalf("POST %s: %v", u, a.Err)
	}
	return a
}

// startAccountsGate starts a gate on a real Valkey whose route POST
// /v1/customers takes the owner from the credential and the account
// header, as a platform's API does, in front of a counting upstream.
func startAccountsGate(t *testing.T) (*Upstream, *Gate) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	routes := "  - name: customers\n    match: \"POST /v1/customers\"\n    owner: [authorization, \"header:Stripe-Account\"]\n"
	return up, startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken, Routes: routes})
}

// TestOwnerListPlatformAccounts: with owner: authorization, one platform
// credential acting for accounts A and B sent the same key and parameters
// for A and then for B, and B was replayed A's customer (one execution:
// another principal's response). An owner made of the credential and the
// account header makes each account its own owner: A and B each run once
// and each retry replays its own response; the admin API finds each
// account's record by its raw values.
func TestOwnerListPlatformAccounts(t *testing.T) {
	up, g := startAccountsGate(t)
	u := g.URL + "/v1/customers"
	const auth, body = "Bearer sk_platform", "email=jo%40example.com"

	a := postAccount(t, u, auth, "acct_A", "cus-1", body)
	b := postAccount(t, u, auth, "acct_B", "cus-1", body)
	if a.Status != 201 || a.replayed() || b.Status != 201 || b.replayed() || string(a.Body) == string(b.Body) {
		t.Fatalf("accounts A and B with one key: A %v, B %v; want two executions with their own responses", a, b)
	}
	for _, c := range []struct {
		account string
		first   Answer
	}{{"acct_A", a}, {"acct_B", b}} {
		r := postAccount(t, u, auth, c.account, "cus-1", body)
		if r.Status != 201 || !r.replayed() || string(r.Body) != string(c.first.Body) {
			t.Errorf("retry for %s: %v, want the replay of %s", c.account, r, c.first.Body)
		}
		if n := up.Calls(c.account, "cus-1"); n != 1 {
			t.Errorf("upstream ran %s's call %d times, want 1", c.account, n)
		}
	}
	// Without the account header there is no owner: refused, not run.
	req, _ := http.NewRequest("POST", u, strings.NewReader(body))
	req.Header.Set("Authorization", auth)
	req.Header.Set("Idempotency-Key", "cus-2")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 400 {
		t.Errorf("without Stripe-Account: %v %v, want 400 missing-owner", resp, err)
	} else {
		resp.Body.Close()
	}
	if up.Total() != 2 {
		t.Errorf("upstream ran %d requests, want 2", up.Total())
	}
	q := url.Values{"route": {"customers"}, "key": {"cus-1"}, "owner_value": {`["Bearer sk_platform","acct_B"]`}}
	if r := adminDo(t, "GET", g.AdminURL+"/admin/records?"+q.Encode(), adminToken); r.Status != 200 || !strings.Contains(string(r.Body), `"owner":"m:[`) {
		t.Errorf("admin lookup by owner_value: %d %s", r.Status, r.Body)
	}
}

// TestSecurityOwnerListNonUTF8AccountsAreTwoOwners: header values may carry
// obs-text (bytes 0x80-0xFF, RFC 9110 section 5.5), which net/http sends
// and accepts. Accounts "acct_\xff" and "acct_\xfe" under one credential
// are two principals, as they are under owner: header:Stripe-Account
// alone; the JSON join of the owner list made both "acct_\ufffd", and B
// was replayed A's customer without reaching the upstream.
func TestSecurityOwnerListNonUTF8AccountsAreTwoOwners(t *testing.T) {
	up, g := startAccountsGate(t)
	u := g.URL + "/v1/customers"
	const auth, body = "Bearer sk_platform", "email=jo%40example.com"

	a := postAccount(t, u, auth, "acct_\xff", "cus-1", body)
	b := postAccount(t, u, auth, "acct_\xfe", "cus-1", body)
	if a.Status != 201 || a.replayed() || b.Status != 201 || b.replayed() || string(a.Body) == string(b.Body) {
		t.Fatalf("accounts \\xff and \\xfe with one key: A %v, B %v; want two executions with their own responses", a, b)
	}
	if up.Total() != 2 {
		t.Errorf("upstream ran %d requests, want 2", up.Total())
	}
}
