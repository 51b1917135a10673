package policy

import (
	"reflect"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/policy/fingerprint"
)

// TestDefaultRouteRecipe: the defaults route fingerprints as
// docs/protocol.md says a route without fingerprint settings does.
func TestDefaultRouteRecipe(t *testing.T) {
	if got := DefaultRoute().Fingerprint.Recipe(); got != "b=raw&h=content-type&q=1&v=hs1" {
		t.Fatalf("default recipe = %q; docs/protocol.md gives b=raw&h=content-type&q=1&v=hs1", got)
	}
}

func TestNewValidatesExclude(t *testing.T) {
	d := DefaultRoute()
	d.Fingerprint.Exclude = []string{"/ok"}
	_, err := New(d, nil)
	if err == nil || !strings.Contains(err.Error(), "defaults.fingerprint.exclude") || !strings.Contains(err.Error(), "fingerprint.body: json") {
		t.Fatalf("exclude with body raw: %v", err)
	}
	d.Fingerprint.Body = fingerprint.BodyJSON
	d.Fingerprint.Exclude = []string{"client_ts", "/b", "/a", "/b"}
	_, err = New(d, nil)
	if err == nil || !strings.Contains(err.Error(), `defaults.fingerprint.exclude: invalid JSON pointer: "client_ts"`) {
		t.Fatalf("bad pointer: %v", err)
	}
	d.Fingerprint.Exclude = []string{"/b", "/a", "/b"}
	p, err := New(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Defaults().Fingerprint.Exclude; !reflect.DeepEqual(got, []string{"/a", "/b"}) {
		t.Fatalf("Exclude = %q, want sorted and deduplicated", got)
	}
	if got := p.Defaults().Recipe(); !strings.Contains(got, "x=%2Fa&x=%2Fb") {
		t.Fatalf("recipe %q lacks the exclusions", got)
	}
}
