// Package e2e tests the real idemgate binary over HTTP, in front of real
// upstreams, on a real valkey-server and PostgreSQL: the promises a user
// relies on (one execution per operation whatever the retries, races,
// timeouts, crashes, reloads and failovers; one owner's response never
// handed to another; keyed requests refused while the store is away),
// checked by counting what the upstream executed.
//
// TestMain builds the binary once, with -race, so every scenario also
// checks it for data races. Each test starts its own processes on free
// 127.0.0.1 ports and stops them in t.Cleanup; a test that needs a server
// the machine lacks (valkey-server, PostgreSQL, nginx) fails saying how to
// install it, and under -short skips instead (package internal/needs).
// The package has no code of its own outside its tests: this file only
// gives it its documentation.
package e2e
