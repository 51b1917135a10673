package policy

import (
	"github.com/idemgate/idemgate/internal/jsonpointer"
	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/policy/identity"
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

// checkKeySource validates k at path ("routes[i].key").
func checkKeySource(k *identity.KeySource, path string) []error {
	var errs []error
	switch k.From {
	case "":
		k.From = identity.KeyFromHeader
		fallthrough
	case identity.KeyFromHeader:
		if k.Pointer != "" {
			errs = append(errs, fieldErr(path+".pointer", "applies only with key.from: body (from is header; the field is key.name or header)"))
		}
	case identity.KeyFromBody:
		if k.Pointer == "" {
			errs = append(errs, fieldErr(path+".pointer", "is required with key.from: body, e.g. /id"))
		} else if _, err := jsonpointer.Parse(k.Pointer); err != nil {
			errs = append(errs, fieldErr(path+".pointer", "%v", err))
		}
	default:
		errs = append(errs, fieldErr(path+".from", "%q must be header or body", k.From))
	}
	return errs
}

// checkJWT returns the problems of s as *FieldError with paths
// path+".jwt…".
func checkJWT(s *identity.JWTSettings, path string) []error {
	var errs []error
	s.Check(func(field, format string, args ...any) {
		errs = append(errs, fieldErr(path+".jwt"+field, format, args...))
	})
	return errs
}
