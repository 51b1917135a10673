package middleware_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestFailOpenNeverRunsAnUnreadableCompletedRecordAgain: a completed
// record that no longer parses (one bit of its response's flags byte
// flipped in the store: a flag no writer sets; or a length of its
// framing changed) on a route with
// on_store_error: fail_open. The store answered, and said the operation
// completed: the retry must not be forwarded unprotected as if the store
// could not be reached (a record whose check fails is not either,
// docs/protocol.md): it is refused 503, as on a fail_closed route, and the
// handler runs once.
func TestFailOpenNeverRunsAnUnreadableCompletedRecordAgain(t *testing.T) {
	t.Run("flags", func(t *testing.T) {
		testUnreadableCompleted(t, func(b []byte, response int) { b[response] |= 0x40 })
	})
	t.Run("framing", func(t *testing.T) {
		// The owner's netstring says one byte more than it holds.
		testUnreadableCompleted(t, func(b []byte, _ int) { b[0]++ })
	})
}

// testUnreadableCompleted runs TestFailOpenNeverRunsAnUnreadableCompletedRecordAgain
// with corrupt, which damages the joined p fields b of the completed
// record in place, its response starting at offset response.
func testUnreadableCompleted(t *testing.T, corrupt func(b []byte, response int)) {
	vk := valkeytest.Start(t)
	h := newOrders()
	gate := serve(t, testConfig(vk.Addr(), "damaged:")+"    on_store_error: fail_open\n", h)
	if a := mustPost(t, gate.URL, "alice", "k-bit", `{"item":1}`); a.status != http.StatusCreated {
		t.Fatalf("first: %d %s", a.status, a.body)
	}

	if n := vk.DamageCompleted(t, "damaged:*", corrupt); n != 1 {
		t.Fatalf("damaged %d records, want 1", n)
	}

	retry, err := postWith(t, noRetry, context.Background(), gate.URL, "alice", "k-bit", `{"item":1}`)
	if err != nil {
		t.Fatal(err)
	}
	if n := h.runsOf("k-bit"); n != 1 {
		t.Fatalf("handler ran %d times, want 1: a completed record the store could not decode was forwarded unprotected (retry: %d %s)", n, retry.status, retry.body)
	}
	if retry.status != http.StatusServiceUnavailable {
		t.Fatalf("retry: %d %s, want 503 as on a fail_closed route", retry.status, retry.body)
	}
}

// TestDamagedRecordNeverReplayed: the middleware's shape of e2e
// TestFaultDamagedRecordNeverReplayed and TestFaultCheckFlagLostNeverReplayed.
// A completed record damaged in the store so that it still parses (a bit
// of its body flipped: its CRC-32C no longer matches; or its flags byte
// lost the check's bit 0x20, which would read the check's 8 bytes as the
// body's first) is neither replayed nor run again: the retry gets 500
// stored-response-damaged, on a fail_open route too (the store answered,
// and the operation ran), and the handler ran once.
func TestDamagedRecordNeverReplayed(t *testing.T) {
	vk := valkeytest.Start(t)
	for damage, f := range damages() {
		for name, route := range map[string]string{"fail_closed": "", "fail_open": "    on_store_error: fail_open\n"} {
			t.Run(damage+"/"+name, func(t *testing.T) { testDamaged(t, vk, damage+"-"+name, route, f) })
		}
	}
}

// damages are the damages of TestDamagedRecordNeverReplayed, by name,
// each to the joined p fields rec of a completed record whose response
// starts at offset response.
func damages() map[string]func(t *testing.T, rec []byte, response int) {
	return map[string]func(t *testing.T, rec []byte, response int){
		// The body is the record's tail (uncompressed, this short).
		"body": func(_ *testing.T, rec []byte, _ int) { rec[len(rec)-1] ^= 0x01 },
		"check-flag": func(t *testing.T, rec []byte, response int) {
			if rec[response]&0x20 == 0 {
				t.Fatalf("the stored response's flags %#x have no check", rec[response])
			}
			rec[response] &^= 0x20
		},
	}
}

// testDamaged runs TestDamagedRecordNeverReplayed on a route with route
// appended, its record damaged by damage.
func testDamaged(t *testing.T, vk *valkeytest.Server, name, route string, damage func(t *testing.T, rec []byte, response int)) {
	h := newOrders()
	prefix := "damaged-" + name + ":"
	gate := serve(t, testConfig(vk.Addr(), prefix)+route, h)
	if a := mustPost(t, gate.URL, "alice", "k-dmg", `{"item":1}`); a.status != http.StatusCreated {
		t.Fatalf("first: %d %s", a.status, a.body)
	}
	if n := vk.DamageCompleted(t, prefix+"*", func(rec []byte, response int) { damage(t, rec, response) }); n != 1 {
		t.Fatalf("damaged %d records, want 1", n)
	}
	retry, err := postWith(t, noRetry, context.Background(), gate.URL, "alice", "k-dmg", `{"item":1}`)
	if err != nil {
		t.Fatal(err)
	}
	if n := h.runsOf("k-dmg"); n != 1 {
		t.Fatalf("handler ran %d times, want 1: a damaged completed record was forwarded again (retry: %d %s)", n, retry.status, retry.body)
	}
	if retry.status != http.StatusInternalServerError || !strings.Contains(retry.body, "stored-response-damaged") {
		t.Fatalf("retry of a damaged record: %d %s, want 500 stored-response-damaged", retry.status, retry.body)
	}
}
