package fingerprint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/internal/protodesctest"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// writeProbeDescriptors writes a proto3 FileDescriptorSet of probe.v1:
// Prober/Send takes a Probe {int32 amount = 1; string item = 2; bool flag
// = 3; uint32 count = 4; sint32 delta = 5; repeated int64 nums = 6; float
// ratio = 7; oneof choice {int64 a = 8; string b = 9;} map<string,int32>
// m = 10; Probe child = 11; Color color = 12; repeated string tags = 13;}
// with enum Color {RED = 0; BLUE = 1;}: a kind of each rule lossless
// checks. It returns its path.
func writeProbeDescriptors(t testing.TB) string {
	t.Helper()
	type T = descriptorpb.FieldDescriptorProto_Type
	opt, rep := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	field := func(name string, n int32, typ T, label *descriptorpb.FieldDescriptorProto_Label, typeName string, oneof *int32) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ.Enum(), Label: label, JsonName: proto.String(name), OneofIndex: oneof}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	choice := proto.Int32(0)
	file := &descriptorpb.FileDescriptorProto{
		Name: proto.String("probe.proto"), Package: proto.String("probe.v1"), Syntax: proto.String("proto3"),
		EnumType: []*descriptorpb.EnumDescriptorProto{{Name: proto.String("Color"), Value: []*descriptorpb.EnumValueDescriptorProto{
			{Name: proto.String("RED"), Number: proto.Int32(0)}, {Name: proto.String("BLUE"), Number: proto.Int32(1)}}}},
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Probe"),
			Field: []*descriptorpb.FieldDescriptorProto{
				field("amount", 1, descriptorpb.FieldDescriptorProto_TYPE_INT32, opt, "", nil),
				field("item", 2, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, "", nil),
				field("flag", 3, descriptorpb.FieldDescriptorProto_TYPE_BOOL, opt, "", nil),
				field("count", 4, descriptorpb.FieldDescriptorProto_TYPE_UINT32, opt, "", nil),
				field("delta", 5, descriptorpb.FieldDescriptorProto_TYPE_SINT32, opt, "", nil),
				field("nums", 6, descriptorpb.FieldDescriptorProto_TYPE_INT64, rep, "", nil),
				field("ratio", 7, descriptorpb.FieldDescriptorProto_TYPE_FLOAT, opt, "", nil),
				field("a", 8, descriptorpb.FieldDescriptorProto_TYPE_INT64, opt, "", choice),
				field("b", 9, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, "", choice),
				field("m", 10, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, rep, ".probe.v1.Probe.MEntry", nil),
				field("child", 11, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, opt, ".probe.v1.Probe", nil),
				field("color", 12, descriptorpb.FieldDescriptorProto_TYPE_ENUM, opt, ".probe.v1.Color", nil),
				field("tags", 13, descriptorpb.FieldDescriptorProto_TYPE_STRING, rep, "", nil),
			},
			OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("choice")}},
			NestedType: []*descriptorpb.DescriptorProto{{
				Name: proto.String("MEntry"),
				Field: []*descriptorpb.FieldDescriptorProto{
					field("key", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, "", nil),
					field("value", 2, descriptorpb.FieldDescriptorProto_TYPE_INT32, opt, "", nil),
				},
				Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
			}},
		}},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name:   proto.String("Prober"),
			Method: []*descriptorpb.MethodDescriptorProto{{Name: proto.String("Send"), InputType: proto.String(".probe.v1.Probe"), OutputType: proto.String(".probe.v1.Probe")}},
		}},
	}
	return protodesctest.Write(t, "probe.binpb", file)
}

// wire builds a protobuf message by hand, field by field, in the order
// and encoding given.
type wire []byte

func (w wire) varint(n protowire.Number, v uint64) wire {
	return protowire.AppendVarint(protowire.AppendTag(w, n, protowire.VarintType), v)
}

func (w wire) bytes(n protowire.Number, v []byte) wire {
	return protowire.AppendBytes(protowire.AppendTag(w, n, protowire.BytesType), v)
}

func (w wire) fixed32(n protowire.Number, v uint32) wire {
	return protowire.AppendFixed32(protowire.AppendTag(w, n, protowire.Fixed32Type), v)
}

// entry is a map entry of Probe.m, key then value.
func entry(k string, v uint64) []byte { return wire(nil).bytes(1, []byte(k)).varint(2, v) }

