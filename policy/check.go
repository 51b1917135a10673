package policy

import (
	"github.com/idemgate/idemgate/policy/fingerprint"
)

// checkProtobuf reports a protobuf body mode without descriptors, and
// descriptors without it.
func checkProtobuf(r *Route, bad func(key, format string, args ...any)) {
	switch {
	case r.Fingerprint.Body == fingerprint.BodyProtobuf && r.Fingerprint.Proto == nil:
		bad("fingerprint.descriptors", "body: protobuf decodes request messages with the service's descriptors: set descriptors to a FileDescriptorSet file (protoc --include_imports --descriptor_set_out, buf build -o)")
	case r.Fingerprint.Body != fingerprint.BodyProtobuf && r.Fingerprint.Proto != nil:
		bad("fingerprint.descriptors", "is only read with fingerprint.body: protobuf (it is %q)", r.Fingerprint.Body)
	}
}
