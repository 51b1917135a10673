package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestRestartKeys: every non-policy key a reload cannot apply is named by
// its key path; policy changes are not.
func TestRestartKeys(t *testing.T) {
	old, err := Parse([]byte(base+"routes: [{name: a, match: /a}]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	next, err := Parse([]byte("upstream: {url: 'http://127.0.0.1:3001', pass_host: true}\nlisten: ':9000'\nstore: {valkey: {acks: {aof_local: true}}}\n"+
		"admin: {token: s3cret}\nserver: {trusted_proxies: ['10.0.0.0/8']}\nlog: {access: false}\nroutes: [{name: b, match: /b, lease: 3s}]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := RestartKeys(old, next)
	want := []string{"admin.token", "listen", "log.access", "server.trusted_proxies", "store.valkey.acks.aof_local", "upstream.pass_host", "upstream.url"}
	if !slices.Equal(got, want) {
		t.Errorf("RestartKeys = %v, want %v", got, want)
	}
	if got := RestartKeys(old, old); len(got) != 0 {
		t.Errorf("no change: %v", got)
	}
	// Every leaf of Config maps to a key of the schema, so a field added
	// later is named by its key path too.
	var leaves []string
	var walk func(reflect.Type, string)
	walk = func(tt reflect.Type, prefix string) {
		for f := range tt.Fields() {
			if f.Name == "Policy" {
				continue
			}
			p := prefix + strings.ToLower(f.Name)
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, p+".")
				continue
			}
			leaves = append(leaves, p)
		}
	}
	walk(reflect.TypeFor[Config](), "")
	for _, l := range leaves {
		if k := keyFor(l); !slices.Contains(overridableKeys, k) {
			t.Errorf("Config field %s has no key path", l)
		}
	}
}
