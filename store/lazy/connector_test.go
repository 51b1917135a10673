package lazy_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/syncbuf"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/lazy"
	"github.com/idemgate/idemgate/store/memory"
)

// TestConnectorConnectsAfterFailures: the first failed attempt ends
// FirstAttempt, is the lazy store's error (keyed requests fail closed
// naming it) and is logged once; the store is put behind the lazy one when
// an attempt succeeds, and OnUp follows.
func TestConnectorConnectsAfterFailures(t *testing.T) {
	var logs syncbuf.Buffer
	var mu sync.Mutex
	attempts, ups := 0, []bool{}
	lz := lazy.New("valkey")
	t.Cleanup(func() { _ = lz.Close() })
	c := &lazy.Connector{
		Open: func(context.Context) (store.Store, error) {
			mu.Lock()
			defer mu.Unlock()
			attempts++
			if attempts < 3 {
				return nil, errors.New("dial tcp 127.0.0.1:1: connection refused")
			}
			return memory.New(), nil
		},
		Lazy: lz, Driver: "valkey", Log: slog.New(slog.NewTextHandler(&logs, nil)),
		OnUp: func(up bool) { mu.Lock(); ups = append(ups, up); mu.Unlock() },
	}
	done := make(chan error, 1)
	go func() { done <- c.Connect(t.Context(), 0) }()
	select {
	case <-c.FirstAttempt():
	case <-time.After(5 * time.Second):
		t.Fatal("FirstAttempt not closed after the first attempt")
	}
	if err := <-done; err != nil {
		t.Fatalf("Connect: %v", err)
	}
	if !lz.Connected() {
		t.Fatal("the store is not behind the lazy one")
	}
	if err := lz.Ping(t.Context()); err != nil {
		t.Fatalf("Ping through the lazy store: %v", err)
	}
	if n := strings.Count(logs.String(), "store not reachable yet"); n != 1 {
		t.Errorf("warned %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "store connected") {
		t.Errorf("no store connected line:\n%s", logs.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if attempts != 3 || len(ups) != 1 || !ups[0] {
		t.Errorf("attempts %d, OnUp %v; want 3 and [true]", attempts, ups)
	}
}

// TestConnectorNoteKeepsTheNewestCheck: a check that started before the
// one applied last changes nothing (a slow ping from before an outage
// ended), and a change of state is logged once each way.
func TestConnectorNoteKeepsTheNewestCheck(t *testing.T) {
	var logs syncbuf.Buffer
	var ups []bool
	lz := lazy.New("valkey")
	t.Cleanup(func() { _ = lz.Close() })
	c := &lazy.Connector{
		Open: func(context.Context) (store.Store, error) { return memory.New(), nil },
		Lazy: lz, Driver: "valkey", Log: slog.New(slog.NewTextHandler(&logs, nil)),
		OnUp: func(up bool) { ups = append(ups, up) },
	}
	if err := c.Connect(t.Context(), time.Second); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	c.Note(t0.Add(time.Millisecond), store.ErrUnavailable)
	c.Note(t0, nil) // older news
	c.Note(t0.Add(2*time.Millisecond), store.ErrNotAcknowledged)
	if got := strings.Count(logs.String(), "store connection lost"); got != 1 {
		t.Errorf("lost logged %d times", got)
	}
	if got := strings.Count(logs.String(), "store connection back"); got != 1 {
		t.Errorf("back logged %d times", got)
	}
	if want := []bool{true, false, true}; len(ups) != len(want) || ups[0] != want[0] || ups[1] != want[1] || ups[2] != want[2] {
		t.Errorf("OnUp %v, want %v", ups, want)
	}
}

// TestConnectorDownFollowsChecks: Down is the state of the latest check
// applied, only once connected (before, the lazy store fails at once and
// names the connection error). An operation that fails without a check
// changes nothing, a store that answers without its replicas is not down,
// and older news is ignored as for OnUp.
func TestConnectorDownFollowsChecks(t *testing.T) {
	lz := lazy.New("valkey")
	t.Cleanup(func() { _ = lz.Close() })
	c := &lazy.Connector{
		Open: func(context.Context) (store.Store, error) { return memory.New(), nil },
		Lazy: lz, Driver: "valkey", Log: slog.New(slog.DiscardHandler),
	}
	t0 := time.Now()
	c.Note(t0, store.ErrUnavailable)
	if c.Down() {
		t.Fatal("Down before the first connection")
	}
	if err := c.Connect(t.Context(), time.Second); err != nil {
		t.Fatal(err)
	}
	if c.Down() {
		t.Fatal("Down right after connecting")
	}
	steps := []struct {
		at   time.Duration
		err  error
		down bool
	}{
		{time.Second, store.ErrUnavailable, true},
		{500 * time.Millisecond, nil, true}, // began before the failed one
		{2 * time.Second, store.ErrNotAcknowledged, false},
		{3 * time.Second, errors.New("dial tcp: connection refused"), true},
		{4 * time.Second, nil, false},
	}
	for _, s := range steps {
		c.Note(t0.Add(s.at), s.err)
		if c.Down() != s.down {
			t.Fatalf("after a check at +%v with %v: Down %v, want %v", s.at, s.err, c.Down(), s.down)
		}
	}
}
