package fingerprint

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// BodyProtobuf (`fingerprint.body: protobuf`) fingerprints a gRPC request
// body as its canonical protobuf form: each length-prefixed message is
// decoded with the method's input type from the route's descriptors
// (fingerprint.descriptors, a ProtoSchema) and encoded again
// deterministically (fields in number order, map entries sorted by key),
// so two encodings of one message (protobuf fixes no map order) are one
// request and two different messages are not. A message the descriptors
// cannot hold exactly (they may lag the server's: see lossless) is
// fingerprinted by its bytes. docs/protocol.md, "Fingerprint recipes", has
// the encoding.
const BodyProtobuf BodyMode = "protobuf"

// tagBodyProtobuf is the hs1 record of a canonical protobuf body: for each
// message of the body, its canonical encoding's length (4 bytes,
// big-endian) and the encoding. A body that does not decode, or whose
// canonical form would not be a lossless view of it, enters as
// tagBodyFallback with its bytes, as a JSON body that does not parse.
const tagBodyProtobuf = 'G'

// ProtoSchema is a loaded FileDescriptorSet (fingerprint.descriptors, as
// `protoc --include_imports --descriptor_set_out` or `buf build -o`
// writes it): the services and messages a protobuf fingerprint decodes
// request bodies with. Immutable once loaded; safe for concurrent use.
type ProtoSchema struct {
	// Path is the file it was read from, for validate and idemgate policy.
	Path string
	// Digest is the first 16 hex digits of the SHA-256 of the file's
	// bytes; it enters the recipe (key d), so a record fingerprinted under
	// other descriptors is never compared under these.
	Digest string
	files  *protoregistry.Files
}

// LoadProtoSchema reads and links the FileDescriptorSet at path. Its
// errors name the file; every import must be in the set.
func LoadProtoSchema(path string) (*ProtoSchema, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading descriptors: %w", err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("%s is not a FileDescriptorSet: %w", path, err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, fmt.Errorf("%s: linking descriptors (build it with --include_imports): %w", path, err)
	}
	sum := sha256.Sum256(b)
	return &ProtoSchema{Path: path, Digest: hex.EncodeToString(sum[:8]), files: files}, nil
}

// input returns the input message of the gRPC method a request path
// names, /package.Service/Method.
func (s *ProtoSchema) input(path string) (protoreflect.MessageDescriptor, error) {
	svc, method, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if !ok {
		return nil, fmt.Errorf("%q names no gRPC method", path)
	}
	d, err := s.files.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", svc, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("%s is not a service", svc)
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		return nil, fmt.Errorf("service %s has no method %s", svc, method)
	}
	return md.Input(), nil
}

var errNotCanonical = errors.New("the body is not uncompressed length-prefixed messages of the method's input type")

// errLossy is a body that decodes but whose canonical form would drop
// something it carries (see lossless): it is fingerprinted by its bytes,
// not refused, since the server, whose descriptors may be newer than the
// route's, can read it.
var errLossy = errors.New("the canonical form of the body would drop what it carries")

// canonical returns the tagBodyProtobuf record of a gRPC request body
// for path, with the fields that exclude names (JSON-pointer syntax, one
// field name per segment: /meta/request_id) cleared first. Its error is
// errNotCanonical for a body that does not decode, errLossy for one whose
// canonical form would not be a lossless view of it.
func (s *ProtoSchema) canonical(path string, body []byte, exclude [][]string) ([]byte, error) {
	md, err := s.input(path)
	if err != nil {
		return nil, err
	}
	if len(body) == 0 {
		return nil, errNotCanonical
	}
	var out []byte
	for len(body) > 0 {
		// gRPC over HTTP/2, "Length-Prefixed-Message": a compressed flag
		// (a compressed message cannot be decoded here) and a length.
		if len(body) < 5 || body[0] != 0 {
			return nil, errNotCanonical
		}
		n := binary.BigEndian.Uint32(body[1:5])
		if uint64(len(body)-5) < uint64(n) {
			return nil, errNotCanonical
		}
		msg := dynamicpb.NewMessage(md)
		if err := unmarshal(body[5:5+n], msg); err != nil {
			return nil, fmt.Errorf("%w: %w", errNotCanonical, err)
		}
		if !lossless(md, body[5:5+n]) {
			return nil, errLossy
		}
		for _, p := range exclude {
			clearField(msg, p)
		}
		c, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errNotCanonical, err)
		}
		out = binary.BigEndian.AppendUint32(out, uint32(len(c)))
		out = append(out, c...)
		body = body[5+n:]
	}
	return out, nil
}

// CheckBody returns why body cannot be fingerprinted under s, nil when it
// can. Only the protobuf body mode refuses anything: a body that is not
// uncompressed length-prefixed messages of the input type of the method
// req's path names (a method the descriptors lack included). The proxy
// answers it 400 bad-request before anything is claimed: fingerprinted by
// its raw bytes instead, two encodings of one message would be two
// requests again, and a key reused with them 422. A body that decodes but
// carries what the descriptors cannot hold exactly (a field they lack, a
// value out of its kind's range, a singular field sent twice) is accepted
// and fingerprinted by its bytes: the server may well read it.
func (s Spec) CheckBody(req *http.Request, body []byte) error {
	if s.Body != BodyProtobuf || s.Proto == nil {
		return nil
	}
	path := ""
	if req.URL != nil {
		path = req.URL.EscapedPath()
	}
	if _, err := s.Proto.canonical(path, body, nil); err != nil && !errors.Is(err, errLossy) {
		return fmt.Errorf("fingerprint.body is protobuf and the request body does not decode: %w", err)
	}
	return nil
}

// clearField clears the field path names in m, through singular message
// fields; a path that names no set field changes nothing.
func clearField(m protoreflect.Message, path []string) {
	for i, name := range path {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
		if fd == nil || !m.Has(fd) {
			return
		}
		if i == len(path)-1 {
			m.Clear(fd)
			return
		}
		if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() {
			return
		}
		m = m.Mutable(fd).Message()
	}
}

// protoBody returns the body record of a protobuf-mode input: the tag and
// bytes encodeFingerprint writes after the exclusion records.
func protoBody(in Input) (byte, []byte) {
	if in.Proto == nil {
		return tagBodyFallback, in.Body
	}
	c, err := in.Proto.canonical(in.Path, in.Body, parsePointers(sortedExclude(in.Exclude)))
	if err != nil {
		return tagBodyFallback, in.Body
	}
	return tagBodyProtobuf, c
}

// sortedExclude returns ptrs sorted and without duplicates.
func sortedExclude(ptrs []string) []string {
	if slices.IsSorted(ptrs) && len(slices.Compact(slices.Clone(ptrs))) == len(ptrs) {
		return ptrs
	}
	return slices.Compact(slices.Sorted(slices.Values(ptrs)))
}

// unmarshal is proto.Unmarshal with a panic of the decoder returned as an
// error: protobuf-go (v1.36.12) panics on some malformed input into a
// dynamicpb message, a map entry whose key field comes again with another
// wire type among them ("type mismatch: cannot convert nil to map key";
// FuzzProtobufLossless, testdata 25d63c575ed191a7), and a request body
// must get a problem, never a panic in the engine or the handler's server.
func unmarshal(b []byte, m proto.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("protobuf decoder panicked: %v", v)
		}
	}()
	return proto.Unmarshal(b, m)
}
