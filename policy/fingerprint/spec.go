package fingerprint

// BodyMode says how the request body enters the fingerprint.
type BodyMode string

// Body modes.
const (
	BodyRaw    BodyMode = "raw"
	BodyJSON   BodyMode = "json"
	BodyIgnore BodyMode = "ignore"
)

// Spec is a parsed `fingerprint:` setting.
type Spec struct {
	Headers []string // header names, lowercased and sorted
	Query   bool
	Body    BodyMode
	// Exclude holds RFC 6901 JSON pointers (fingerprint.exclude), sorted
	// and without duplicates: the members they name are removed from a
	// JSON body before it is canonicalized. Only with Body json.
	Exclude []string
	// NormalizeMediaTypes (`media_types: normalize`) fingerprints a
	// Content-Type value in its normal form (NormalizeMediaType), so a
	// retry that differs only by letter case, spacing, parameter order or
	// a parameter the media type defines as default is the same request
	// (TestMediaTypes). Off (`exact`, the default), the value enters as sent.
	NormalizeMediaTypes bool
	// Proto (`fingerprint.descriptors`, a FileDescriptorSet file) decodes
	// the request messages of Body protobuf; set exactly with it.
	Proto *ProtoSchema
}
