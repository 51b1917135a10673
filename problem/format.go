package problem

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"text/template"
)

// MediaType is the media type of idemgate's own error bodies: RFC 9457
// problem details (section 3).
const MediaType = "application/problem+json"

// Format renders the proxy's problems in the error shape of the API behind
// it (config keys problems.template, problems.content_type and
// problems.headers, at the top level or in a route): a client library
// written for that API (stripe-go, for instance) parses its own error
// envelope and does not know RFC 9457, so it takes a problem for a network
// failure and retries it. A nil *Format writes RFC 9457 problem details.
// A Format is immutable once made by NewFormat and safe for concurrent use.
type Format struct {
	tmpl        *template.Template // nil: the RFC 9457 body
	contentType string
	headers     map[string]http.Header // by Kind.Slug, canonical names
}

// View is what a problems.template is executed with: the problem's
// members, each as idemgate would have written it in RFC 9457 form.
// Strings are raw: a template writing JSON passes each one through the
// template function json, which marshals a value (`{{json .Detail}}`
// writes a quoted, escaped JSON string). NewFormat refuses a template
// whose output for a problem with quotes and control characters in every
// member is not valid JSON when the content type is a JSON one.
type View struct {
	// Type is the problem type URI (under problems.type_base when set).
	Type string
	// Slug is the kind's name in the catalog (e.g. "key-reused"), the
	// last segment of Type; docs/problems.md lists every one.
	Slug string
	// Title is the kind's fixed summary.
	Title string
	// Status is the HTTP status code of the answer.
	Status int
	// Detail explains this occurrence; it may be "".
	Detail string
	// RetryAfter is the Retry-After of the answer in seconds, 0 when none
	// is sent.
	RetryAfter int
	// Extensions are the problem's extension members (RFC 9457 section
	// 3.2) by name; empty when it has none.
	Extensions map[string]any
}

// Funcs are the functions a problems.template may call besides text/template's
// own: json marshals its argument to JSON (a string becomes a quoted,
// escaped JSON string; a map or number its JSON form).
var Funcs = template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
}

// ParseTemplate parses text, a problems.template, with Funcs; name is used
// in its error messages (the file's path).
func ParseTemplate(name, text string) (*template.Template, error) {
	return template.New(name).Option("missingkey=zero").Funcs(Funcs).Parse(text)
}

