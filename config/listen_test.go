package config

import (
	"strings"
	"testing"
)

// TestListenPortZero: port 0 on both listeners is two free ports the
// system picks, not one address, so it validates; the same nonzero address
// on both is still refused. Before, "127.0.0.1:0" on both was refused as
// the proxy's own listen address.
func TestListenPortZero(t *testing.T) {
	for _, tt := range []struct {
		listen, admin string
		clash         bool
	}{
		{"127.0.0.1:0", "127.0.0.1:0", false},
		{":0", ":0", false},
		{"[::1]:0", "[::1]:0", false},
		{"127.0.0.1:0", "127.0.0.1:9090", false},
		{"127.0.0.1:8080", "127.0.0.1:8080", true},
		{":8080", ":8080", true},
	} {
		c := mustParse(t, base)
		c.Listen, c.Admin.Listen = tt.listen, tt.admin
		err := c.Validate()
		clash := err != nil && strings.Contains(err.Error(), "admin.listen: ") && strings.Contains(err.Error(), "is also the proxy's listen address")
		if clash != tt.clash {
			t.Errorf("listen %s, admin %s: Validate = %v, want a clash: %v", tt.listen, tt.admin, err, tt.clash)
		}
	}
	// Through Load, as serve's flags give them.
	if _, err := Load(writeFile(t, base), nil, WithOverrides(map[string]string{"listen": "127.0.0.1:0", "admin.listen": "127.0.0.1:0"})); err != nil {
		t.Errorf("Load with both listeners on port 0: %v", err)
	}
}

// TestH2CSetting: server.h2c is off by default and is set by the file, the
// environment (IDEMGATE_SERVER_H2C) and an override (serve --h2c), the
// later winning; a change needs a restart.
func TestH2CSetting(t *testing.T) {
	if Default().Server.H2C || mustParse(t, base).Server.H2C {
		t.Fatal("server.h2c is on by default")
	}
	if c := mustParse(t, base+"server: {h2c: true}\n"); !c.Server.H2C {
		t.Error("server.h2c: true in the file is off")
	}
	if c := mustParse(t, base, "IDEMGATE_SERVER_H2C=true"); !c.Server.H2C {
		t.Error("IDEMGATE_SERVER_H2C=true is off")
	}
	c, err := Load(writeFile(t, base+"server: {h2c: false}\n"), nil, WithOverrides(map[string]string{"server.h2c": "true"}))
	if err != nil || !c.Server.H2C {
		t.Errorf("override server.h2c=true: %v, h2c %v", err, c != nil && c.Server.H2C)
	}
	if _, err := Load(writeFile(t, base+"server: {h2c: sometimes}\n"), nil); err == nil || !strings.Contains(err.Error(), "server.h2c") {
		t.Errorf("server.h2c: sometimes: %v, want a problem at server.h2c", err)
	}
	if keys := RestartKeys(mustParse(t, base), mustParse(t, base+"server: {h2c: true}\n")); len(keys) != 1 || keys[0] != "server.h2c" {
		t.Errorf("RestartKeys = %v, want [server.h2c]", keys)
	}
}
