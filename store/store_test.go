package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemgate/idemgate/store"
)

func TestOpErrorWrapsUnavailableAndCause(t *testing.T) {
	var err error = &store.OpError{Store: "bolt", Op: "claim", Err: context.DeadlineExceeded}
	err = fmt.Errorf("proxy: %w", err)
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want it to wrap ErrUnavailable and the cause", err)
	}
	var op *store.OpError
	if !errors.As(err, &op) || op.Store != "bolt" || op.Op != "claim" {
		t.Fatalf("errors.As = %+v, want the OpError", op)
	}
	if got, want := op.Error(), "bolt store: claim: store unavailable: context deadline exceeded"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}
