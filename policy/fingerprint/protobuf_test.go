package fingerprint

import (
	"encoding/binary"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/protodesctest"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// writeOrdersDescriptors writes a FileDescriptorSet of orders.v1: Orders/Create
// takes a CreateRequest {map<string,int32> items = 1; Meta meta = 2;
// string note = 3;}, Meta {string request_id = 1;}; it returns its path.
func writeOrdersDescriptors(t testing.TB) string {
	t.Helper()
	str, i32, msg := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), descriptorpb.FieldDescriptorProto_TYPE_INT32.Enum(), descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
	opt, rep := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	field := func(name string, n int32, typ *descriptorpb.FieldDescriptorProto_Type, label *descriptorpb.FieldDescriptorProto_Label, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ, Label: label, JsonName: proto.String(name)}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	file := &descriptorpb.FileDescriptorProto{
		Name: proto.String("orders.proto"), Package: proto.String("orders.v1"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Meta"), Field: []*descriptorpb.FieldDescriptorProto{field("request_id", 1, str, opt, "")}},
			{
				Name: proto.String("CreateRequest"),
				Field: []*descriptorpb.FieldDescriptorProto{
					field("items", 1, msg, rep, ".orders.v1.CreateRequest.ItemsEntry"),
					field("meta", 2, msg, opt, ".orders.v1.Meta"),
					field("note", 3, str, opt, ""),
				},
				NestedType: []*descriptorpb.DescriptorProto{{
					Name:    proto.String("ItemsEntry"),
					Field:   []*descriptorpb.FieldDescriptorProto{field("key", 1, str, opt, ""), field("value", 2, i32, opt, "")},
					Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
				}},
			},
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name:   proto.String("Orders"),
			Method: []*descriptorpb.MethodDescriptorProto{{Name: proto.String("Create"), InputType: proto.String(".orders.v1.CreateRequest"), OutputType: proto.String(".orders.v1.CreateRequest")}},
		}},
	}
	return protodesctest.Write(t, "orders.binpb", file)
}

// createRequest encodes a CreateRequest by hand, map entries in the order
// given, as a gRPC length-prefixed message.
func createRequest(items [][2]any, requestID, note string) []byte {
	var m []byte
	for _, it := range items {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, it[0].(string))
		e = protowire.AppendTag(e, 2, protowire.VarintType)
		e = protowire.AppendVarint(e, uint64(it[1].(int)))
		m = protowire.AppendTag(m, 1, protowire.BytesType)
		m = protowire.AppendBytes(m, e)
	}
	if requestID != "" {
		var meta []byte
		meta = protowire.AppendTag(meta, 1, protowire.BytesType)
		meta = protowire.AppendString(meta, requestID)
		m = protowire.AppendTag(m, 2, protowire.BytesType)
		m = protowire.AppendBytes(m, meta)
	}
	if note != "" {
		m = protowire.AppendTag(m, 3, protowire.BytesType)
		m = protowire.AppendString(m, note)
	}
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(m))), m...)
}

// TestProtobufFingerprint: under body: protobuf two encodings of one
// message (map entries in another order) fingerprint equal, which raw
// bytes do not, another message differs, excluded fields do not count,
// and a body that does not decode enters as its bytes.
func TestProtobufFingerprint(t *testing.T) {
	schema, err := LoadProtoSchema(writeOrdersDescriptors(t))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", "http://x/orders.v1.Orders/Create", nil)
	pb := Spec{Body: BodyProtobuf, Proto: schema}
	raw := Spec{Body: BodyRaw}
	ab := createRequest([][2]any{{"apple", 1}, {"pear", 2}}, "r1", "n")
	ba := createRequest([][2]any{{"pear", 2}, {"apple", 1}}, "r1", "n")
	if raw.Of(req, ab) == raw.Of(req, ba) {
		t.Fatal("the two encodings are byte-equal; the test proves nothing")
	}
	if pb.Of(req, ab) != pb.Of(req, ba) {
		t.Error("one message, map entries in another order: fingerprints differ")
	}
	if pb.Of(req, ab) == pb.Of(req, createRequest([][2]any{{"apple", 1}, {"pear", 3}}, "r1", "n")) {
		t.Error("another map value: same fingerprint")
	}
	if pb.Of(req, ab) == pb.Of(req, createRequest([][2]any{{"apple", 1}, {"pear", 2}}, "r2", "n")) {
		t.Error("another request_id without exclusion: same fingerprint")
	}
	ex := Spec{Body: BodyProtobuf, Proto: schema, Exclude: []string{"/meta/request_id"}}
	if ex.Of(req, ab) != ex.Of(req, createRequest([][2]any{{"pear", 2}, {"apple", 1}}, "r2", "n")) {
		t.Error("excluded request_id still counts")
	}
	if ex.Of(req, ab) == pb.Of(req, ab) {
		t.Error("an exclusion does not change the encoding")
	}
	if ex.Of(req, ab) == ex.Of(req, createRequest([][2]any{{"pear", 2}, {"apple", 1}}, "r2", "other")) {
		t.Error("a field not excluded stopped counting")
	}
	garbage := []byte{0, 0, 0, 0, 2, 0xff, 0xff}
	compressed := append([]byte{1}, ab[1:]...)
	for _, body := range [][]byte{garbage, compressed, nil} {
		in := Input{Method: "POST", Path: "/orders.v1.Orders/Create", BodyMode: BodyProtobuf, Body: body, Proto: schema}
		if !strings.Contains(string(Encoding(in)), "F") {
			t.Errorf("body %x: not entered as its bytes", body)
		}
	}
	other, _ := http.NewRequest("POST", "http://x/orders.v1.Orders/Delete", nil)
	if pb.Of(other, ab) != (Spec{Body: BodyProtobuf}).Of(other, ab) {
		t.Error("a method the descriptors do not have: not entered as bytes")
	}
	if r := pb.Recipe(); !strings.Contains(r, "b=protobuf") || !strings.Contains(r, "d="+schema.Digest) {
		t.Errorf("recipe %q", r)
	}
	if _, err := ParseRecipe(pb.Recipe()); err == nil {
		t.Error("ParseRecipe accepted a protobuf recipe whose descriptors it cannot load")
	}
}
