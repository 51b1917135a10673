package fromopenapi

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemgate/idemgate/config"
)

// FuzzRead: no input makes Read, Generate or Render panic, and whatever
// Read accepts gives a configuration that loads (the promise init makes:
// validate accepts its output without edits).
func FuzzRead(f *testing.F) {
	m, _ := filepath.Glob("testdata/synthetic/*")
	for _, p := range m {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("openapi: 3.0.0\npaths: {/a: {post: {parameters: [{name: Idempotency-Key, in: header}]}}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := Read(data)
		if err != nil {
			return
		}
		buf := render(t, doc)
		if _, err := config.Parse(buf.Bytes(), nil); err != nil {
			t.Fatalf("the configuration generated from\n%s\ndoes not load: %v\n%s", data, err, buf.String())
		}
	})
}

// TestOddNamesStillLoad: a header name that is not a field name (as an
// idempotency key or an apiKey owner) and a relative server path that
// carries a query give a configuration that loads: the key is read as
// absent, the owner is left to choose, the query is dropped.
func TestOddNamesStillLoad(t *testing.T) {
	for _, in := range []string{
		"openapi: 3.0.0\npaths: {/a: {post: {parameters: [{name: 'Idempotency Key', in: header, x-idempotency-key: true}]}}}\n",
		"openapi: 3.0.0\ncomponents: {securitySchemes: {k: {type: apiKey, in: header, name: 'X-P;t-Token'}}}\nsecurity: [{k: []}]\npaths: {/a: {post: {}}}\n",
		"openapi: 3.0.0\nservers: [{url: '/relativ?/base'}]\npaths: {/a: {post: {}}}\n",
		"openapi: 3.0.0\nservers: [{url: 'https://h/x?q=1#f'}]\npaths: {/a: {post: {}}}\n",
	} {
		doc, err := Read([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		buf := render(t, doc)
		if _, err := config.Parse(buf.Bytes(), nil); err != nil {
			t.Errorf("%q: the generated configuration does not load: %v", in, err)
		}
	}
}

// render generates the configuration of doc with the default options and
// renders it; an error from either fails the test.
func render(t *testing.T, doc *Document) *bytes.Buffer {
	t.Helper()
	p, err := Generate(doc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := p.Render(&buf); err != nil {
		t.Fatal(err)
	}
	return &buf
}
