package postgres

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/internal/layout"
	"github.com/idemgate/idemgate/store/storetest"
)

// FuzzDecodeResponse feeds layout.DecodeResponse arbitrary response columns: it
// must never panic, and every column it accepts must encode and decode
// back to the same response.
func FuzzDecodeResponse(f *testing.F) {
	codec, err := layout.NewBodyCodec()
	if err != nil {
		f.Fatal(err)
	}
	_, resp := storetest.BenchRecord(3)
	for _, r := range []store.Response{
		resp,
		{Status: 200, Trailer: http.Header{"Grpc-Status": {"0"}}, Body: []byte("x")},
		{Status: 204, Omitted: true},
	} {
		f.Add(layout.EncodeResponse(codec, r))
	}
	at := time.UnixMilli(1_700_000_000_000)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := layout.DecodeResponse(codec, b, at)
		if err != nil {
			return
		}
		back, err := layout.DecodeResponse(codec, layout.EncodeResponse(codec, *r), at)
		if err != nil || !reflect.DeepEqual(back, r) {
			t.Fatalf("round trip of %x: %+v, %v; want %+v", b, back, err, r)
		}
	})
}
