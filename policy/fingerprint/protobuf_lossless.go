package fingerprint

import (
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// lossless reports whether the canonical protobuf form of the message
// encoded in b under md (decoded into dynamicpb, encoded again
// deterministically) keeps every field b carries, value for value. Only
// then may two bodies that differ on the wire share a fingerprint: the
// canonical form folds what any schema reads alike (field order, map
// entry order, a non-minimal varint) and nothing else. The descriptors a
// route is given may lag the server's, and each change the protobuf guide
// calls compatible (int32 to int64, singular to repeated, implicit to
// explicit presence, a field added, to a oneof too) is a difference that
// decoding under the older descriptor drops and the newer server sees:
// 2^32+5 sent to an int32 field decodes as 5, two values of a singular
// field as the last one, bool 2 as true, an explicit zero as absent. So
// b is lossless only when:
//   - every field number is one md declares, with the wire type of its
//     kind (an unknown field may belong to a oneof of the server's, where
//     its order against known fields decides the value);
//   - every varint is in the range of its kind: int32 and enum values are
//     sign-extended 32-bit numbers, uint32 and sint32 values fit 32 bits,
//     a bool is 0 or 1;
//   - a singular field, and a oneof, appears at most once (message fields
//     included: a second occurrence merges into the first);
//   - a field without presence (proto3 implicit) is never sent with its
//     zero value, which the re-encoding drops;
//   - a repeated scalar arrives as the canonical form writes it: one
//     non-empty packed block when md packs it, one element per tag when
//     not;
//   - a map entry has its key and its value once each and nothing else,
//     and no key repeats;
//   - no group and no float NaN (a float32 NaN's payload may change on its
//     way through float64);
//   - every message inside is lossless under its own descriptor.
//
// Anything else is fingerprinted by its bytes (protoBody): never folded.
// Pinned by TestProtobufLossless and FuzzProtobufCanonical.
func lossless(md protoreflect.MessageDescriptor, b []byte) bool {
	fields := md.Fields()
	var seen []protowire.Number // singular fields and packed blocks met so far
	var oneofs []protoreflect.OneofDescriptor
	var keys map[protowire.Number]map[any]struct{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return false
		}
		val := b[:m]
		b = b[m:]
		fd := fields.ByNumber(num)
		if fd == nil {
			return false
		}
		switch {
		case fd.IsMap():
			if typ != protowire.BytesType {
				return false
			}
			entry, _ := protowire.ConsumeBytes(val)
			key, ok := mapEntryLossless(fd, entry)
			if !ok {
				return false
			}
			if keys == nil {
				keys = make(map[protowire.Number]map[any]struct{})
			}
			if keys[num] == nil {
				keys[num] = make(map[any]struct{})
			}
			if _, dup := keys[num][key]; dup {
				return false
			}
			keys[num][key] = struct{}{}
		case fd.IsList():
			if fd.IsPacked() {
				if typ != protowire.BytesType || slices.Contains(seen, num) {
					return false
				}
				seen = append(seen, num)
				block, _ := protowire.ConsumeBytes(val)
				if len(block) == 0 || !packedLossless(fd, block) {
					return false
				}
				continue
			}
			if _, ok := valueLossless(fd, typ, val); !ok {
				return false
			}
		default:
			if slices.Contains(seen, num) {
				return false
			}
			seen = append(seen, num)
			if od := fd.ContainingOneof(); od != nil {
				if slices.Contains(oneofs, od) {
					return false
				}
				oneofs = append(oneofs, od)
			}
			zero, ok := valueLossless(fd, typ, val)
			if !ok || (zero && !fd.HasPresence()) {
				return false
			}
		}
	}
	return true
}