// grpcFrame is m as an uncompressed gRPC length-prefixed message.
func grpcFrame(m []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(m))), m...)
}

// TestProtobufLossless: every wire difference that decoding under the
// route's descriptors would drop (the descriptors may lag the server's:
// int32 where the server has int64, singular where it has repeated, a
// field it added) is fingerprinted by its bytes, so the two requests
// differ; CheckBody still accepts them (the server may read them). What
// no schema reads differently (map entry and field order, a non-minimal
// varint) still folds.
func TestProtobufLossless(t *testing.T) {
	schema, err := LoadProtoSchema(writeProbeDescriptors(t))
	if err != nil {
		t.Fatal(err)
	}
	const path = "/probe.v1.Prober/Send"
	req, _ := http.NewRequest("POST", "http://x"+path, nil)
	pb := Spec{Body: BodyProtobuf, Proto: schema}
	nan := math.Float32bits(float32(math.NaN()))
	for _, c := range []struct {
		name          string
		base, variant wire
	}{
		{"int32 given 2^32+5", wire(nil).varint(1, 5), wire(nil).varint(1, 1<<32+5)},
		{"int32 -1 as 5 bytes", wire(nil).varint(1, math.MaxUint64), wire(nil).varint(1, math.MaxUint32)},
		{"enum given 2^32+1", wire(nil).varint(12, 1), wire(nil).varint(12, 1<<32+1)},
		{"uint32 values 2^32 apart", wire(nil).varint(4, 7), wire(nil).varint(4, 1<<32+7)},
		{"sint32 beyond 32 bits", wire(nil).varint(5, 2), wire(nil).varint(5, 1<<32+2)},
		{"bool 2 vs 1", wire(nil).varint(3, 1), wire(nil).varint(3, 2)},
		{"singular string sent twice", wire(nil).bytes(2, []byte("b")), wire(nil).bytes(2, []byte("a")).bytes(2, []byte("b"))},
		{"singular int32 sent twice", wire(nil).varint(1, 5), wire(nil).varint(1, 4).varint(1, 5)},
		{"message field sent twice", wire(nil).bytes(11, wire(nil).varint(1, 1).varint(3, 1)), wire(nil).bytes(11, wire(nil).varint(1, 1)).bytes(11, wire(nil).varint(3, 1))},
		{"explicit zero vs absent", wire(nil).bytes(2, []byte("x")), wire(nil).bytes(2, []byte("x")).varint(1, 0)},
		{"explicit empty string vs absent", wire(nil).varint(1, 5), wire(nil).varint(1, 5).bytes(2, nil)},
		{"two members of a oneof", wire(nil).bytes(9, []byte("s")), wire(nil).varint(8, 3).bytes(9, []byte("s"))},
		{"unknown field", wire(nil).varint(1, 5), wire(nil).varint(1, 5).varint(99, 1)},
		{"unknown field in a child", wire(nil).bytes(11, wire(nil).varint(1, 5)), wire(nil).bytes(11, wire(nil).varint(1, 5).varint(99, 1))},
		{"known field, other wire type", wire(nil).varint(1, 5), wire(nil).varint(1, 5).fixed32(1, 5)},
		{"out-of-range varint in a child", wire(nil).bytes(11, wire(nil).varint(1, 5)), wire(nil).bytes(11, wire(nil).varint(1, 1<<32+5))},
		{"map key repeated", wire(nil).bytes(10, entry("k", 2)), wire(nil).bytes(10, entry("k", 1)).bytes(10, entry("k", 2))},
		{"map entry without its value", wire(nil).bytes(10, entry("k", 0)), wire(nil).bytes(10, wire(nil).bytes(1, []byte("k")))},
		{"map entry with an unknown field", wire(nil).bytes(10, entry("k", 1)), wire(nil).bytes(10, wire(entry("k", 1)).varint(3, 9))},
		{"packed field unpacked", wire(nil).bytes(6, protowire.AppendVarint(protowire.AppendVarint(nil, 1), 2)), wire(nil).varint(6, 1).varint(6, 2)},
		{"packed field in two blocks", wire(nil).bytes(6, protowire.AppendVarint(protowire.AppendVarint(nil, 1), 2)), wire(nil).bytes(6, protowire.AppendVarint(nil, 1)).bytes(6, protowire.AppendVarint(nil, 2))},
		{"empty packed block", wire(nil).varint(1, 5), wire(nil).varint(1, 5).bytes(6, nil)},
		{"float NaN", wire(nil).fixed32(7, math.Float32bits(1.5)), wire(nil).fixed32(7, nan|1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			base, variant := grpcFrame(c.base), grpcFrame(c.variant)
			if _, err := schema.canonical(path, base, nil); err != nil {
				t.Fatalf("base %x: %v", base, err)
			}
			if _, err := schema.canonical(path, variant, nil); err != errLossy {
				t.Errorf("variant %x: canonical error %v, want errLossy", variant, err)
			}
			if err := pb.CheckBody(req, variant); err != nil {
				t.Errorf("CheckBody refused %x: %v", variant, err)
			}
			if pb.Of(req, base) == pb.Of(req, variant) {
				t.Errorf("%x and %x share a fingerprint", base, variant)
			}
			in := Input{Method: "POST", Path: path, BodyMode: BodyProtobuf, Body: variant, Proto: schema}
			if enc := Encoding(in); !bytes.Contains(enc, variant) {
				t.Errorf("variant not entered as its bytes: %x", enc)
			}
		})
	}

	// What every schema reads alike still folds.
	for _, c := range []struct {
		name string
		a, b wire
	}{
		{"map entries reordered", wire(nil).bytes(10, entry("x", 1)).bytes(10, entry("y", 2)), wire(nil).bytes(10, entry("y", 2)).bytes(10, entry("x", 1))},
		{"fields reordered", wire(nil).varint(1, 5).bytes(2, []byte("i")).bytes(13, []byte("t")), wire(nil).bytes(13, []byte("t")).bytes(2, []byte("i")).varint(1, 5)},
		{"non-minimal varint", wire(nil).varint(1, 5), append(protowire.AppendTag(nil, 1, protowire.VarintType), 0x85, 0x00)},
		{"repeated interleaved", wire(nil).bytes(13, []byte("p")).bytes(13, []byte("q")).varint(1, 5), wire(nil).bytes(13, []byte("p")).varint(1, 5).bytes(13, []byte("q"))},
	} {
		a, b := grpcFrame(c.a), grpcFrame(c.b)
		if bytes.Equal(a, b) {
			t.Fatalf("%s: the encodings are equal; the case proves nothing", c.name)
		}
		if pb.Of(req, a) != pb.Of(req, b) {
			t.Errorf("%s: %x and %x fingerprint differently", c.name, a, b)
		}
	}

	// A negative int32 as protobuf writes it (ten bytes) and an explicit
	// zero of a oneof member (it has presence) are exact.
	for _, m := range []wire{wire(nil).varint(1, math.MaxUint64), wire(nil).varint(8, 0), wire(nil).bytes(11, nil)} {
		if _, err := schema.canonical(path, grpcFrame(m), nil); err != nil {
			t.Errorf("%x: %v", m, err)
		}
	}
}

