package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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

// TestRecordLayout1 pins what tells a layout 1 record apart: no recipe and
// not a tombstone. Where it lies does not (docs/protocol.md, "Layout
// versions").
func TestRecordLayout1(t *testing.T) {
	for _, c := range []struct {
		name string
		rec  *store.Record
		want bool
	}{
		{"none", nil, false},
		{"layout 1 completed", &store.Record{State: store.Completed, Fingerprint: "fp"}, true},
		{"layout 1 running", &store.Record{State: store.Running, Fingerprint: "fp"}, true},
		{"current record", &store.Record{State: store.Completed, Fingerprint: "fp", Recipe: "b=raw&q=1&v=hs1"}, false},
		{"tombstone", &store.Record{State: store.Gone}, false},
	} {
		if got := c.rec.Layout1(); got != c.want {
			t.Errorf("%s: Layout1() = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestAbandonedKeepIsADay pins store.AbandonedKeep: docs/protocol.md spells
// it as 86400000 ms in the Valkey scripts it quotes and as 24 h in every
// layout, and records already written carry expiries computed with it.
func TestAbandonedKeepIsADay(t *testing.T) {
	if store.AbandonedKeep != 24*time.Hour {
		t.Fatalf("AbandonedKeep = %v, want 24h (docs/protocol.md)", store.AbandonedKeep)
	}
}
