package fingerprint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// FuzzProtobufCanonical: for any body, the protobuf canonical form never
// panics; a body whose canonical form is used is a lossless view of it
// (each message and its canonical encoding carry the same fields with the
// same values, wireView), so two bodies with one canonical form mean the
// same under any schema that reads them; it canonicalizes to a fixed
// point (the canonical form, framed again, is its own canonical form) and
// CheckBody accepts it, so a retry that re-encodes what it decoded is the
// same request. A body that decodes but is not lossless is accepted and
// fingerprints as its bytes; one that does not decode is refused by
// CheckBody (400 before any claim) and fingerprints as its bytes. Two
// encodings of one CreateRequest, its map entries shuffled, fingerprint
// equal; with a key sent twice they are fingerprinted as their bytes.
func FuzzProtobufCanonical(f *testing.F) {
	schema, err := LoadProtoSchema(writeOrdersDescriptors(f))
	if err != nil {
		f.Fatal(err)
	}
	const path = "/orders.v1.Orders/Create"
	f.Add(createRequest([][2]any{{"apple", 1}, {"pear", 2}}, "r1", "n"), "apple", "pear", int32(1), int32(2), uint64(7))
	f.Add([]byte{0, 0, 0, 0, 2, 0xff, 0xff}, "", "", int32(0), int32(0), uint64(0))
	f.Add(append(createRequest(nil, "", "x"), createRequest([][2]any{{"k", -1}}, "", "")...), "a", "a", int32(-5), int32(5), uint64(1))
	f.Add(createRequest([][2]any{{"a", 1<<32 + 5}}, "", ""), "a", "b", int32(0), int32(5), uint64(2))
	f.Add(grpcFrame(append(createRequest(nil, "", "x")[5:], 0x1a, 1, 'y')), "a", "b", int32(1), int32(1), uint64(3))
	req, err := http.NewRequest("POST", "http://x"+path, nil)
	if err != nil {
		f.Fatal(err)
	}
	pb := Spec{Body: BodyProtobuf, Proto: schema}
	f.Fuzz(func(t *testing.T, body []byte, k1, k2 string, v1, v2 int32, seed uint64) {
		c, err := schema.canonical(path, body, nil)
		checkErr := pb.CheckBody(req, body)
		if (err == nil || errors.Is(err, errLossy)) != (checkErr == nil) {
			t.Fatalf("canonical error %v but CheckBody error %v", err, checkErr)
		}
		in := Input{Method: "POST", Path: path, BodyMode: BodyProtobuf, Body: body, Proto: schema}
		if err != nil {
			if !bytes.Equal(Encoding(in), Encoding(Input{Method: "POST", Path: path, BodyMode: BodyProtobuf, Body: body})) {
				t.Fatal("a body that does not decode is not fingerprinted as its bytes")
			}
		} else {
			md, _ := schema.input(path)
			for wire, canon := body, c; len(canon) > 0; {
				n, m := binary.BigEndian.Uint32(wire[1:]), binary.BigEndian.Uint32(canon)
				if a, b := wireView(md, wire[5:5+n]), wireView(md, canon[4:4+m]); a != b {
					t.Fatalf("the canonical form is not what was sent:\nwire      %s\ncanonical %s", a, b)
				}
				wire, canon = wire[5+n:], canon[4+m:]
			}
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

		// One message, map entries in two orders; then with a key sent
		// twice, which a map keeps once (last wins) but a server reading
		// the field as repeated entries keeps twice.
		if k1 == k2 {
			return
		}
		rng := rand.New(rand.NewPCG(seed, 0))
		items := [][2]any{{k1, int(v1)}, {k2, int(v2)}}
		shuffled := [][2]any{items[1], items[0]}
		a, b := createRequest(items, "r", "n"), createRequest(shuffled, "r", "n")
		if _, err := schema.canonical(path, a, nil); err != nil {
			return // a key that is not valid UTF-8: not a proto3 string
		}
		if pb.Of(req, a) != pb.Of(req, b) {
			t.Fatalf("one message, map entries reordered: fingerprints differ (%q, %q)", k1, k2)
		}
		items = append(items, [2]any{k1, int(v2)})
		shuffled = append([][2]any(nil), items...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		a, b = createRequest(items, "r", "n"), createRequest(shuffled, "r", "n")
		if !bytes.Equal(a, b) && pb.Of(req, a) == pb.Of(req, b) {
			t.Fatalf("a map key sent twice, entries reordered: one fingerprint (%q, %q)", k1, k2)
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

// wireView describes the message encoded in b under md by its fields, not
// its bytes: for each field number in order, its values in the order
// sent (a packed block's elements one by one, a varint by its value, a
// message by its own view), map entries sorted, since a map's order means
// nothing. Two encodings with one view carry the same fields and values;
// what decoding drops (a value beyond its kind, a second value of a
// singular field, an explicit zero) shows as a difference.
func wireView(md protoreflect.MessageDescriptor, b []byte) string {
	fields := map[protowire.Number][]string{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Sprintf("bad tag %x", b)
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return fmt.Sprintf("bad value %x", b)
		}
		val := b[:m]
		b = b[m:]
		var fd protoreflect.FieldDescriptor
		if md != nil {
			fd = md.Fields().ByNumber(num)
		}
		if typ != protowire.BytesType {
			fields[num] = append(fields[num], scalarView(typ, val))
			continue
		}
		v, _ := protowire.ConsumeBytes(val)
		switch {
		case fd != nil && fd.Kind() == protoreflect.MessageKind:
			fields[num] = append(fields[num], "{"+wireView(fd.Message(), v)+"}")
		case fd != nil && fd.IsList() && wireType(fd.Kind()) != protowire.BytesType:
			for len(v) > 0 { // packed
				k := protowire.ConsumeFieldValue(num, wireType(fd.Kind()), v)
				if k < 0 {
					return fmt.Sprintf("bad packed %x", v)
				}
				fields[num] = append(fields[num], scalarView(wireType(fd.Kind()), v[:k]))
				v = v[k:]
			}
		default:
			fields[num] = append(fields[num], fmt.Sprintf("%q", v))
		}
		if fd != nil && fd.IsMap() {
			slices.Sort(fields[num])
		}
	}
	var out []string
	for _, num := range slices.Sorted(maps.Keys(fields)) {
		out = append(out, fmt.Sprintf("%d:[%s]", num, strings.Join(fields[num], " ")))
	}
	return strings.Join(out, " ")
}

// scalarView is one value of wire type typ other than bytes, by its value.
func scalarView(typ protowire.Type, val []byte) string {
	switch typ {
	case protowire.VarintType:
		v, _ := protowire.ConsumeVarint(val)
		return fmt.Sprint(v)
	case protowire.Fixed32Type:
		v, _ := protowire.ConsumeFixed32(val)
		return fmt.Sprintf("f%d", v)
	case protowire.Fixed64Type:
		v, _ := protowire.ConsumeFixed64(val)
		return fmt.Sprintf("d%d", v)
	}
	return fmt.Sprintf("group %x", val)
}
