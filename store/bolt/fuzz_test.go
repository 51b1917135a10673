package bolt

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/idemgate/idemgate/store/internal/layout"
	"github.com/idemgate/idemgate/store/storetest"
)

// FuzzDecodeRecord feeds decodeRecord arbitrary values (a file is input
// the store did not necessarily write): it must never panic, and every
// value it accepts, of any version, must encode in version 3 and decode
// back to the same record, so a record read and written again loses
// nothing.
func FuzzDecodeRecord(f *testing.F) {
	codec, err := layout.NewBodyCodec()
	if err != nil {
		f.Fatal(err)
	}
	p, resp := storetest.BenchRecord(3)
	resp.Trailer = http.Header{"Grpc-Status": {"0"}}
	for _, r := range []*record{
		{ID: p.Identity, Fingerprint: p.Fingerprint, Recipe: p.Recipe, CreatedMs: 1, ExpiryMs: 9, RetentionMs: 8, StoredAtMs: 2, Resp: &resp},
		{ID: p.Identity, Running: true, Fingerprint: "fp", Token: "tok", CreatedMs: 1, LeaseEndMs: 5, ExpiryMs: 9},
		{ID: p.Identity, Gone: true, CreatedMs: 1, ExpiryMs: 9},
	} {
		for _, enc := range []func(*record) ([]byte, error){
			func(r *record) ([]byte, error) { return encodeRecord(r, codec) },
			encodeRecordV2,
		} {
			v, err := enc(r)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(v)
		}
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := decodeRecord(v, codec)
		if err != nil {
			return
		}
		if !r.Running && !r.Gone && r.Resp == nil {
			t.Fatalf("completed record without response from %x", v)
		}
		again, err := encodeRecord(r, codec)
		if err != nil {
			// Only a status beyond 16 bits, which no version can hold.
			t.Fatalf("encodeRecord of a decoded record: %v", err)
		}
		back, err := decodeRecord(again, codec)
		if err != nil {
			t.Fatalf("decodeRecord of a re-encoded record %x: %v", again, err)
		}
		if !reflect.DeepEqual(back, r) {
			t.Fatalf("round trip of %x:\n got %+v %+v\nwant %+v %+v", v, back, back.Resp, r, r.Resp)
		}
	})
}
