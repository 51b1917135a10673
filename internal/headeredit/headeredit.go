// Package headeredit is a test helper: a handler wrapper that edits the
// response header in place as it is written, as Caddy's deferred header
// directive (`header >Set-Cookie "^(.*)$" "$1; Secure"`) does, so tests can
// show that what idemgate hands a ResponseWriter is that response's own.
package headeredit

import "net/http"

// SecureCookies wraps next so that, when the response header is written,
// every Set-Cookie value gets "; Secure" appended by assigning to the
// header's own value slice (not a copy), as Caddy's header handler edits
// values with a regular expression.
func SecureCookies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&secureWriter{ResponseWriter: w}, r)
	})
}

// secureWriter edits the Set-Cookie values once, at the header's write.
type secureWriter struct {
	http.ResponseWriter
	wrote bool
}

// WriteHeader edits the Set-Cookie values in place, then writes the header.
func (w *secureWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.wrote = true
		vs := w.Header()["Set-Cookie"]
		for i, v := range vs {
			vs[i] = v + "; Secure"
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write writes the header first when the handler did not.
func (w *secureWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer below.
func (w *secureWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
