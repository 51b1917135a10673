package fromopenapi

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/idemgate/idemgate/policy"
)

// Drift is what Check found: the description's enforceable operations the
// policy does not enforce, and the policy's enforcing routes that no
// operation reaches.
type Drift struct {
	// Unenforced are "METHOD PATH (operationId): why" lines.
	Unenforced []string
	// Orphans are "route NAME (MATCH)" lines.
	Orphans []string
}

// Empty reports whether nothing drifted.
func (d Drift) Empty() bool { return len(d.Unenforced) == 0 && len(d.Orphans) == 0 }

// paramValue fills a path parameter in the request Check builds for an
// operation: unlike any literal segment, so /v1/invoices/{id} is not read
// as a neighbouring /v1/invoices/upcoming.
const paramValue = "openapi-param-1"

var templateParamRE = regexp.MustCompile(`\{[^{}/]*\}`)

// Check compares pol with doc. An operation counts as enforceable as init
// maps it (POST and PATCH, and PUT or DELETE declaring a key: Generate's
// rules), and as enforced when the route governing a request to it (as
// policy.Decide picks it, path variants included) enforces its method and
// reads the key header the operation declares. A route with mode enforce
// (the defaults route aside) that governs no operation's request with a
// method it enforces is an orphan.
func Check(doc *Document, pol *policy.Policy) Drift {
	var d Drift
	hit := map[*policy.Route]bool{}
	for _, op := range doc.Operations {
		path := templateParamRE.ReplaceAllString(op.Path, paramValue)
		u, err := url.Parse("http://check.invalid" + path)
		if err != nil || !strings.HasPrefix(op.Path, "/") {
			if enforceable(op) {
				d.Unenforced = append(d.Unenforced, fmt.Sprintf("%s %s%s: the path cannot be requested as written", op.Method, op.Path, idNote(op)))
			}
			continue
		}
		req := &http.Request{Method: op.Method, URL: u, Host: u.Host, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		dec := pol.Decide(req)
		r := dec.Route
		if r != nil && r.Enforces(op.Method) {
			hit[r] = true
		}
		if !enforceable(op) {
			continue
		}
		switch {
		case r == nil || !r.Enforces(op.Method):
			name := "the defaults route"
			if r != nil && r.Name != policy.DefaultRouteName {
				name = "route " + r.Name
			}
			d.Unenforced = append(d.Unenforced, fmt.Sprintf("%s %s%s: not enforced (%s)", op.Method, op.Path, idNote(op), name))
		case op.Key != nil && !r.Key.FromBody() && !strings.EqualFold(r.HeaderName, op.Key.Name) && !strings.EqualFold(r.Header, op.Key.Name):
			d.Unenforced = append(d.Unenforced, fmt.Sprintf("%s %s%s: route %s reads the key from %s, the description declares %s", op.Method, op.Path, idNote(op), r.Name, r.Header, op.Key.Name))
		case op.Key != nil && op.Key.Required && !r.Required:
			d.Unenforced = append(d.Unenforced, fmt.Sprintf("%s %s%s: route %s lets a request without %s through, the description requires it", op.Method, op.Path, idNote(op), r.Name, op.Key.Name))
		}
	}
	for _, r := range pol.Routes() {
		if r.Name == policy.DefaultRouteName || r.Mode != policy.ModeEnforce || hit[r] {
			continue
		}
		d.Orphans = append(d.Orphans, fmt.Sprintf("route %s (%s) matches no operation of the description", r.Name, r.Match))
	}
	return d
}

// enforceable reports whether Generate would enforce op.
func enforceable(op Operation) bool {
	switch op.Method {
	case http.MethodPost, http.MethodPatch:
		return true
	case http.MethodPut, http.MethodDelete:
		return op.Key != nil
	}
	return false
}