// FuzzProtobufLossless: for any message under the Probe schema (a field
// of each kind lossless checks), a body whose canonical form is used
// carries the same fields and values as its canonical encoding
// (wireView), so two bodies sharing a canonical form mean the same to any
// schema; any other body that decodes is fingerprinted by its bytes.
func FuzzProtobufLossless(f *testing.F) {
	schema, err := LoadProtoSchema(writeProbeDescriptors(f))
	if err != nil {
		f.Fatal(err)
	}
	const path = "/probe.v1.Prober/Send"
	md, err := schema.input(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(wire(nil).varint(1, 1<<32+5)))
	f.Add([]byte(wire(nil).bytes(10, entry("k", 1)).bytes(10, entry("j", 2)).varint(3, 1)))
	f.Add([]byte(wire(nil).bytes(11, wire(nil).varint(1, 5).bytes(6, []byte{1, 2})).varint(8, 0)))
	f.Add([]byte(wire(nil).fixed32(7, 0x80000000).varint(12, 1).bytes(13, nil).varint(5, 3)))
	f.Fuzz(func(t *testing.T, m []byte) {
		c, err := schema.canonical(path, grpcFrame(m), nil)
		if err != nil {
			if errors.Is(err, errLossy) && lossless(md, m) {
				t.Fatal("errLossy for a lossless message")
			}
			return
		}
		if a, b := wireView(md, m), wireView(md, c[4:]); a != b {
			t.Fatalf("the canonical form is not what was sent:\nwire      %s\ncanonical %s", a, b)
		}
	})
}
