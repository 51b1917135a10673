package layout_test

import (
	"encoding/hex"
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/idemgate/idemgate/store/internal/layout"
)

// TestBoltHeaderBytes pins the two bolt header formats, which records
// already on disk hold: names in byte order, each with its value count,
// a name with no values kept; 4-byte lengths in version 2, uvarints in
// version 3.
func TestBoltHeaderBytes(t *testing.T) {
	h := http.Header{"b": {"1", ""}, "A": {}}
	for _, tc := range []struct {
		name string
		enc  layout.CountedHeader
		want string
	}{
		{"v2", layout.BoltV2Header, "00000002" + "00000001" + "41" + "00000000" + "00000001" + "62" + "00000002" + "00000001" + "31" + "00000000"},
		{"v3", layout.BoltV3Header, "02" + "01" + "41" + "00" + "01" + "62" + "02" + "01" + "31" + "00"},
	} {
		got := tc.enc.Encode(h)
		if hex.EncodeToString(got) != tc.want {
			t.Fatalf("%s: Encode = %x, want %s", tc.name, got, tc.want)
		}
		back, err := tc.enc.Decode(got)
		if err != nil || !reflect.DeepEqual(back, h) {
			t.Fatalf("%s: Decode = %v, %v; want %v", tc.name, back, err, h)
		}
		for i := range got {
			if _, err := tc.enc.Decode(got[:i]); !errors.Is(err, layout.ErrHeader) {
				t.Fatalf("%s: Decode of %d of %d bytes = %v, want ErrHeader", tc.name, i, len(got), err)
			}
		}
		if _, err := tc.enc.Decode(append(got, 0)); !errors.Is(err, layout.ErrHeader) {
			t.Fatalf("%s: Decode with a trailing byte = %v, want ErrHeader", tc.name, err)
		}
	}
}
