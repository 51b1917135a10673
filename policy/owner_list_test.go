package policy

import (
	"errors"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/policy/identity"
)

func TestParseOwnerSources(t *testing.T) {
	one, err := identity.ParseOwnerSources([]string{" authorization "})
	if err != nil || !reflect.DeepEqual(one, identity.OwnerSource{Kind: identity.OwnerAuthorization}) {
		t.Fatalf("a list of one = %+v, %v; want that source, so its owners are those of owner: authorization", one, err)
	}
	two, err := identity.ParseOwnerSources([]string{"authorization", "header:stripe-account"})
	want := identity.OwnerSource{Kind: identity.OwnerList, Parts: []identity.OwnerSource{{Kind: identity.OwnerAuthorization}, {Kind: identity.OwnerHeader, Header: "Stripe-Account"}}}
	if err != nil || !reflect.DeepEqual(two, want) {
		t.Fatalf("identity.ParseOwnerSources = %+v, %v; want %+v", two, err, want)
	}
	if got := two.String(); got != "[authorization, header:Stripe-Account]" {
		t.Errorf("String() = %q", got)
	}
	if !two.Uses(identity.OwnerHeader) || two.Uses(identity.OwnerJWT) {
		t.Errorf("Uses: header %v jwt %v", two.Uses(identity.OwnerHeader), two.Uses(identity.OwnerJWT))
	}
	for _, bad := range [][]string{{}, {"authorization", "none"}, {"authorization", "authorization"},
		{"header:X-A", "header:x-a"}, {"authorization", "ip"}} {
		if got, err := identity.ParseOwnerSources(bad); err == nil {
			t.Errorf("identity.ParseOwnerSources(%q) = %+v; want an error", bad, got)
		}
	}
}

// TestListOwner: an owner made of an Authorization credential and an
// account header (a platform key acting for connected accounts, as Stripe's
// Stripe-Account) is one owner per account; every part must be present;
// the join is unambiguous whatever the header values hold.
func TestListOwner(t *testing.T) {
	src, err := identity.ParseOwnerSources([]string{"authorization", "header:Stripe-Account"})
	if err != nil {
		t.Fatal(err)
	}
	r := &Route{Name: "charges", Owner: src}
	owner := func(auth, account string) (string, error) {
		req := httptest.NewRequest("POST", "/v1/charges", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if account != "" {
			req.Header.Set("Stripe-Account", account)
		}
		return r.OwnerOf(req)
	}
	a, errA := owner("Bearer sk_platform", "acct_A")
	b, errB := owner("Bearer sk_platform", "acct_B")
	if errA != nil || errB != nil || a == b {
		t.Fatalf("accounts A and B under one credential: %q %v, %q %v; want two owners", a, errA, b, errB)
	}
	want := `m:["` + identity.AuthorizationOwner("Bearer sk_platform") + `","h:acct_A"]`
	if a != want {
		t.Errorf("owner = %s, want %s", a, want)
	}
	if again, _ := owner("Bearer sk_platform", "acct_A"); again != a {
		t.Error("the same credential and account is another owner")
	}
	if _, err := owner("Bearer sk_platform", ""); !errors.Is(err, identity.ErrOwnerMissing) || !strings.Contains(err.Error(), "Stripe-Account") {
		t.Errorf("without the account header: %v; want identity.ErrOwnerMissing naming the part", err)
	}
	if _, err := owner("", "acct_A"); !errors.Is(err, identity.ErrOwnerMissing) {
		t.Errorf("without Authorization: %v; want identity.ErrOwnerMissing", err)
	}
	// Values that a naive join ("," or ":") would confuse stay apart.
	x, _ := identity.ListOwner([]string{"h:a,b", "h:c"})
	y, _ := identity.ListOwner([]string{"h:a", "b,h:c"})
	if x == y {
		t.Errorf("ambiguous join: %s", x)
	}
	// The admin API's owner_value derives the same owner.
	if got, err := r.OwnerFromValue(`["Bearer sk_platform","acct_A"]`); err != nil || got != a {
		t.Errorf("OwnerFromValue = %q, %v; want %q", got, err, a)
	}
	if _, err := r.OwnerFromValue(`["Bearer sk_platform"]`); err == nil {
		t.Error("owner_value with too few values accepted")
	}
	if !r.HasStoredOwnerForm(a) || r.HasStoredOwnerForm("h:acct_A") {
		t.Error("HasStoredOwnerForm does not tell the list form apart")
	}
}

// TestListOwnerKeepsNonUTF8HeaderValuesApart: an owner header may carry
// obs-text (RFC 9110 section 5.5: bytes 0x80-0xFF), which net/http accepts.
// A single header:NAME owner keeps those bytes, so "acct_\xff" and
// "acct_\xfe" are two owners; in an owner list they must stay two owners
// too. encoding/json replaces each invalid UTF-8 byte with U+FFFD, so a
// JSON join of the raw parts made both "h:acct_\ufffd", and one account's
// stored response replayed to the other under the shared credential.
func TestListOwnerKeepsNonUTF8HeaderValuesApart(t *testing.T) {
	src, err := identity.ParseOwnerSources([]string{"authorization", "header:Stripe-Account"})
	if err != nil {
		t.Fatal(err)
	}
	r := &Route{Name: "charges", Owner: src}
	owner := func(account string) string {
		req := httptest.NewRequest("POST", "/v1/charges", nil)
		req.Header.Set("Authorization", "Bearer sk_platform")
		req.Header["Stripe-Account"] = []string{account}
		o, err := r.OwnerOf(req)
		if err != nil {
			t.Fatalf("OwnerOf(%q): %v", account, err)
		}
		return o
	}
	values := []string{"acct_\xff", "acct_\xfe", "acct_\ufffd", "acct_\xef\xbf\xbd\xff"}
	seen := map[string]string{}
	for _, v := range values {
		o := owner(v)
		if prev, dup := seen[o]; dup {
			t.Errorf("accounts %q and %q under one credential are one owner %q", prev, v, o)
		}
		seen[o] = v
		if !r.HasStoredOwnerForm(o) {
			t.Errorf("owner %q of %q lacks the list form", o, v)
		}
	}
	// Valid UTF-8 parts keep the owner they had, so records stored before
	// still match.
	if got, want := owner("acct_A"), `m:["`+identity.AuthorizationOwner("Bearer sk_platform")+`","h:acct_A"]`; got != want {
		t.Errorf("owner = %s, want %s (unchanged for UTF-8 values)", got, want)
	}
}
