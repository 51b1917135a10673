package middleware_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/store/memory"
)

// TestNewTwiceOnOneRegistererSaysWhatToDo: a second New on the Registerer
// of a first (as with prometheus.DefaultRegisterer in two tests) fails,
// even after the first one's ctx ended, with an error that says how to
// give each its own, and still wraps Prometheus's (the Caddy module tells
// that one apart). One registry wrapped with a label per middleware, as
// the error suggests, takes both.
func TestNewTwiceOnOneRegistererSaysWhatToDo(t *testing.T) {
	cfg, err := config.Parse([]byte(testConfig("127.0.0.1:1", "metrics:")), nil, config.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	reg := prometheus.NewRegistry() // stands for prometheus.DefaultRegisterer
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := middleware.New(ctx, middleware.Options{Config: cfg, Store: st, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	cancel()
	_, err = middleware.New(context.Background(), middleware.Options{Config: cfg, Store: st, Registerer: reg})
	if err == nil {
		t.Fatal("a second New on the same Registerer succeeded")
	}
	for _, want := range []string{"Registerer of its own", "prometheus.NewRegistry()", "prometheus.WrapRegistererWith"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Errorf("error %v no longer wraps prometheus.AlreadyRegisteredError", err)
	}

	shared := prometheus.NewRegistry()
	for _, name := range []string{"a", "b"} {
		wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"idemgate_handler": name}, shared)
		if _, err := middleware.New(context.Background(), middleware.Options{Config: cfg, Store: st, Registerer: wrapped}); err != nil {
			t.Fatalf("New with a registry wrapped with idemgate_handler=%s: %v", name, err)
		}
	}
}
