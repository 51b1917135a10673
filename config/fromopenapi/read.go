// Package fromopenapi turns an API's OpenAPI description (3.0, 3.1 or
// Swagger 2.0, JSON or YAML) into an idemgate configuration, and checks an
// existing configuration against a description. `idemgate init
// --from-openapi` (cmd/idemgate) calls Read, then Generate and Render, or
// Check; docs/openapi.md is the mapping table, each construct and what
// becomes of it.
//
// Read decodes only what the mapping needs (servers, paths, operations,
// parameters, request media types, security, a few extensions), following
// local $refs itself: a schema is never decoded. A general OpenAPI loader
// resolves every schema reference of the document first, which took 1.2 s
// for a 4 MB description on the 2-core reference machine; this reader takes
// a few tens of milliseconds, so an 8 MB description stays far inside
// init's budget (BenchmarkGenerate). Nothing is fetched: a $ref to another
// file is reported, not followed.
package fromopenapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Document is what Read found in a description: every operation, the
// servers and the document's identity.
type Document struct {
	// Title, Version and Spec are info.title, info.version and the
	// openapi (or swagger) version string, for the generated header.
	Title, Version, Spec string
	// Servers are the server URLs in document order, variables
	// substituted by their defaults (Swagger 2.0: scheme://host+basePath
	// per scheme). A relative one ("/api") keeps its path only.
	Servers []string
	// Operations in path order, then in methodOrder.
	Operations []Operation
	// Warnings name what was read partly: a $ref not followed, a
	// parameter that could not be decoded. The operations concerned are
	// still listed.
	Warnings []string
}

// Operation is one method on one path template.
type Operation struct {
	Method string // upper case, e.g. POST
	Path   string // the description's template, e.g. /v1/orders/{id}
	ID     string // operationId, "" if none
	// Summary is the operation's summary (else the first line of its
	// description), for the generated comment.
	Summary string
	// Key is the idempotency key header the operation declares, nil if
	// none (rules in docs/openapi.md, "Keys").
	Key *KeyHeader
	// MediaTypes are the request body's media types (requestBody.content;
	// Swagger 2.0: consumes for a body or formData parameter).
	MediaTypes []string
	// Security is the effective security requirement: the operation's, or
	// the document's when it sets none. Each element is one alternative
	// (OR); within it, the scheme names that must all be present (AND).
	// Nil: none declared; an empty alternative means "no credentials".
	Security [][]string
	// Schemes are the security schemes the requirements name, by name.
	Schemes map[string]Scheme
	// Retention is the raw value of an idempotency retention extension
	// (Extension names in retentionExtensions), with where it came from.
	Retention, RetentionFrom string
}

// KeyHeader is a header that carries the operation's idempotency key.
type KeyHeader struct {
	Name     string // as the description spells it
	Required bool
	From     string // what declared it, for the generated comment
}

// Scheme is a security scheme (components.securitySchemes; Swagger 2.0
// securityDefinitions).
type Scheme struct {
	Type string // http, apiKey, oauth2, openIdConnect, mutualTLS (Swagger 2.0 basic reads as http basic)
	// HTTPScheme is the http scheme, lower case (bearer, basic, digest).
	HTTPScheme string
	// In and Name are an apiKey's location (header, query, cookie) and
	// name.
	In, Name string
	// URLs are an oauth2 scheme's authorization, token and refresh URLs
	// and an openIdConnect scheme's openIdConnectUrl, in that order.
	URLs []string
	// OpenIDConnectURL is openIdConnectUrl.
	OpenIDConnectURL string
}

// methodOrder is the order operations of one path are listed in, and the
// path item members that are operations. QUERY is OpenAPI 3.2's.
var methodOrder = []string{"get", "head", "options", "trace", "query", "post", "put", "patch", "delete"}

// retentionExtensions are the extensions read as an idempotency window,
// on the operation first, then the document (docs/openapi.md).
var retentionExtensions = []string{"x-idempotency-ttl", "x-idempotency-key-ttl", "x-idempotency-retention", "x-idempotency-window", "x-idempotency-expiry"}

// maxRefDepth bounds a chain of $refs ($ref to a $ref ...), so a loop is
// an error, not a hang.
const maxRefDepth = 32

