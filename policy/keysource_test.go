package policy

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/policy/identity"
)

func TestBodyKey(t *testing.T) {
	for _, c := range []struct{ body, ptr, want string }{
		{`{"id":"evt_1NsQ"}`, "/id", "evt_1NsQ"},
		{`{"id":42}`, "/id", "42"},
		{`{"id":-7}`, "/id", "-7"},
		{`{"data":{"object":{"id":"pi_3"}}}`, "/data/object/id", "pi_3"},
		{`{"events":[{"id":"a"},{"id":"b"}]}`, "/events/1/id", "b"},
		{`{"id":"with spaces ok"}`, "/id", "with spaces ok"},
		{`{"a/b":"x"}`, "/a~1b", "x"},
	} {
		got, err := identity.BodyKey([]byte(c.body), c.ptr)
		if err != nil || got != c.want {
			t.Errorf("identity.BodyKey(%s, %s) = %q, %v; want %q", c.body, c.ptr, got, err, c.want)
		}
	}
	for _, c := range []struct{ body, ptr string }{
		{``, "/id"}, {`{}`, "/id"}, {`{"id":null}`, "/id"}, {`{"a":1}`, "/a/b"}, {`{"e":[]}`, "/e/0"}, {`{"e":[1]}`, "/e/-"},
	} {
		if _, err := identity.BodyKey([]byte(c.body), c.ptr); !errors.Is(err, identity.ErrKeyMissing) {
			t.Errorf("identity.BodyKey(%s, %s) = %v, want identity.ErrKeyMissing", c.body, c.ptr, err)
		}
	}
	for _, c := range []struct{ body, ptr string }{
		{`not json`, "/id"}, {`{"id":1}{"id":2}`, "/id"}, {`{"id":""}`, "/id"}, {`{"id":"   "}`, "/id"},
		{`{"id":1.5}`, "/id"}, {`{"id":1e3}`, "/id"}, {`{"id":true}`, "/id"}, {`{"id":{"x":1}}`, "/id"},
		{`{"id":"caf\u00e9"}`, "/id"}, {`{"id":"a\nb"}`, "/id"}, {`{"id":"` + strings.Repeat("x", 256) + `"}`, "/id"},
		{`{"id":1}`, "id"},
	} {
		if _, err := identity.BodyKey([]byte(c.body), c.ptr); !errors.Is(err, identity.ErrKeyInvalid) {
			t.Errorf("identity.BodyKey(%s, %s) = %v, want identity.ErrKeyInvalid", c.body, c.ptr, err)
		}
	}
}

func TestRouteKeyOf(t *testing.T) {
	d := DefaultRoute()
	gh := DefaultRoute()
	gh.Name, gh.Match, gh.Header, gh.Scope = "github", "POST /hooks/github", "X-GitHub-Delivery", "github"
	gh.Owner, gh.AllowGlobalKeys = identity.OwnerSource{Kind: identity.OwnerNone}, true
	stripe := gh
	stripe.Name, stripe.Match, stripe.Scope = "stripe", "POST /hooks/stripe", "stripe"
	stripe.Key = identity.KeySource{From: identity.KeyFromBody, Pointer: "/id"}
	p, err := New(d, []Route{gh, stripe})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/hooks/github", strings.NewReader(""))
	req.Header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	if k, err := p.Match(req).KeyOf(req, nil); err != nil || k != "72d3162e-cc78-11e3-81ab-4c9367dc0958" {
		t.Errorf("header key = %q, %v", k, err)
	}
	req = httptest.NewRequest("POST", "/hooks/stripe", strings.NewReader(""))
	req.Header.Set("Idempotency-Key", "ignored")
	rt := p.Match(req)
	if k, err := rt.KeyOf(req, []byte(`{"id":"evt_1","type":"charge.succeeded"}`)); err != nil || k != "evt_1" {
		t.Errorf("body key = %q, %v", k, err)
	}
	if rt.KeyName() != "the JSON body member /id" || p.Defaults().KeyName() != "the Idempotency-Key field" {
		t.Errorf("KeyName = %q, %q", rt.KeyName(), p.Defaults().KeyName())
	}
	if p.Defaults().Key.From != identity.KeyFromHeader {
		t.Errorf("default key source = %q, want header", p.Defaults().Key.From)
	}
}

func TestNewValidatesKeySource(t *testing.T) {
	for _, c := range []struct {
		key  identity.KeySource
		says string
	}{
		{identity.KeySource{From: identity.KeyFromBody}, "defaults.key.pointer: is required"},
		{identity.KeySource{From: identity.KeyFromBody, Pointer: "id"}, `defaults.key.pointer: invalid JSON pointer: "id"`},
		{identity.KeySource{From: identity.KeyFromHeader, Pointer: "/id"}, "defaults.key.pointer: applies only with key.from: body"},
		{identity.KeySource{From: "query"}, `defaults.key.from: "query" must be header or body`},
	} {
		d := DefaultRoute()
		d.Key = c.key
		if _, err := New(d, nil); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("key %+v: %v, want %q", c.key, err, c.says)
		}
	}
}
