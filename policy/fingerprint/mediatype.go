package fingerprint

import (
	"mime"
	"strings"
)

// The values of fingerprint.media_types. MediaTypesNormalize is also the
// value of the recipe key m.
const (
	// MediaTypesExact fingerprints Content-Type as sent (the default).
	MediaTypesExact = "exact"
	// MediaTypesNormalize fingerprints its normal form (NormalizeMediaType).
	MediaTypesNormalize = "normalize"
)

// NormalizeMediaType returns the normal form of a Content-Type value: type,
// subtype and parameter names in lower case (RFC 9110 section 8.3.1 makes
// them case-insensitive), the charset value in lower case (charset names
// are case-insensitive, RFC 9110 section 8.3.2), parameters sorted, no
// optional whitespace, and without a charset parameter that the media type
// defines as its only or default value:
//
//   - application/json and every +json type: charset=utf-8 (RFC 8259
//     section 11 defines no charset parameter; JSON exchanged between
//     systems is UTF-8, section 8.1);
//   - application/x-www-form-urlencoded: charset=utf-8 (the WHATWG URL
//     standard encodes it as UTF-8 and defines no parameter).
//
// A value that does not parse as a media type is returned unchanged, so
// two malformed values still compare as sent.
func NormalizeMediaType(v string) string {
	mt, params, err := mime.ParseMediaType(v)
	if err != nil {
		return v
	}
	if cs, ok := params["charset"]; ok {
		params["charset"] = strings.ToLower(cs)
		if params["charset"] == "utf-8" && utf8Only(mt) {
			delete(params, "charset")
		}
	}
	if len(params) == 0 {
		return mt
	}
	// mime.FormatMediaType sorts the parameters and quotes values that
	// need it; it fails only on values it cannot represent.
	if out := mime.FormatMediaType(mt, params); out != "" {
		return out
	}
	return v
}

// utf8Only reports whether media type mt (lower case) is one whose charset
// can only be UTF-8, so that charset=utf-8 says nothing.
func utf8Only(mt string) bool {
	return mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == "application/x-www-form-urlencoded"
}
