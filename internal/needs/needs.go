// Package needs ends a test that cannot run without a program the machine
// lacks (valkey-server, PostgreSQL, nginx, prometheus, promtool, wrk,
// node): it fails the test, saying how to install the program, so that a
// run meant to cover everything never passes by leaving something out;
// only under -short, which asks for the tests a machine with Go alone can
// run, it skips the test instead, naming what it needs.
package needs

import "testing"

// Missing ends t because program is not installed; how says how to
// install it. It fails t, or skips it under -short. It does not return.
func Missing(t testing.TB, program, how string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s, which is not installed: skipped under -short (without -short this test fails: %s)", program, how)
	}
	t.Fatal(how)
}
