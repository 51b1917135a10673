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