// Read decodes a description, JSON or YAML (YAML is any input that does
// not start with "{"). The error names what could not be read: the syntax
// error and its position, a missing or unknown version field, a path item
// or operation that is not an object.
func Read(data []byte) (*Document, error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n\ufeff")
	if len(trimmed) == 0 {
		return nil, errors.New("the description is empty")
	}
	var root json.RawMessage
	if trimmed[0] == '{' {
		if !json.Valid(trimmed) {
			var v any
			err := json.Unmarshal(trimmed, &v)
			return nil, fmt.Errorf("the description is not valid JSON: %w", err)
		}
		root = trimmed
	} else {
		var v any
		if err := yaml.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("the description is not valid YAML or JSON: %w", err)
		}
		j, err := json.Marshal(jsonable(v))
		if err != nil {
			return nil, fmt.Errorf("the description's YAML holds a value JSON cannot: %w", err)
		}
		root = j
	}
	r := &reader{root: root, refs: map[string]json.RawMessage{}}
	return r.read()
}

// jsonable turns what yaml.v3 decodes into values encoding/json takes:
// mappings with non-string keys (a response code 200 written unquoted)
// get their keys as strings.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonable(e)
		}
		return x
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = jsonable(e)
		}
		return x
	}
	return v
}

type reader struct {
	root     json.RawMessage
	top      map[string]json.RawMessage
	refs     map[string]json.RawMessage
	warnings []string
	swagger  bool
	consumes []string // Swagger 2.0 document consumes
}

func (r *reader) warn(format string, args ...any) {
	r.warnings = append(r.warnings, fmt.Sprintf(format, args...))
}

type rawInfo struct {
	Title   string `json:"title"`
	Version string `json:"version"`
}

type rawServer struct {
	URL       string `json:"url"`
	Variables map[string]struct {
		Default string `json:"default"`
	} `json:"variables"`
}

type rawParameter struct {
	Ref      string          `json:"$ref"`
	Name     string          `json:"name"`
	In       string          `json:"in"`
	Required bool            `json:"required"`
	Key      json.RawMessage `json:"x-idempotency-key"`
}

type rawRequestBody struct {
	Ref     string                     `json:"$ref"`
	Content map[string]json.RawMessage `json:"content"`
}

type rawOperation struct {
	OperationID string                 `json:"operationId"`
	Summary     string                 `json:"summary"`
	Description string                 `json:"description"`
	Parameters  []json.RawMessage      `json:"parameters"`
	RequestBody json.RawMessage        `json:"requestBody"`
	Security    *[]map[string][]string `json:"security"`
	Consumes    []string               `json:"consumes"`
	FernIdem    json.RawMessage        `json:"x-fern-idempotent"`
}

type rawScheme struct {
	Ref              string `json:"$ref"`
	Type             string `json:"type"`
	Scheme           string `json:"scheme"`
	In               string `json:"in"`
	Name             string `json:"name"`
	OpenIDConnectURL string `json:"openIdConnectUrl"`
	AuthorizationURL string `json:"authorizationUrl"` // Swagger 2.0
	TokenURL         string `json:"tokenUrl"`         // Swagger 2.0
	Flows            map[string]struct {
		AuthorizationURL string `json:"authorizationUrl"`
		TokenURL         string `json:"tokenUrl"`
		RefreshURL       string `json:"refreshUrl"`
	} `json:"flows"`
}

type fernHeader struct {
	Header string `json:"header"`
}

