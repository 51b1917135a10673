package config

import (
	"strings"
	"testing"
)

// TestMaxWaiters: server.max_waiters defaults to DefaultMaxWaiters(),
// is set from the file or the environment, 0 is no limit, and a negative
// value is refused at its path.
func TestMaxWaiters(t *testing.T) {
	if got, want := mustParse(t, base).Server.MaxWaiters, DefaultMaxWaiters(); got != want || want <= 0 {
		t.Errorf("default max_waiters = %d, want %d", got, want)
	}
	if got := mustParse(t, base+"server: {max_waiters: 16}\n").Server.MaxWaiters; got != 16 {
		t.Errorf("max_waiters = %d, want 16", got)
	}
	if got := mustParse(t, base+"server: {max_waiters: 0}\n").Server.MaxWaiters; got != 0 {
		t.Errorf("max_waiters 0 = %d, want 0 (no limit)", got)
	}
	if got := mustParse(t, base, "IDEMGATE_SERVER_MAX_WAITERS=32").Server.MaxWaiters; got != 32 {
		t.Errorf("max_waiters from the environment = %d, want 32", got)
	}
	_, err := Load(writeFile(t, base+"server: {max_waiters: -1}\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "server.max_waiters") {
		t.Errorf("max_waiters -1: %v, want an error at server.max_waiters", err)
	}
}