// mapEntryLossless checks one map entry of fd (the bytes inside its length
// prefix): field 1, the key, and field 2, the value, once each and
// nothing else, as the canonical form writes every entry. It returns the
// key as a comparable value (its varint or fixed bits, or its bytes as a
// string), equal for two entries exactly when their keys are.
func mapEntryLossless(fd protoreflect.FieldDescriptor, b []byte) (any, bool) {
	var key any
	var haveKey, haveVal bool
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil, false
		}
		val := b[:m]
		b = b[m:]
		switch {
		case num == 1 && !haveKey:
			if _, ok := valueLossless(fd.MapKey(), typ, val); !ok {
				return nil, false
			}
			haveKey = true
			switch typ {
			case protowire.BytesType:
				k, _ := protowire.ConsumeBytes(val)
				key = string(k)
			case protowire.VarintType:
				key, _ = protowire.ConsumeVarint(val)
			case protowire.Fixed32Type:
				key, _ = protowire.ConsumeFixed32(val)
			default:
				key, _ = protowire.ConsumeFixed64(val)
			}
		case num == 2 && !haveVal:
			if _, ok := valueLossless(fd.MapValue(), typ, val); !ok {
				return nil, false
			}
			haveVal = true
		default:
			return nil, false
		}
	}
	return key, haveKey && haveVal
}

// packedLossless checks each element of a packed block of fd.
func packedLossless(fd protoreflect.FieldDescriptor, b []byte) bool {
	typ := wireType(fd.Kind())
	for len(b) > 0 {
		var n int
		switch typ {
		case protowire.VarintType:
			_, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			_, n = protowire.ConsumeFixed32(b)
		case protowire.Fixed64Type:
			_, n = protowire.ConsumeFixed64(b)
		default:
			return false
		}
		if n < 0 {
			return false
		}
		if _, ok := valueLossless(fd, typ, b[:n]); !ok {
			return false
		}
		b = b[n:]
	}
	return true
}

// valueLossless checks one value of fd as sent with wire type typ (val is
// the value's bytes after its tag): the wire type is its kind's and the
// kind holds the value exactly. zero reports the value the canonical
// form leaves out of a field without presence.
func valueLossless(fd protoreflect.FieldDescriptor, typ protowire.Type, val []byte) (zero, ok bool) {
	kind := fd.Kind()
	if typ != wireType(kind) {
		return false, false
	}
	switch typ {
	case protowire.VarintType:
		v, n := protowire.ConsumeVarint(val)
		if n < 0 {
			return false, false
		}
		switch kind {
		case protoreflect.BoolKind:
			ok = v <= 1
		case protoreflect.Int32Kind, protoreflect.EnumKind:
			ok = v == uint64(int64(int32(v)))
		case protoreflect.Uint32Kind, protoreflect.Sint32Kind:
			ok = v <= math.MaxUint32
		default:
			ok = true
		}
		return v == 0, ok
	case protowire.Fixed32Type:
		v, n := protowire.ConsumeFixed32(val)
		if n < 0 {
			return false, false
		}
		if kind == protoreflect.FloatKind && math.IsNaN(float64(math.Float32frombits(v))) {
			return false, false
		}
		return v == 0, true
	case protowire.Fixed64Type:
		v, n := protowire.ConsumeFixed64(val)
		if n < 0 {
			return false, false
		}
		if kind == protoreflect.DoubleKind && math.IsNaN(math.Float64frombits(v)) {
			return false, false
		}
		return v == 0, true
	case protowire.BytesType:
		v, n := protowire.ConsumeBytes(val)
		if n < 0 {
			return false, false
		}
		if kind == protoreflect.MessageKind {
			return false, lossless(fd.Message(), v)
		}
		return len(v) == 0, true
	}
	return false, false
}

// wireType returns the wire type the canonical form writes one value of
// kind with; a group's (StartGroupType) is never accepted by the callers.
func wireType(kind protoreflect.Kind) protowire.Type {
	switch kind {
	case protoreflect.BoolKind, protoreflect.EnumKind, protoreflect.Int32Kind, protoreflect.Sint32Kind,
		protoreflect.Uint32Kind, protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Uint64Kind:
		return protowire.VarintType
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return protowire.BytesType
	}
	return protowire.StartGroupType
}
