package sweep

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestLoopSweepsReportsAndStops runs a real loop on a 1 ms ticker: it
// sweeps, tells failed of a failing sweep, and after Stop (which cancels
// the sweep under way and is safe to repeat) sweeps no more.
func TestLoopSweepsReportsAndStops(t *testing.T) {
	swept := make(chan struct{}, 1)
	reported := make(chan error, 1)
	boom := errors.New("boom")
	l := Start(time.Millisecond, func(ctx context.Context) (int, error) {
		select {
		case swept <- struct{}{}:
		default:
		}
		return 1, boom
	}, func(n int, err error) {
		if n != 1 {
			t.Errorf("failed told %d removed, want 1", n)
		}
		select {
		case reported <- err:
		default:
		}
	})
	<-swept
	if err := <-reported; !errors.Is(err, boom) {
		t.Fatalf("failed told %v, want boom", err)
	}
	l.Stop()
	l.Stop()
	select {
	case <-swept:
	default:
	}
	select {
	case <-swept:
		t.Fatal("swept after Stop")
	case <-time.After(20 * time.Millisecond):
	}
}

// TestLoopOff: an interval <= 0 starts no sweep and Stop returns at once.
func TestLoopOff(t *testing.T) {
	l := Start(0, func(context.Context) (int, error) {
		t.Error("swept with the loop off")
		return 0, nil
	}, nil)
	l.Stop()
}
