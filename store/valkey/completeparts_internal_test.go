package valkey

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
	vk "github.com/valkey-io/valkey-go"
)

// storedRecord reads key's layout 3 record string raw (HGETALL, then p0
// .. p(pn-1) concatenated), as complete.lua wrote it.
func storedRecord(t *testing.T, c vk.Client, key string) []byte {
	t.Helper()
	h, err := c.Do(t.Context(), c.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		t.Fatalf("HGETALL %s: %v", key, err)
	}
	if h["s"] != "completed" || h["v"] != "3" {
		t.Fatalf("record %s: s=%q v=%q, want a completed layout 3 record", key, h["s"], h["v"])
	}
	n, err := strconv.Atoi(h["pn"])
	if err != nil || n < 1 {
		t.Fatalf("record %s: pn=%q", key, h["pn"])
	}
	var rec []byte
	for i := range n {
		p, ok := h["p"+strconv.Itoa(i)]
		if !ok {
			t.Fatalf("record %s: no p%d of %d", key, i, n)
		}
		rec = append(rec, p...)
	}
	return rec
}

// wantRecord is the layout 3 record complete.lua writes for id completed
// at storedAtMs with resp: the netstrings, then layout.EncodeResponse's bytes
// (the one-buffer encoding Complete sent as a single argument before).
func wantRecord(codec *layout.BodyCodec, id store.Identity, fingerprint string, createdMs, storedAtMs int64, resp store.Response) []byte {
	var b []byte
	for _, s := range []string{id.Owner, id.Scope, id.Key, fingerprint, "",
		strconv.FormatInt(createdMs, 10), strconv.FormatInt(storedAtMs, 10)} {
		b = appendNetstring(b, s)
	}
	return append(b, layout.EncodeResponse(codec, resp)...)
}

// TestCompleteInPartsSameRecord: Complete sends the response head and the
// stored body as two arguments that complete.lua concatenates (no copy of
// a large body),
// and the record Valkey holds is byte for byte the one the single
// argument of layout.EncodeResponse made, read back raw: for a 1 MiB body
// stored as it is (incompressible, and Content-Encoded), a compressed
// one, a small one, an empty and no body. A caller sending the whole
// response as one argument and no ARGV[5] (complete.lua's contract before)
// gets the same record too.
func TestCompleteInPartsSameRecord(t *testing.T) {
	srv := valkeytest.Start(t)
	s := internalStore(t, srv.Addr(), 0)
	c := rawClient(t, srv.Addr())
	random := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(17, 4))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	json := http.Header{"Content-Type": {"application/json"}}
	cases := []struct {
		name string
		resp store.Response
		raw  bool // the body is stored as it is
	}{
		{"incompressible 1 MiB", store.Response{Status: 201, Header: json, Body: random}, true},
		{"gzip 1 MiB", store.Response{Status: 201, Header: http.Header{"Content-Encoding": {"gzip"}}, Body: random, Trailer: http.Header{"Grpc-Status": {"0"}}}, true},
		{"compressible 1 MiB", store.Response{Status: 200, Header: json, Body: bytes.Repeat([]byte(`{"id":"ord_1"},`), (1<<20)/15)}, false},
		{"small", store.Response{Status: 201, Header: json, Body: []byte(`{"id":1}`)}, true},
		{"empty", store.Response{Status: 204, Body: []byte{}}, true},
		{"no body", store.Response{Status: 204, Header: json}, false},
		{"omitted", store.Response{Status: 201, Omitted: true}, false},
	}
	for i, tc := range cases {
		for _, oneArg := range []bool{false, true} {
			id := store.Identity{Owner: "o", Scope: "s", Key: "parts-" + strconv.Itoa(i) + "-" + strconv.FormatBool(oneArg)}
			token := "tok-" + id.Key
			if res, err := s.Claim(t.Context(), store.ClaimParams{Identity: id, Fingerprint: "fp", Token: token, Lease: time.Minute, Retention: time.Hour}); err != nil || res.State != store.Claimed {
				t.Fatalf("%s: claim: %+v %v", tc.name, res, err)
			}
			key := s.Key(id)
			created, err := c.Do(t.Context(), c.B().Hget().Key(key).Field("c").Build()).AsInt64()
			if err != nil {
				t.Fatalf("%s: created: %v", tc.name, err)
			}
			if oneArg {
				enc := vk.BinaryString(layout.EncodeResponse(s.codec, tc.resp))
				n, err := c.Do(t.Context(), c.B().Eval().Script(completeLua).Numkeys(1).Key(key).Arg(token, enc, s.channel, "0").Build()).AsInt64()
				if err != nil || n != 1 {
					t.Fatalf("%s: complete.lua with one argument: %d %v", tc.name, n, err)
				}
			} else {
				head, tail := layout.EncodeResponseParts(s.codec, tc.resp)
				if tc.raw && len(tc.resp.Body) > 0 && &tail[0] != &tc.resp.Body[0] {
					t.Errorf("%s: the body stored as it is was copied, not sent as the response's own bytes", tc.name)
				}
				if len(head) > 64+len(EncodeHeader(tc.resp.Header))+len(EncodeHeader(tc.resp.Trailer)) {
					t.Errorf("%s: head of %d bytes carries more than flags, status, header and trailer", tc.name, len(head))
				}
				if ok, err := s.Complete(t.Context(), id, token, tc.resp); !ok || err != nil {
					t.Fatalf("%s: Complete: %v %v", tc.name, ok, err)
				}
			}
			got := storedRecord(t, c, key)
			dec, err := decodeCompact(got)
			if err != nil {
				t.Fatalf("%s: stored record does not decode: %v", tc.name, err)
			}
			if want := wantRecord(s.codec, id, "fp", created, dec.storedAtMs, tc.resp); !bytes.Equal(got, want) {
				t.Fatalf("%s (one argument %v): stored record of %d bytes differs from the %d bytes of layout.EncodeResponse's record", tc.name, oneArg, len(got), len(want))
			}
			rec, err := s.Get(t.Context(), id)
			if err != nil || rec == nil || rec.Response == nil {
				t.Fatalf("%s: Get: %+v %v", tc.name, rec, err)
			}
			if r := rec.Response; r.Status != tc.resp.Status || r.Omitted != tc.resp.Omitted || !bytes.Equal(r.Body, tc.resp.Body) || (r.Body == nil) != (tc.resp.Body == nil) {
				t.Fatalf("%s: replays status %d, omitted %v, %d body bytes; want %d, %v, %d", tc.name, r.Status, r.Omitted, len(r.Body), tc.resp.Status, tc.resp.Omitted, len(tc.resp.Body))
			}
		}
	}
}