func (r *reader) read() (*Document, error) {
	if err := json.Unmarshal(r.root, &r.top); err != nil {
		return nil, errors.New("the description is not an object (an OpenAPI document is a mapping with openapi or swagger, info and paths)")
	}
	doc := &Document{}
	var version string
	switch {
	case r.has("openapi"):
		if err := json.Unmarshal(r.top["openapi"], &version); err != nil || !strings.HasPrefix(version, "3.") {
			return nil, fmt.Errorf("openapi: %s is not a version this reads (3.0, 3.1)", compact(r.top["openapi"]))
		}
	case r.has("swagger"):
		if err := json.Unmarshal(r.top["swagger"], &version); err != nil || version != "2.0" {
			return nil, fmt.Errorf("swagger: %s is not a version this reads (2.0)", compact(r.top["swagger"]))
		}
		r.swagger = true
	default:
		return nil, errors.New("the description names no version: neither openapi (3.x) nor swagger (2.0) is set")
	}
	doc.Spec = version
	if r.swagger {
		doc.Spec = "Swagger " + version
	} else {
		doc.Spec = "OpenAPI " + version
	}
	var info rawInfo
	r.field("info", &info)
	doc.Title, doc.Version = info.Title, info.Version

	schemes, err := r.schemes()
	if err != nil {
		return nil, err
	}
	doc.Servers = r.servers()
	var topSecurity *[]map[string][]string
	if r.has("security") {
		var s []map[string][]string
		if err := json.Unmarshal(r.top["security"], &s); err != nil {
			return nil, fmt.Errorf("security: not a list of security requirements: %w", err)
		}
		topSecurity = &s
	}
	r.field("consumes", &r.consumes)
	var fern []fernHeader
	if raw, ok := r.top["x-fern-idempotency-headers"]; ok {
		if err := json.Unmarshal(raw, &fern); err != nil {
			r.warn("x-fern-idempotency-headers: not a list of {header: NAME}: %v", err)
		}
	}
	docRetention, docRetentionFrom := extension(r.top, retentionExtensions)

	var paths map[string]json.RawMessage
	if raw, ok := r.top["paths"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &paths); err != nil {
			return nil, errors.New("paths: not a mapping of path templates to path items")
		}
	}
	keys := make([]string, 0, len(paths))
	for p := range paths {
		keys = append(keys, p)
	}
	slices.Sort(keys)
	for _, path := range keys {
		item, err := r.object(paths[path], "paths."+path)
		if err != nil {
			return nil, err
		}
		var common []json.RawMessage
		if raw, ok := item["parameters"]; ok {
			if err := json.Unmarshal(raw, &common); err != nil {
				return nil, fmt.Errorf("paths.%s.parameters: not a list", path)
			}
		}
		for _, m := range methodOrder {
			raw, ok := item[m]
			if !ok {
				continue
			}
			where := "paths." + path + "." + m
			var ro rawOperation
			if err := json.Unmarshal(raw, &ro); err != nil {
				return nil, fmt.Errorf("%s: not an operation object: %w", where, err)
			}
			op := Operation{Method: strings.ToUpper(m), Path: path, ID: ro.OperationID, Summary: summary(ro)}
			params := r.parameters(where, common, ro.Parameters)
			op.Key = keyOf(params, ro.FernIdem, fern)
			if op.Key != nil && !fieldNameRE.MatchString(op.Key.Name) {
				r.warn("%s: idempotency key header %q is not a valid field name; read as no key", where, op.Key.Name)
				op.Key = nil
			}
			op.MediaTypes = r.mediaTypes(where, ro, params)
			sec := topSecurity
			if ro.Security != nil {
				sec = ro.Security
			}
			if sec != nil {
				op.Security = [][]string{}
				op.Schemes = map[string]Scheme{}
				for _, alt := range *sec {
					names := make([]string, 0, len(alt))
					for name := range alt {
						names = append(names, name)
						if s, ok := schemes[name]; ok {
							op.Schemes[name] = s
						}
					}
					slices.Sort(names)
					op.Security = append(op.Security, names)
				}
			}
			var ext map[string]json.RawMessage
			_ = json.Unmarshal(raw, &ext)
			op.Retention, op.RetentionFrom = extension(ext, retentionExtensions)
			if op.Retention == "" {
				op.Retention, op.RetentionFrom = docRetention, docRetentionFrom
			}
			doc.Operations = append(doc.Operations, op)
		}
	}
	doc.Warnings = r.warnings
	return doc, nil
}

func (r *reader) has(k string) bool { _, ok := r.top[k]; return ok }

// field decodes a top-level member into v, warning when it has another
// shape (a description is read as far as it can be).
func (r *reader) field(k string, v any) {
	raw, ok := r.top[k]
	if !ok {
		return
	}
	if err := json.Unmarshal(raw, v); err != nil {
		r.warn("%s: not read: %v", k, err)
	}
}

// object returns a path item as a mapping, following a $ref to another
// path item of the document.
func (r *reader) object(raw json.RawMessage, where string) (map[string]json.RawMessage, error) {
	raw, err := r.deref(raw, where)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%s: not a path item object", where)
	}
	return m, nil
}

