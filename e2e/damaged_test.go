package e2e

import (
	"strconv"
	"strings"
	"testing"

	vk "github.com/valkey-io/valkey-go"

	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/valkey"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestFaultDamagedRecordNeverReplayed: a completed record whose stored body
// was cut short in Valkey (its last bytes lost) used to replay a shorter
// body as 201 with no error. Every stored response now carries its body's
// length and a CRC-32C: the retry gets 500 stored-response-damaged, is not
// forwarded again (not even on a fail_open route, since the operation
// ran), and the damage is counted.
func TestFaultDamagedRecordNeverReplayed(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	c := storeClient(t, v.Addr())
	routes := "  - name: orders\n    match: \"POST /v1/orders\"\n" +
		"  - name: open\n    match: \"POST /v1/open\"\n    on_store_error: fail_open\n"
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken, Routes: routes})

	for _, path := range []string{"/v1/orders", "/v1/open"} {
		key := "dmg" + strings.ReplaceAll(path, "/", "-")
		first := mustPost(t, g.URL+path, "alice", key, `{"n":1}`)
		if first.Status != 201 {
			t.Fatalf("%s first: %v", path, first)
		}
		// Cut the last 5 bytes of the record (the p fields joined): the
		// tail of the (uncompressed, short) body, as a lost write would.
		rk := valkey.Key(valkey.DefaultKeyPrefix, store.Identity{Owner: identity.HeaderOwner("alice"), Scope: "default", Key: key})
		rec := readRecord(t, c, rk)
		writeRecord(t, c, rk, rec[:len(rec)-5])
		retry := mustPost(t, g.URL+path, "alice", key, `{"n":1}`)
		if retry.Status != 500 || !strings.Contains(string(retry.Body), "stored-response-damaged") {
			t.Errorf("%s retry of a damaged record: %v, want 500 stored-response-damaged", path, retry)
		}
		if n := up.Calls("alice", key); n != 1 {
			t.Errorf("%s: the upstream ran the operation %d times, want 1", path, n)
		}
	}
	if got := metricValue(t, g, `idemgate_stored_responses_damaged_total{route="orders"}`); got != 1 {
		t.Errorf("damaged records counted for orders: %v, want 1", got)
	}
	if !strings.Contains(g.Logs(), "stored response failed its integrity check") {
		t.Errorf("no log line for the damaged record:\n%s", g.Logs())
	}
}

