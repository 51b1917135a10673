package config

import "testing"

// TestOriginSaysWhereAKeyWasSet: WithOrigins names the layer whose value
// is in force for each key (an override over the environment over the
// file over the default), with the file's path or the variable's name, so
// that no caller reads the file or the environment again to find out.
func TestOriginSaysWhereAKeyWasSet(t *testing.T) {
	path := writeFile(t, base+"store:\n  Driver: bolt\n  bolt: {path: /tmp/x.db}\n  valkey: {key_prefix: 'f:'}\n")
	var from Origins
	_, err := Load(path, []string{"IDEMGATE_STORE_VALKEY_KEY_PREFIX=e:", "IDEMGATE_STORE_BOLT_PATH=/tmp/e.db"},
		WithOverrides(map[string]string{"store.bolt.path": "/tmp/o.db"}), WithOrigins(&from))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []Origin{
		{Key: "store.driver", Source: SourceFile, Name: path}, // written Driver: keys in any case, as Load reads them
		{Key: "store.valkey.key_prefix", Source: SourceEnv, Name: "IDEMGATE_STORE_VALKEY_KEY_PREFIX"},
		{Key: "store.bolt.path", Source: SourceOverride},
		{Key: "store.valkey.addrs", Source: SourceDefault},
	} {
		if got := from.Of(want.Key); got != want {
			t.Errorf("Of(%q) = %+v, want %+v", want.Key, got, want)
		}
	}
	if got, want := from.Of("store.driver").String(), "store.driver in "+path; got != want {
		t.Errorf("String: %q, want %q", got, want)
	}
	if _, err := Parse([]byte(base+"store: {driver: memory}\n"), nil, WithOrigins(&from)); err != nil {
		t.Fatal(err)
	}
	if got := from.Of("store.driver"); got != (Origin{Key: "store.driver", Source: SourceFile}) {
		t.Errorf("Parse: Of = %+v, want the file without a name", got)
	}
	if got := from.Of("store.bolt.path").Source; got != SourceDefault {
		t.Errorf("Parse: store.bolt.path from %v, want SourceDefault (replaced, not merged)", got)
	}
}