// deref follows raw's $ref, when it is an object with one, to the value it
// points to in this document.
func (r *reader) deref(raw json.RawMessage, where string) (json.RawMessage, error) {
	for range maxRefDepth {
		var ref struct {
			Ref string `json:"$ref"`
		}
		if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &ref) != nil || ref.Ref == "" {
			return raw, nil
		}
		next, err := r.resolve(ref.Ref)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		raw = next
	}
	return nil, fmt.Errorf("%s: $ref chain longer than %d (a loop?)", where, maxRefDepth)
}

// resolve returns the value a local JSON pointer reference ("#/a/b")
// names (RFC 6901).
func (r *reader) resolve(ref string) (json.RawMessage, error) {
	if v, ok := r.refs[ref]; ok {
		return v, nil
	}
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("$ref %q points outside this file; init reads one file and fetches nothing", ref)
	}
	cur := r.root
	for _, tok := range strings.Split(ref[2:], "/") {
		tok, err := url.PathUnescape(tok)
		if err != nil {
			return nil, fmt.Errorf("$ref %q: %w", ref, err)
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		var m map[string]json.RawMessage
		if json.Unmarshal(cur, &m) == nil {
			next, ok := m[tok]
			if !ok {
				return nil, fmt.Errorf("$ref %q: no member %q", ref, tok)
			}
			cur = next
			continue
		}
		var a []json.RawMessage
		i, err := strconv.Atoi(tok)
		if json.Unmarshal(cur, &a) != nil || err != nil || i < 0 || i >= len(a) {
			return nil, fmt.Errorf("$ref %q: %q names nothing", ref, tok)
		}
		cur = a[i]
	}
	r.refs[ref] = cur
	return cur, nil
}

// parameters merges path-level and operation-level parameters (an
// operation's parameter replaces the path's of the same name and
// location), following $refs.
func (r *reader) parameters(where string, common, own []json.RawMessage) []rawParameter {
	var out []rawParameter
	add := func(raw json.RawMessage) {
		raw, err := r.deref(raw, where+".parameters")
		if err != nil {
			r.warn("%v", err)
			return
		}
		var p rawParameter
		if err := json.Unmarshal(raw, &p); err != nil {
			r.warn("%s.parameters: a parameter is not an object", where)
			return
		}
		for i, q := range out {
			if q.Name == p.Name && strings.EqualFold(q.In, p.In) {
				out[i] = p
				return
			}
		}
		out = append(out, p)
	}
	for _, raw := range common {
		add(raw)
	}
	for _, raw := range own {
		add(raw)
	}
	return out
}

// keyOf finds the idempotency key header among params: Idempotency-Key
// (any case), else a header marked x-idempotency-key: true, else, for an
// operation marked x-fern-idempotent: true, the first header of the
// document's x-fern-idempotency-headers (required when the operation also
// declares it as a required parameter).
func keyOf(params []rawParameter, fernIdem json.RawMessage, fern []fernHeader) *KeyHeader {
	for _, p := range params {
		if strings.EqualFold(p.In, "header") && strings.EqualFold(p.Name, "Idempotency-Key") {
			return &KeyHeader{Name: p.Name, Required: p.Required, From: "header parameter " + p.Name}
		}
	}
	for _, p := range params {
		if strings.EqualFold(p.In, "header") && string(p.Key) == "true" {
			return &KeyHeader{Name: p.Name, Required: p.Required, From: "header parameter " + p.Name + " (x-idempotency-key: true)"}
		}
	}
	for _, f := range fern {
		if f.Header == "" {
			continue
		}
		for _, p := range params {
			if strings.EqualFold(p.In, "header") && strings.EqualFold(p.Name, f.Header) {
				return &KeyHeader{Name: f.Header, Required: p.Required, From: "header parameter " + p.Name + " (x-fern-idempotency-headers)"}
			}
		}
		if string(fernIdem) == "true" {
			return &KeyHeader{Name: f.Header, From: "x-fern-idempotent with x-fern-idempotency-headers"}
		}
	}
	return nil
}

