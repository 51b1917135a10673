package policy

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/http"
	"testing"
)

// FuzzProtobufCanonical: for any body, the protobuf canonical form never
// panics; a body that decodes canonicalizes to a fixed point (the
// canonical form, framed again, is its own canonical form) and CheckBody
// accepts it, so a retry that re-encodes what it decoded is the same
// request; a body that does not decode is refused by CheckBody (400 before
// any claim) and fingerprints as its bytes. Two encodings of one
// CreateRequest, its map entries shuffled, fingerprint equal.
func FuzzProtobufCanonical(f *testing.F) {
	schema, err := LoadProtoSchema(writeOrdersDescriptors(f))
	if err != nil {
		f.Fatal(err)
	}
	const path = "/orders.v1.Orders/Create"
	f.Add(createRequest([][2]any{{"apple", 1}, {"pear", 2}}, "r1", "n"), "apple", "pear", int32(1), int32(2), uint64(7))
	f.Add([]byte{0, 0, 0, 0, 2, 0xff, 0xff}, "", "", int32(0), int32(0), uint64(0))
	f.Add(append(createRequest(nil, "", "x"), createRequest([][2]any{{"k", -1}}, "", "")...), "a", "a", int32(-5), int32(5), uint64(1))
	req, err := http.NewRequest("POST", "http://x"+path, nil)
	if err != nil {
		f.Fatal(err)
	}
	pb := FingerprintSpec{Body: BodyProtobuf, Proto: schema}
	f.Fuzz(func(t *testing.T, body []byte, k1, k2 string, v1, v2 int32, seed uint64) {
		c, err := schema.canonical(path, body, nil)
		checkErr := pb.CheckBody(req, body)
		if (err == nil) != (checkErr == nil) {
			t.Fatalf("canonical error %v but CheckBody error %v", err, checkErr)
		}
		in := FingerprintInput{Method: "POST", Path: path, BodyMode: BodyProtobuf, Body: body, Proto: schema}
		if err != nil {
			if !bytes.Equal(FingerprintEncoding(in), FingerprintEncoding(FingerprintInput{Method: "POST", Path: path, BodyMode: BodyProtobuf, Body: body})) {
				t.Fatal("a body that does not decode is not fingerprinted as its bytes")
			}
		} else {
			again, err := schema.canonical(path, reframe(c), nil)
			if err != nil {
				t.Fatalf("the canonical form does not decode: %v", err)
			}
			if !bytes.Equal(again, c) {
				t.Fatalf("canonical form is not a fixed point:\n%x\n%x", c, again)
			}
			if pb.Of(req, body) != pb.Of(req, reframe(c)) {
				t.Fatal("a body and its canonical form fingerprint differently")
			}
		}

		// One message, map entries in two orders (and a duplicated entry,
		// last wins, as protobuf merges maps).
		if k1 == k2 {
			return
		}
		items := [][2]any{{k1, int(v1)}, {k2, int(v2)}, {k1, int(v2)}, {k1, int(v1)}}
		shuffled := append([][2]any(nil), items...)
		rand.New(rand.NewPCG(seed, 0)).Shuffle(len(shuffled)-1, func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		a, b := createRequest(items, "r", "n"), createRequest(shuffled, "r", "n")
		if _, err := schema.canonical(path, a, nil); err != nil {
			return // a key that is not valid UTF-8: not a proto3 string
		}
		if pb.Of(req, a) != pb.Of(req, b) {
			t.Fatalf("one message, map entries reordered: fingerprints differ (%q, %q)", k1, k2)
		}
	})
}

// reframe returns the tagBodyProtobuf record c (4-byte length, message,
// repeated) as a gRPC body: each message behind its uncompressed flag.
func reframe(c []byte) []byte {
	var out []byte
	for len(c) >= 4 {
		n := binary.BigEndian.Uint32(c)
		out = append(out, 0)
		out = append(out, c[:4+n]...)
		c = c[4+n:]
	}
	return out
}
