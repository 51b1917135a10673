// Package problem writes RFC 9457 problem details, the body of every error
// response idemgate itself produces, and holds their catalog (Catalog): the
// proxy and the admin listener answer only with its kinds.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
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
	// RetryAfter, in whole seconds, is sent as the Retry-After field when > 0
	// (RFC 9110 section 10.2.3); it is not part of the JSON body.
	RetryAfter int `json:"-"`
	// Outcome is the metrics outcome of the Kind d was made from (Kind.With);
	// the proxy counts the request under it. Not part of the JSON body.
	Outcome string `json:"-"`
}

// Write answers with d: status d.Status, the JSON body and the fields that
// keep it from being cached or sniffed as another media type.
func Write(w http.ResponseWriter, d Details) {
	body, err := json.Marshal(d)
	if err != nil { // cannot happen for these field types
		d = Details{Title: "internal error", Status: http.StatusInternalServerError}
		body, _ = json.Marshal(d)
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if d.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(d.RetryAfter))
	}
	w.WriteHeader(d.Status)
	_, _ = w.Write(body)
}

// Publisher writes problems the way the operator publishes them (the
// `problems:` config section): type URIs under TypeBase instead of Base,
// so that they resolve on the operator's own documentation, and a Link to
// DocsURL with relation "describedby", as the Idempotency-Key draft
// (section 2.7) suggests for its error responses. The catalog's slugs
// never change; only the base does. The zero Publisher writes as Write.
type Publisher struct {
	// TypeBase replaces Base in every type URI; "" keeps Base.
	TypeBase string
	// DocsURL, when set, is linked from every problem response.
	DocsURL string
}

// Write answers with d as Write does, its type under p.TypeBase, with the
// Link to p.DocsURL.
func (p Publisher) Write(w http.ResponseWriter, d Details) {
	if p.TypeBase != "" {
		if slug, ok := strings.CutPrefix(d.Type, Base); ok {
			d.Type = p.TypeBase + slug
		}
	}
	if p.DocsURL != "" {
		w.Header().Add("Link", "<"+p.DocsURL+`>; rel="describedby"`)
	}
	Write(w, d)
}
