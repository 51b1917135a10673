package valkeytest

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/policy"
)

// DamageCompleted damages, behind idemgate's back, every completed layout
// 3 record (docs/protocol.md, "Completed record (layout 3, Valkey)") at a
// key matching pattern (a KEYS pattern, such as a key prefix and "*"):
// damage changes rec, the record's p fields joined, in place, response
// being the offset of its stored response (after the record's 7
// netstrings; its first byte is the flags). Each p field is written back
// with its own length, so damage keeps the framing of the fields and a
// reader sees exactly the bytes damage left. It returns how many records
// it damaged (a scope's owner record, policy.OwnerRecord, is left
// alone), and fails the test on a record that does not read as the
// layout says: every shape's tests of damaged records (proxy, middleware,
// Caddy) share it, instead of a reader of the layout each.
func (s *Server) DamageCompleted(t testing.TB, pattern string, damage func(rec []byte, response int)) int {
	t.Helper()
	c, err := dialRESP(s.Addr(), startTimeout)
	if err != nil {
		t.Fatalf("valkeytest: DamageCompleted on %s: %v", s.Addr(), err)
	}
	defer c.Close()
	keys, err := c.do("KEYS", pattern)
	if err != nil {
		t.Fatalf("valkeytest: KEYS %s: %v", pattern, err)
	}
	damaged := 0
	for _, k := range keys {
		pn, err := c.do("HGET", k, "pn")
		if err != nil || len(pn) != 1 {
			continue // not a hash, or not a completed record of layout 3
		}
		n, err := strconv.Atoi(pn[0])
		if err != nil {
			t.Fatalf("valkeytest: record %s: pn %q", k, pn[0])
		}
		parts := make([]string, n)
		for i := range n {
			p, err := c.do("HGET", k, "p"+strconv.Itoa(i))
			if err != nil || len(p) != 1 {
				t.Fatalf("valkeytest: record %s: p%d: %q, %v", k, i, p, err)
			}
			parts[i] = p[0]
		}
		rec := []byte(strings.Join(parts, ""))
		if bytes.HasPrefix(rec, ownerRecord) {
			continue // a scope's owner record, not a request's
		}
		damage(rec, responseAt(t, k, rec))
		for i, part := range parts {
			if _, err := c.do("HSET", k, "p"+strconv.Itoa(i), string(rec[:len(part)])); err != nil {
				t.Fatalf("valkeytest: record %s: HSET p%d: %v", k, i, err)
			}
			rec = rec[len(part):]
		}
		damaged++
	}
	return damaged
}

// ownerRecord is how the record of a scope's owner source starts: its
// owner's netstring (policy.OwnerRecord), which no request's owner equals.
var ownerRecord = []byte(strconv.Itoa(len(policy.OwnerRecordOwner)) + ":" + policy.OwnerRecordOwner)

// responseAt returns the offset of the stored response in rec, the joined
// record at key k: it follows 7 netstrings (owner scope key fingerprint
// recipe created stored_at).
func responseAt(t testing.TB, k string, rec []byte) int {
	t.Helper()
	at := 0
	for range 7 {
		colon := bytes.IndexByte(rec[at:], ':')
		if colon < 0 {
			t.Fatalf("valkeytest: record %s does not read as docs/protocol.md says at %d: %q", k, at, rec)
		}
		n, err := strconv.Atoi(string(rec[at : at+colon]))
		if err != nil || at+colon+1+n > len(rec) {
			t.Fatalf("valkeytest: record %s does not read as docs/protocol.md says at %d: %q", k, at, rec)
		}
		at += colon + 1 + n
	}
	return at
}
