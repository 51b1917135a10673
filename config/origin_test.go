package config

import "testing"

// TestOriginSaysWhereAKeyWasSet: Origin names the layer whose value is in
// force for each key (an override over the environment over the file over
// the default), with the file's path or the variable's name, so that no
// caller reads the file or the environment again to find out.
func TestOriginSaysWhereAKeyWasSet(t *testing.T) {
	path := writeFile(t, base+"store:\n  Driver: bolt\n  bolt: {path: /tmp/x.db}\n  valkey: {key_prefix: 'f:'}\n")
	c, err := Load(path, []string{"IDEMGATE_STORE_VALKEY_KEY_PREFIX=e:", "IDEMGATE_STORE_BOLT_PATH=/tmp/e.db"},
		WithOverrides(map[string]string{"store.bolt.path": "/tmp/o.db"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []Origin{
		{Key: "store.driver", Source: SourceFile, Name: path}, // written Driver: keys in any case, as Load reads them
		{Key: "store.valkey.key_prefix", Source: SourceEnv, Name: "IDEMGATE_STORE_VALKEY_KEY_PREFIX"},
		{Key: "store.bolt.path", Source: SourceOverride},
		{Key: "store.valkey.addrs", Source: SourceDefault},
	} {
		if got := c.Origin(want.Key); got != want {
			t.Errorf("Origin(%q) = %+v, want %+v", want.Key, got, want)
		}
	}
	if got, want := c.Origin("store.driver").String(), "store.driver in "+path; got != want {
		t.Errorf("String: %q, want %q", got, want)
	}
	if got := Default().Origin("store.driver").Source; got != SourceDefault {
		t.Errorf("Default's store.driver from %v, want SourceDefault", got)
	}
	p, err := Parse([]byte(base+"store: {driver: memory}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Origin("store.driver"); got != (Origin{Key: "store.driver", Source: SourceFile}) {
		t.Errorf("Parse: Origin = %+v, want the file without a name", got)
	}
}