// NewFormat returns the Format that renders problems with tmpl (nil: the
// RFC 9457 body), under contentType ("" means MediaType), and adds
// headers[slug] to the answers of that kind. It checks what can be
// checked before a request arrives: contentType is a media type; every
// slug names a proxy kind of the Catalog (the admin listener always
// answers RFC 9457); no header is one idemgate sets itself
// (Content-Type, Content-Length); tmpl executes for every proxy kind and,
// under a JSON content type, writes valid JSON for a problem whose members
// hold quotes, backslashes and control characters. Each error is a
// *KeyError naming the setting at fault.
func NewFormat(tmpl *template.Template, contentType string, headers map[string]map[string]string) (*Format, error) {
	f := &Format{tmpl: tmpl, contentType: contentType}
	if f.contentType == "" {
		f.contentType = MediaType
	}
	var errs []error
	mt, _, err := mime.ParseMediaType(f.contentType)
	if err == nil && !strings.Contains(mt, "/") {
		err = errors.New("want type/subtype")
	}
	if err != nil {
		errs = append(errs, &KeyError{Key: "content_type", Err: fmt.Errorf("%q is not a media type: %w", contentType, err)})
	}
	isJSON := mt == "application/json" || strings.HasSuffix(mt, "+json")
	if len(headers) > 0 {
		f.headers = make(map[string]http.Header, len(headers))
	}
	for slug, fields := range headers {
		k, ok := proxyKind(slug)
		if !ok {
			errs = append(errs, &KeyError{Key: "headers." + slug, Err: fmt.Errorf("is not a problem kind of the proxy (docs/problems.md, \"Problem types\")")})
			continue
		}
		h := make(http.Header, len(fields))
		for name, value := range fields {
			cn := textproto.CanonicalMIMEHeaderKey(name)
			switch {
			case !validFieldName(name):
				errs = append(errs, &KeyError{Key: "headers." + slug + "." + name, Err: errors.New("is not a valid header field name")})
			case cn == "Content-Type" || cn == "Content-Length" || cn == "Transfer-Encoding":
				errs = append(errs, &KeyError{Key: "headers." + slug + "." + name, Err: errors.New("is set by idemgate (use problems.content_type for the media type)")})
			case strings.ContainsAny(value, "\r\n\x00"):
				errs = append(errs, &KeyError{Key: "headers." + slug + "." + name, Err: errors.New("value holds a line break or NUL")})
			default:
				h[cn] = []string{value}
			}
		}
		f.headers[k.Slug] = h
	}
	if tmpl != nil {
		for _, k := range Catalog() {
			if k.Outcome == "" {
				continue
			}
			v := View{Type: k.Type(), Slug: k.Slug, Title: k.Title, Status: k.Status,
				Detail: "a \"sample\" detail\\ with\ncontrol\tcharacters </script>", RetryAfter: 1,
				// request_id is the client's X-Request-Id at run time,
				// which may hold quotes and backslashes, so the probe
				// carries one (TestFormatRequestIDCannotBreakTheJSON).
				Extensions: map[string]any{"sample": "a \"quoted\"\nvalue", "request_id": `x"}\`}}
			var buf bytes.Buffer
			if err := tmpl.Execute(&buf, v); err != nil {
				errs = append(errs, &KeyError{Key: "template", Err: fmt.Errorf("does not execute for kind %s: %w", k.Slug, err)})
				break
			}
			if isJSON && !json.Valid(buf.Bytes()) {
				errs = append(errs, &KeyError{Key: "template", Err: fmt.Errorf("writes invalid JSON for kind %s when the detail holds quotes and line breaks (pass every value through json, e.g. {{json .Detail}}): %s", k.Slug, buf.Bytes())})
				break
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return f, nil
}

// KeyError is a problem of one setting of a Format; Key is its path below
// the `problems:` section ("template", "headers.key-reused").
type KeyError struct {
	Key string
	Err error
}

// Error returns "key: problem".
func (e *KeyError) Error() string { return e.Key + ": " + e.Err.Error() }

// Unwrap returns the problem.
func (e *KeyError) Unwrap() error { return e.Err }

// proxyKind returns the proxy kind (one with an outcome) named slug.
func proxyKind(slug string) (Kind, bool) {
	for _, k := range Catalog() {
		if k.Slug == slug && k.Outcome != "" {
			return k, true
		}
	}
	return Kind{}, false
}

// validFieldName reports whether s is an RFC 9110 token (section 5.1).
func validFieldName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// write answers with d in f's shape; d.Type is already under the
// publisher's base. When the template fails on d (it executed for every
// kind at load, so only a template that branches on the detail can), the
// answer is RFC 9457 under MediaType, and the error is returned for the
// caller to log.
func (f *Format) write(w http.ResponseWriter, d Details) error {
	h := w.Header()
	for name, vals := range f.headers[slugOf(d.Type)] {
		h[name] = vals
	}
	if f.tmpl == nil {
		writeAs(w, d, f.contentType)
		return nil
	}
	var buf bytes.Buffer
	err := f.tmpl.Execute(&buf, View{Type: d.Type, Slug: slugOf(d.Type), Title: d.Title, Status: d.Status,
		Detail: d.Detail, RetryAfter: d.RetryAfter, Extensions: extensionsOf(d)})
	if err != nil {
		writeAs(w, d, MediaType)
		return fmt.Errorf("problems.template: %w", err)
	}
	body := buf.Bytes()
	if len(body) == 0 || body[len(body)-1] != '\n' {
		body = append(body, '\n')
	}
	writeBody(w, d, f.contentType, body)
	return nil
}

// slugOf returns the last path segment of a type URI (the kind's slug,
// whatever base it is under).
func slugOf(typeURI string) string {
	return typeURI[strings.LastIndexAny(typeURI, "/#")+1:]
}

// writeBody answers with status d.Status, body under contentType, and the
// fields every problem answer carries.
func writeBody(w http.ResponseWriter, d Details, contentType string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if d.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(d.RetryAfter))
	}
	w.WriteHeader(d.Status)
	_, _ = w.Write(body)
}

// extensionsOf returns d's extension members by their JSON names.
func extensionsOf(d Details) map[string]any {
	ext := map[string]any{}
	if d.RequestID != "" {
		ext["request_id"] = d.RequestID
	}
	return ext
}
