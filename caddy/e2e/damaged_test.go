package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// runDamageableCaddy starts a Caddy whose idempotency keys are under
// prefix on vk, its idemgate configuration idemgateYAML with extra
// appended, in front of a counting upstream.
func runDamageableCaddy(t *testing.T, vk *valkeytest.Server, prefix, extra string) (*caddyProc, *upstream) {
	t.Helper()
	up := startUpstream(t)
	return runCaddy(t, caddySite{
		YAML:        idemgateYAML + extra,
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix %s", vk.Addr(), prefix),
		After:       "reverse_proxy " + strings.TrimPrefix(up.URL, "http://"),
	}), up
}

// TestCaddyDamagedRecordNeverReplayed: the Caddy module's shape of e2e
// TestFaultDamagedRecordNeverReplayed and TestFaultCheckFlagLostNeverReplayed.
// A completed record damaged in the store so that it still parses (a bit
// of its body flipped: its CRC-32C no longer matches; or its flags byte
// lost the check's bit 0x20, which would read the check's 8 bytes as the
// body's first) is neither replayed nor run again: the retry gets 500
// stored-response-damaged, on a fail_open configuration too (the store
// answered, and the operation ran), and the upstream ran once.
func TestCaddyDamagedRecordNeverReplayed(t *testing.T) {
	vk := valkeytest.Start(t)
	damages := map[string]func(t *testing.T, rec []byte, response int){
		// The body is the record's tail (uncompressed, this short).
		"body": func(_ *testing.T, rec []byte, _ int) { rec[len(rec)-1] ^= 0x01 },
		"check-flag": func(t *testing.T, rec []byte, response int) {
			if rec[response]&0x20 == 0 {
				t.Fatalf("the stored response's flags %#x have no check", rec[response])
			}
			rec[response] &^= 0x20
		},
	}
	for damage, f := range damages {
		for name, extra := range map[string]string{"fail_closed": "", "fail_open": "  on_store_error: fail_open\n"} {
			t.Run(damage+"/"+name, func(t *testing.T) {
				prefix := "caddy-damaged-" + damage + "-" + name + ":"
				c, up := runDamageableCaddy(t, vk, prefix, extra)
				if first := post(t, c.URL, "alice", "k-dmg", `{"amount":1}`); first.Status != http.StatusCreated {
					t.Fatalf("first: %d %s", first.Status, first.Body)
				}
				if n := vk.DamageCompleted(t, prefix+"*", func(rec []byte, response int) { f(t, rec, response) }); n != 1 {
					t.Fatalf("damaged %d records, want 1", n)
				}
				retry := post(t, c.URL, "alice", "k-dmg", `{"amount":1}`)
				if n := up.execs.Load(); n != 1 {
					t.Fatalf("the upstream ran %d times, want 1: a damaged completed record was forwarded again (retry: %d %s)", n, retry.Status, retry.Body)
				}
				if retry.Status != http.StatusInternalServerError || !strings.HasSuffix(problemType(retry), "stored-response-damaged") {
					t.Fatalf("retry of a damaged record: %d %s, want 500 stored-response-damaged", retry.Status, retry.Body)
				}
			})
		}
	}
}

// TestCaddyFailOpenNeverRunsAnUnreadableCompletedRecordAgain: the Caddy
// module's shape of the middleware's
// TestFailOpenNeverRunsAnUnreadableCompletedRecordAgain. A completed
// record that no longer parses (a flag no writer sets in its response's
// flags byte; or its owner's netstring one byte longer than it holds) on
// a configuration with on_store_error: fail_open. The store answered, and
// said the operation completed: the retry is refused 503, as on a
// fail_closed route, not forwarded unprotected as if the store could not
// be reached, and the upstream ran the operation once.
func TestCaddyFailOpenNeverRunsAnUnreadableCompletedRecordAgain(t *testing.T) {
	vk := valkeytest.Start(t)
	for name, damage := range map[string]func(rec []byte, response int){
		"flags":   func(rec []byte, response int) { rec[response] |= 0x40 },
		"framing": func(rec []byte, _ int) { rec[0]++ },
	} {
		t.Run(name, func(t *testing.T) {
			prefix := "caddy-unreadable-" + name + ":"
			c, up := runDamageableCaddy(t, vk, prefix, "  on_store_error: fail_open\n")
			if first := post(t, c.URL, "alice", "k-unreadable", `{"amount":1}`); first.Status != http.StatusCreated {
				t.Fatalf("first: %d %s", first.Status, first.Body)
			}
			if n := vk.DamageCompleted(t, prefix+"*", damage); n != 1 {
				t.Fatalf("damaged %d records, want 1", n)
			}
			retry := post(t, c.URL, "alice", "k-unreadable", `{"amount":1}`)
			if n := up.execs.Load(); n != 1 {
				t.Fatalf("the upstream ran %d times, want 1: a completed record the store could not decode was forwarded unprotected (retry: %d %s)", n, retry.Status, retry.Body)
			}
			if retry.Status != http.StatusServiceUnavailable {
				t.Fatalf("retry: %d %s, want 503 as on a fail_closed route", retry.Status, retry.Body)
			}
		})
	}
}
