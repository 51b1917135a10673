package lazy_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/lazy"
	"github.com/idemgate/idemgate/store/memory"
	"github.com/idemgate/idemgate/store/storetest"
)

func TestBeforeSetFailsClosed(t *testing.T) {
	l := lazy.New("valkey")
	ctx := t.Context()
	id := store.Identity{Owner: "o", Scope: "s", Key: "k"}
	err := l.Ping(ctx)
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "valkey store is not connected yet") {
		t.Fatalf("Ping before Set = %v", err)
	}
	l.SetError(errors.New("dial tcp 127.0.0.1:1: connection refused"))
	if err := l.Ping(ctx); !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Ping does not quote the last connection error: %v", err)
	}
	if res, err := l.Claim(ctx, store.ClaimParams{Identity: id, Token: "t", Lease: time.Second}); !errors.Is(err, store.ErrUnavailable) || res.State == store.Claimed {
		t.Fatalf("Claim before Set = %+v, %v", res, err)
	}
	if ok, err := l.Complete(ctx, id, "t", store.Response{Status: 200}); ok || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Complete before Set = %v, %v", ok, err)
	}
	ch, stop := l.Watch(id)
	defer stop()
	select {
	case <-ch:
	default:
		t.Fatal("Watch before Set must wake at once")
	}
	if l.Connected() {
		t.Fatal("Connected before Set")
	}
	mem := memory.New()
	if err := l.Set(mem); err != nil {
		t.Fatal(err)
	}
	if err := l.Ping(ctx); err != nil || !l.Connected() {
		t.Fatalf("Ping after Set = %v", err)
	}
	if err := l.Set(memory.New()); err == nil {
		t.Fatal("a second Set must fail")
	}
	_ = l.Close()
	if err := l.Set(memory.New()); err == nil {
		t.Fatal("Set after Close must fail")
	}
}

func TestContractOnceSet(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		l := lazy.New("memory")
		if err := l.Set(memory.New()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	})
}
