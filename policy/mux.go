package policy

import (
	"fmt"
	"net/http"
	pathpkg "path"
)

// register adds r's pattern to mux, turning ServeMux's panic on an invalid
// or conflicting pattern into an error.
func register(mux *http.ServeMux, r *Route) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%v", v)
		}
	}()
	mux.Handle(lowerPatternHost(r.Match), routeHandler{route: r})
	return nil
}

// fallbackHandler marks the catch-all pattern that New adds below every
// route: a match of it means the defaults route, as no match does.
type fallbackHandler struct{}

// ServeHTTP is never called: the mux is only asked which handler matches.
func (fallbackHandler) ServeHTTP(http.ResponseWriter, *http.Request) {}

// registerFallback adds the catch-all pattern "/" to mux, unless a route's
// pattern already matches every request (it conflicts with "/" then, and
// the error says so).
func registerFallback(mux *http.ServeMux) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%v", v)
		}
	}()
	mux.Handle("/", fallbackHandler{})
	return nil
}

// CleanPath returns p as net/http's ServeMux matches it: rooted, dot
// segments resolved, repeated slashes merged, a trailing slash kept. The
// proxy uses it too, so a route decision and its bypass checks see one path.
func CleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := pathpkg.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}
