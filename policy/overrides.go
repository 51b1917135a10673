package policy

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// MethodOverrideHeaders are the request fields by which common frameworks
// (Express method-override, ASP.NET, Google APIs, Symfony) let a request
// stand for another method. With the _method query parameter and the
// _method form field (Rails, Laravel, Symfony) they are the method
// overrides Decide considers. A field whose name differs from one of them
// only in letter case and in "_" for "-" counts as that field: Rack, WSGI
// and CGI servers hand both spellings to the application as one
// HTTP_X_HTTP_METHOD_OVERRIDE.
var MethodOverrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// headerOverrides reports whether r carries any method-override field
// (isOverrideField).
func headerOverrides(h http.Header) bool {
	for name, v := range h {
		if len(v) > 0 && isOverrideField(name) {
			return true
		}
	}
	return false
}

// overrideFields returns the names of h's method-override fields, sorted so
// a refusal names the same field every time.
func overrideFields(h http.Header) []string {
	var out []string
	for name, v := range h {
		if len(v) > 0 && isOverrideField(name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// isOverrideField reports whether a field name is one of
// MethodOverrideHeaders in any letter case, with "_" and "-" taken as the
// same character: Rack, WSGI and CGI servers turn both into "_" (Go keeps
// X-HTTP_Method_Override as its own field, X-Http_method_override).
func isOverrideField(name string) bool {
	for _, o := range MethodOverrideHeaders {
		if len(name) == len(o) && equalFoldDash(name, o) {
			return true
		}
	}
	return false
}

// equalFoldDash compares two ASCII strings of one length ignoring letter
// case and treating "_" as "-".
func equalFoldDash(a, b string) bool {
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == '_' {
			x = '-'
		}
		if y == '_' {
			y = '-'
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// splitMethods returns the upper-case methods a field value names: each
// comma-separated element, trimmed.
func splitMethods(v string) []string {
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.ToUpper(strings.Trim(e, " \t")); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// mayHaveMethodParam is a cheap filter before methodParams: a key that
// isMethodName accepts spells out "method" or is escaped.
func mayHaveMethodParam(q string) bool {
	return strings.Contains(q, "method") || strings.ContainsRune(q, '%')
}

// methodParams returns the upper-case values of every _method key
// (isMethodName) in a query or urlencoded form ("&" and ";" separate pairs, "+" is a space,
// malformed escapes are kept as sent).
func methodParams(q string) []string {
	var out []string
	for q != "" {
		var pair string
		if i := strings.IndexAny(q, "&;"); i >= 0 {
			pair, q = q[:i], q[i+1:]
		} else {
			pair, q = q, ""
		}
		k, v, _ := strings.Cut(pair, "=")
		if !isMethodName(unescapeForm(k)) {
			continue
		}
		out = append(out, splitMethods(unescapeForm(v))...)
	}
	return out
}

// isMethodName reports whether a decoded query or form parameter name
// reaches a framework as _method: as sent, or as PHP registers it (Laravel,
// Symfony): the name read up to a NUL byte, leading spaces dropped (or not:
// both are taken), ".", " " and an unmatched "[" as "_", and "_method[…]"
// an array named _method.
func isMethodName(k string) bool {
	if k == "_method" {
		return true
	}
	if !strings.Contains(k, "method") {
		return false
	}
	if i := strings.IndexByte(k, 0); i >= 0 {
		k = k[:i]
	}
	if i := strings.IndexByte(k, '['); i > 0 && strings.IndexByte(k[i+1:], ']') >= 0 {
		k = k[:i]
	}
	return phpMethodName(k) || phpMethodName(strings.TrimLeft(k, " "))
}

// phpMethodName reports whether k is "_method" once ".", " " and "[" are
// read as "_", without allocating.
func phpMethodName(k string) bool {
	const want = "_method"
	if len(k) != len(want) {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c == '.' || c == ' ' || c == '[' {
			c = '_'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}

func unescapeForm(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// bodyKind says whether a framework may read a _method member from a
// request body, and how.
type bodyKind int

const (
	noBody bodyKind = iota
	// formBody: application/x-www-form-urlencoded, multipart/form-data, or
	// no media type at all (Rack's form_data? reads a POST without
	// Content-Type as a form).
	formBody
	// jsonBody: a Content-Type naming "/json" or "+json", as Laravel's
	// isJson tests it; Laravel and Express method-override getters read
	// input from such a body.
	jsonBody
)

// bodyKindOf returns how r's body may carry a _method member, from its
// method and Content-Type alone; GET and HEAD bodies are never read.
func bodyKindOf(r *http.Request) bodyKind {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return noBody
	}
	v := r.Header["Content-Type"]
	if len(v) == 0 {
		return formBody
	}
	mt, _, _ := strings.Cut(v[0], ";")
	mt = strings.TrimSpace(mt)
	switch {
	case mt == "", strings.EqualFold(mt, "application/x-www-form-urlencoded"), strings.EqualFold(mt, "multipart/form-data"):
		return formBody
	case containsFold(v[0], "/json"), containsFold(v[0], "+json"):
		return jsonBody
	}
	return noBody
}

// containsFold reports whether s contains the lower-case ASCII substr in
// any letter case, without allocating.
func containsFold(s, substr string) bool {
	for i := 0; i+len(substr) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(substr)], substr) {
			return true
		}
	}
	return false
}

// maxMethodField bounds the _method value read from a multipart part.
const maxMethodField = 64

// bodyMethods returns how a refusal names the body's override, and the
// upper-case values of every _method member of r's body: the fields of a
// form (formMethods) or the top-level string members of a JSON object
// (jsonMethods).
func bodyMethods(r *http.Request, body []byte) (string, []string) {
	if len(body) == 0 {
		return "", nil
	}
	switch bodyKindOf(r) {
	case formBody:
		return "the _method form field", formMethods(r.Header.Get("Content-Type"), body)
	case jsonBody:
		return "the _method member of the JSON body", jsonMethods(body)
	}
	return "", nil
}

// formMethods returns the upper-case values of every _method field
// (isMethodName) of a form body with this content type ("" reads as
// urlencoded); none for other bodies or parse errors. A malformed parameter
// of the content type does not stop the urlencoded body being read: Rack
// and PHP read it by the media type alone.
func formMethods(contentType string, body []byte) []string {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	switch mt {
	case "", "application/x-www-form-urlencoded":
		if !bytes.Contains(body, []byte("method")) && !bytes.ContainsRune(body, '%') {
			return nil
		}
		return methodParams(string(body))
	case "multipart/form-data":
		_, params, err := mime.ParseMediaType(contentType)
		if err != nil || params["boundary"] == "" {
			return nil
		}
		var out []string
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		for {
			part, err := mr.NextPart()
			if err != nil {
				return out
			}
			if isMethodName(part.FormName()) {
				v, _ := io.ReadAll(io.LimitReader(part, maxMethodField))
				out = append(out, splitMethods(string(v))...)
			}
		}
	}
	return nil
}

// jsonMethods returns the upper-case values of every top-level string
// member "_method" of a JSON object (duplicates included: parsers differ on
// which one wins), up to the first syntax error; none for other values. A
// leading byte order mark is skipped. Member names are compared after JSON
// unescaping, as PHP's json_decode and JSON.parse read them.
func jsonMethods(body []byte) []string {
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	if !bytes.Contains(body, []byte("_method")) && !bytes.ContainsRune(body, '\\') {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var out []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return out
		}
		v, err := dec.Token()
		if err != nil {
			return out
		}
		if d, ok := v.(json.Delim); ok {
			if skipJSON(dec, d) != nil {
				return out
			}
			continue
		}
		if k, _ := t.(string); k == "_method" {
			if m, ok := v.(string); ok {
				out = append(out, splitMethods(m)...)
			}
		}
	}
	return out
}

// skipJSON reads the rest of the array or object that open began.
func skipJSON(dec *json.Decoder, open json.Delim) error {
	if open != '{' && open != '[' {
		return nil
	}
	for depth := 1; depth > 0; {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

func isUpperASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'a' <= s[i] && s[i] <= 'z' {
			return false
		}
	}
	return true
}
