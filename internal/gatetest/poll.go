// Package gatetest holds the helpers that the tests of every shape (the
// proxy, the middleware, the Caddy module, the real binary) share: a
// bounded poll on a condition instead of a sleep, a keyed POST read to
// its end, an upstream that counts what it executes, and the type of an
// RFC 9457 problem. Each shape's tests keep only what is their own (how
// they start the gate, the answer type they assert on).
package gatetest

import (
	"testing"
	"time"
)

// Poll intervals: the first look comes soon, so that a condition already
// near is seen without delay, and the gap grows to at most maxEvery, so
// that a condition that takes seconds (a restarted server, a rotated
// certificate) is not asked about hundreds of times on a loaded machine.
const (
	firstEvery = 5 * time.Millisecond
	maxEvery   = 100 * time.Millisecond
)

// Until calls cond until it returns true or d passes, and reports whether
// it returned true. It is a bounded poll on a condition, never a fixed
// sleep; the last call of a false cond comes after d has passed.
func Until(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	every := firstEvery
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every)
		every = min(every*3/2, maxEvery)
	}
	return true
}

// Eventually is Until that fails t, naming what it waited for, when cond
// is still false after d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// EventuallyNil calls f until it returns nil or d passes; after d it
// fails t with what and f's last error.
func EventuallyNil(t testing.TB, d time.Duration, what string, f func() error) {
	t.Helper()
	var err error
	if !Until(d, func() bool { err = f(); return err == nil }) {
		t.Fatalf("%s: still failing after %v: %v", what, d, err)
	}
}