// mediaTypes lists the request body's media types.
func (r *reader) mediaTypes(where string, ro rawOperation, params []rawParameter) []string {
	if r.swagger {
		body, form := false, false
		for _, p := range params {
			body = body || p.In == "body"
			form = form || p.In == "formData"
		}
		if !body && !form {
			return nil
		}
		consumes := ro.Consumes
		if consumes == nil {
			consumes = r.consumes
		}
		if len(consumes) == 0 {
			if form {
				return []string{"application/x-www-form-urlencoded"}
			}
			return []string{"application/json"}
		}
		return consumes
	}
	if len(ro.RequestBody) == 0 || string(ro.RequestBody) == "null" {
		return nil
	}
	raw, err := r.deref(ro.RequestBody, where+".requestBody")
	if err != nil {
		r.warn("%v", err)
		return nil
	}
	var rb rawRequestBody
	if err := json.Unmarshal(raw, &rb); err != nil {
		r.warn("%s.requestBody: not an object", where)
		return nil
	}
	out := make([]string, 0, len(rb.Content))
	for mt := range rb.Content {
		out = append(out, mt)
	}
	slices.Sort(out)
	return out
}

// schemes reads components.securitySchemes (Swagger 2.0:
// securityDefinitions).
func (r *reader) schemes() (map[string]Scheme, error) {
	var raw map[string]json.RawMessage
	if r.swagger {
		r.field("securityDefinitions", &raw)
	} else if c, ok := r.top["components"]; ok {
		var comps struct {
			SecuritySchemes map[string]json.RawMessage `json:"securitySchemes"`
		}
		if err := json.Unmarshal(c, &comps); err != nil {
			return nil, errors.New("components: not an object")
		}
		raw = comps.SecuritySchemes
	}
	out := map[string]Scheme{}
	for name, v := range raw {
		v, err := r.deref(v, "security scheme "+name)
		if err != nil {
			r.warn("%v", err)
			continue
		}
		var rs rawScheme
		if err := json.Unmarshal(v, &rs); err != nil {
			r.warn("security scheme %s: not an object", name)
			continue
		}
		s := Scheme{Type: rs.Type, HTTPScheme: strings.ToLower(rs.Scheme), In: strings.ToLower(rs.In), Name: rs.Name, OpenIDConnectURL: rs.OpenIDConnectURL}
		if rs.Type == "basic" { // Swagger 2.0
			s.Type, s.HTTPScheme = "http", "basic"
		}
		flows := make([]string, 0, len(rs.Flows))
		for f := range rs.Flows {
			flows = append(flows, f)
		}
		slices.Sort(flows)
		for _, f := range flows {
			fl := rs.Flows[f]
			s.URLs = append(s.URLs, fl.AuthorizationURL, fl.TokenURL, fl.RefreshURL)
		}
		s.URLs = append(s.URLs, rs.AuthorizationURL, rs.TokenURL)
		s.URLs = slices.DeleteFunc(s.URLs, func(u string) bool { return u == "" })
		out[name] = s
	}
	return out, nil
}

// servers lists the server URLs (Swagger 2.0: one per scheme of
// host + basePath).
func (r *reader) servers() []string {
	if r.swagger {
		var host, base string
		var schemes []string
		r.field("host", &host)
		r.field("basePath", &base)
		r.field("schemes", &schemes)
		if host == "" {
			if base == "" {
				return nil
			}
			return []string{base}
		}
		if len(schemes) == 0 {
			schemes = []string{"https"}
		}
		out := make([]string, 0, len(schemes))
		for _, s := range schemes {
			out = append(out, s+"://"+host+base)
		}
		return out
	}
	var servers []rawServer
	r.field("servers", &servers)
	out := make([]string, 0, len(servers))
	for _, s := range servers {
		u := s.URL
		for name, v := range s.Variables {
			u = strings.ReplaceAll(u, "{"+name+"}", v.Default)
		}
		if u != "" {
			out = append(out, u)
		}
	}
	return out
}

// extension returns the first of names that m has, as text (a JSON string
// unquoted, anything else as written), and its name.
func extension(m map[string]json.RawMessage, names []string) (value, name string) {
	for _, n := range names {
		raw, ok := m[n]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s, n
		}
		return compact(raw), n
	}
	return "", ""
}

func summary(ro rawOperation) string {
	s := ro.Summary
	if s == "" {
		s, _, _ = strings.Cut(strings.TrimSpace(ro.Description), "\n")
	}
	return s
}

// compact shows a raw JSON value in an error, cut to a readable length.
func compact(raw json.RawMessage) string {
	s := string(raw)
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return s
}
