// Package problem writes RFC 9457 problem details, the body of every error
// response idemgate itself produces, and holds their catalog (Catalog): the
// proxy and the admin listener answer only with its kinds.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
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
