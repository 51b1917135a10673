// Package middlewaretest builds the in-process engine (the middleware)
// from a YAML configuration for the tests that put it in front of a
// handler, so each shape's tests build it one way.
package middlewaretest

import (
	"context"
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware"
)

// Engine returns the middleware of the configuration yaml, parsed for in
// process use; its store is closed at the test's end. A configuration or
// store error fails the test.
func Engine(t testing.TB, yaml string) func(http.Handler) http.Handler {
	t.Helper()
	return EngineWith(t, yaml, middleware.Options{})
}

// EngineWith is Engine with the options o; its Config is set to the
// configuration yaml parsed for in process use.
func EngineWith(t testing.TB, yaml string, o middleware.Options) func(http.Handler) http.Handler {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), nil, config.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	o.Config = cfg
	idem, err := middleware.New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	return idem
}
