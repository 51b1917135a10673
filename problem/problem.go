// Package problem writes RFC 9457 problem details, the body of every error
// response idemgate itself produces, and holds their catalog (Catalog): the
// proxy and the admin listener answer only with its kinds.
package problem

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Base is the prefix of every problem type URI idemgate produces; the
// suffix names the case and never changes once released.
const Base = "https://idemgate.dev/problems/"

// Details is an RFC 9457 problem details object (media type
// application/problem+json).
type Details struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// RequestID is the request's X-Request-Id (the client's, or the one
	// idemgate made), an extension member (RFC 9457 section 3.2) so that a
	// client can quote it and an operator find the access line.
	RequestID string `json:"request_id,omitempty"`
	// RetryAfter, in whole seconds, is sent as the Retry-After field when > 0
	// (RFC 9110 section 10.2.3); it is not part of the JSON body.
	RetryAfter int `json:"-"`
	// Outcome is the metrics outcome of the Kind d was made from (Kind.With);
	// the proxy counts the request under it. Not part of the JSON body.
	Outcome string `json:"-"`
}

// Write answers with d: status d.Status, the JSON body and the fields that
// keep it from being cached or sniffed as another media type.
func Write(w http.ResponseWriter, d Details) { writeAs(w, d, MediaType) }

// writeAs answers with d as RFC 9457 JSON under contentType.
func writeAs(w http.ResponseWriter, d Details, contentType string) {
	body, err := json.Marshal(d)
	if err != nil { // cannot happen for these field types
		d = Details{Title: "internal error", Status: http.StatusInternalServerError}
		body, _ = json.Marshal(d)
	}
	body = append(body, '\n')
	writeBody(w, d, contentType, body)
}

// Publisher writes problems the way the operator publishes them (the
// `problems:` config section): type URIs under TypeBase instead of Base,
// so that they resolve on the operator's own documentation, and a Link to
// DocsURL with relation "describedby", as the Idempotency-Key draft
// (section 2.7) suggests for its error responses. The catalog's slugs
// never change; only the base does. The zero Publisher writes as Write.
// WriteFormat also renders the body in the API's own error shape (Format).
type Publisher struct {
	// TypeBase replaces Base in every type URI; "" keeps Base.
	TypeBase string
	// DocsURL, when set, is linked from every problem response.
	DocsURL string
}

// Write answers with d as Write does, its type under p.TypeBase, with the
// Link to p.DocsURL.
func (p Publisher) Write(w http.ResponseWriter, d Details) {
	_ = p.WriteFormat(w, d, nil)
}

// WriteFormat answers with d as Write does, in format f (nil: RFC 9457):
// f's template renders the body from d with its type already under
// p.TypeBase, under f's content type, with f's headers for d's kind. The
// error says why f's template failed on d; the answer was then RFC 9457,
// and the caller logs it.
func (p Publisher) WriteFormat(w http.ResponseWriter, d Details, f *Format) error {
	if p.TypeBase != "" {
		if slug, ok := strings.CutPrefix(d.Type, Base); ok {
			d.Type = p.TypeBase + slug
		}
	}
	if p.DocsURL != "" {
		w.Header().Add("Link", "<"+p.DocsURL+`>; rel="describedby"`)
	}
	if f == nil {
		Write(w, d)
		return nil
	}
	return f.write(w, d)
}
