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
//
// A test's name says what it tests, as Test<Area><Behaviour>; the package
// already says end to end, so no name carries E2E. Two areas gather the
// tests of the promises:
//   - TestFault<What>: idemgate under a fault the test injects (a process
//     killed, a store stopped, full, damaged, failed over or cut off, a slow
//     or lossy link, an upstream or handler that fails after it may have
//     acted, a client that leaves): an operation still reaches the upstream
//     at most once, and a store it cannot reach refuses requests.
//   - TestSecurity<What>: one principal's stored response never reaches
//     another (owners, hosts, scopes), and input crafted to get past the
//     gate (malformed keys, headers and bodies, route variants, trailers,
//     spoofed fields) is refused before the upstream; secrets stay out of
//     logs.
//
// Every other test is named by the feature it checks first (TestGRPC...,
// TestShutdown..., TestJWKS..., TestAdmin..., TestStorm...), so that
// -run 'TestFault' or -run 'TestGRPC' picks a whole area.
package e2e
