package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/idemgate/idemgate/policy"
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

	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{vk.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	keys, err := c.Do(ctx, c.B().Keys().Pattern("damaged:*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	flipped := 0
	for _, k := range keys {
		pn, err := c.Do(ctx, c.B().Hget().Key(k).Field("pn").Build()).AsInt64()
		if err != nil {
			continue // not a completed record of layout 3
		}
		// The p fields, joined in order, are the record (docs/protocol.md).
		var parts []string
		for i := range pn {
			part, err := c.Do(ctx, c.B().Hget().Key(k).Field("p"+strconv.FormatInt(i, 10)).Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, part)
		}
		b := []byte(strings.Join(parts, ""))
		if strings.HasPrefix(string(b), fmt.Sprintf("%d:%s", len(policy.OwnerRecordOwner), policy.OwnerRecordOwner)) {
			continue // the scope's owner record (policy.OwnerRecord), not the request's
		}
		off := 0
		for range 7 { // owner scope key fingerprint recipe created stored_at
			colon := strings.IndexByte(string(b[off:]), ':')
			n, err := strconv.Atoi(string(b[off : off+colon]))
			if err != nil {
				t.Fatalf("record %s does not read as docs/protocol.md says: %q", k, b)
			}
			off += colon + 1 + n
		}
		corrupt(b, off)
		// Written back part by part, each field its own bytes again.
		for i, part := range parts {
			field := "p" + strconv.Itoa(i)
			if err := c.Do(ctx, c.B().Hset().Key(k).FieldValue().FieldValue(field, string(b[:len(part)])).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			b = b[len(part):]
		}
		flipped++
	}
	if flipped != 1 {
		t.Fatalf("flipped %d records, want 1 (keys %v)", flipped, keys)
	}

	retry, err := postWith(t, noRetry, ctx, gate.URL, "alice", "k-bit", `{"item":1}`)
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