// readRecord returns the completed layout 3 record at rk: its p fields
// joined (docs/protocol.md, "Completed record (layout 3, Valkey)").
func readRecord(t *testing.T, c vk.Client, rk string) string {
	t.Helper()
	pn, err := c.Do(t.Context(), c.B().Hget().Key(rk).Field("pn").Build()).ToString()
	if err != nil {
		t.Fatalf("the record has no pn field: %v", err)
	}
	n, _ := strconv.Atoi(pn)
	var rec strings.Builder
	for i := range n {
		p, err := c.Do(t.Context(), c.B().Hget().Key(rk).Field("p"+strconv.Itoa(i)).Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		rec.WriteString(p)
	}
	return rec.String()
}

// writeRecord replaces the p fields of the record at rk by rec in one
// field p0, which holds a record of any size (docs/protocol.md).
func writeRecord(t *testing.T, c vk.Client, rk, rec string) {
	t.Helper()
	pn, err := c.Do(t.Context(), c.B().Hget().Key(rk).Field("pn").Build()).ToString()
	if err != nil {
		t.Fatalf("the record has no pn field: %v", err)
	}
	n, _ := strconv.Atoi(pn)
	if err := c.Do(t.Context(), c.B().Hdel().Key(rk).Field("pn").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := c.Do(t.Context(), c.B().Hdel().Key(rk).Field("p"+strconv.Itoa(i)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Do(t.Context(), c.B().Hset().Key(rk).FieldValue().FieldValue("pn", "1").FieldValue("p0", rec).Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// TestFaultCheckFlagLostNeverReplayed: a completed record whose flags byte
// lost the check's bit (0x20), one flipped bit, used to be read as a
// response written before the check existed and replayed as 201 with the
// 8 check bytes (body length, CRC-32C) prefixed to the body. The check's
// bytes are still there and still match the response with the bit set,
// so the record is damaged as any other: 500 stored-response-damaged,
// nothing forwarded again, and the damage counted.
func TestFaultCheckFlagLostNeverReplayed(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	routes := "  - name: orders\n    match: \"POST /v1/orders\"\n"
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken, Routes: routes})
	first := mustPost(t, g.URL+"/v1/orders", "alice", "flag", `{"n":1}`)
	if first.Status != 201 {
		t.Fatalf("first: %v", first)
	}
	n := v.DamageCompleted(t, valkey.DefaultKeyPrefix+"*", func(rec []byte, at int) {
		if rec[at]&0x20 == 0 {
			t.Fatalf("the stored response's flags %#x have no check", rec[at])
		}
		rec[at] &^= 0x20
	})
	if n != 1 {
		t.Fatalf("damaged %d records, want 1", n)
	}
	retry := mustPost(t, g.URL+"/v1/orders", "alice", "flag", `{"n":1}`)
	if retry.Status != 500 || !strings.Contains(string(retry.Body), "stored-response-damaged") {
		t.Errorf("retry of a record whose check flag was lost: %d %q, want 500 stored-response-damaged", retry.Status, retry.Body)
	}
	if n := up.Calls("alice", "flag"); n != 1 {
		t.Errorf("the upstream ran the operation %d times, want 1", n)
	}
	if got := metricValue(t, g, `idemgate_stored_responses_damaged_total{route="orders"}`); got != 1 {
		t.Errorf("damaged records counted: %v, want 1", got)
	}
}

// TestFaultFailOpenNeverRunsAnUnreadableCompletedRecordAgain: the
// standalone proxy's shape of the middleware's
// TestFailOpenNeverRunsAnUnreadableCompletedRecordAgain. A completed
// record that no longer parses (a flag no writer sets in its response's
// flags byte; or its owner's netstring one byte longer than it holds) on a
// route with on_store_error: fail_open. The store answered, and said the
// operation completed: the retry is refused 503, as on a fail_closed
// route, not forwarded unprotected as if the store could not be reached,
// and the upstream ran the operation once.
func TestFaultFailOpenNeverRunsAnUnreadableCompletedRecordAgain(t *testing.T) {
	v := valkeytest.Start(t)
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()},
		Routes: ordersRoute("on_store_error: fail_open")})
	for name, damage := range map[string]func(rec []byte, response int){
		"flags":   func(rec []byte, response int) { rec[response] |= 0x40 },
		"framing": func(rec []byte, _ int) { rec[0]++ },
	} {
		t.Run(name, func(t *testing.T) {
			key := "unreadable-" + name
			if a := mustPost(t, g.URL+"/v1/orders", "alice", key, `{"n":1}`); a.Status != 201 {
				t.Fatalf("first: %v", a)
			}
			rk := valkey.Key(valkey.DefaultKeyPrefix, store.Identity{Owner: identity.HeaderOwner("alice"), Scope: "default", Key: key})
			if n := v.DamageCompleted(t, rk, damage); n != 1 {
				t.Fatalf("damaged %d records, want 1", n)
			}
			retry := mustPost(t, g.URL+"/v1/orders", "alice", key, `{"n":1}`)
			if n := up.Calls("alice", key); n != 1 {
				t.Fatalf("the upstream ran the operation %d times, want 1: a completed record the store could not decode was forwarded unprotected (retry: %d %s)", n, retry.Status, retry.Body)
			}
			if retry.Status != 503 {
				t.Fatalf("retry: %d %s, want 503 as on a fail_closed route", retry.Status, retry.Body)
			}
		})
	}
}

// storeClient is a client of the Valkey at addr, without client-side cache,
// for reading and altering stored records behind idemgate's back; it is
// closed at the test's end.
func storeClient(t *testing.T, addr string) vk.Client {
	t.Helper()
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
